// MLA forward: queries and the new latents for all rows, append to the cache, then attention per
// head in parallel, output gate and o_proj.
#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "model/ops.h"

namespace deltafin::model {
namespace {

// Query row r (absolute position first + r) sees cached positions [0, first + r].
void attend_expanded(const MlaShape& sh, const WeightMatrix& kv_b, const MlaCache& cache,
                     const float* q, int64_t n, float* o) {
  const int64_t nh = sh.n_heads, kvw = sh.nope_dim + sh.v_dim, total = cache.n_positions;
  const int64_t first = total - n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.qk_dim()));
  std::vector<float> kv(total * nh * kvw);
  kernels::matmul(kv_b, cache.latent.data(), total, kv.data());
  base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
    std::vector<float> p(total);
    for (int64_t h = static_cast<int64_t>(hb); h < static_cast<int64_t>(he); ++h) {
      for (int64_t r = 0; r < n; ++r) {
        const float* qh = q + (r * nh + h) * sh.qk_dim();
        const int64_t len = first + r + 1;
        for (int64_t s = 0; s < len; ++s) {
          const float* kn = kv.data() + (s * nh + h) * kvw;
          p[s] = (dot(qh, kn, sh.nope_dim) +
                  dot(qh + sh.nope_dim, cache.k_pe.data() + s * sh.rope_dim, sh.rope_dim)) *
                 scale;
        }
        kernels::softmax(p.data(), len);
        float* oh = o + (r * nh + h) * sh.v_dim;
        std::fill(oh, oh + sh.v_dim, 0.0f);
        for (int64_t s = 0; s < len; ++s) {
          const float* vs = kv.data() + (s * nh + h) * kvw + sh.nope_dim;
          for (int64_t c = 0; c < sh.v_dim; ++c) oh[c] += p[s] * vs[c];
        }
      }
    }
  });
}

// Per head: q̂ = W_UKᵀ q_nope, scores against the latents, ō = Σ p·latent, o = W_UV ō.
void attend_absorbed(const MlaShape& sh, const WeightMatrix& kv_b, const MlaCache& cache,
                     const float* q, int64_t n, float* o) {
  const int64_t nh = sh.n_heads, kvw = sh.nope_dim + sh.v_dim, total = cache.n_positions;
  const int64_t rank = sh.kv_lora_rank, first = total - n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.qk_dim()));
  base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
    std::vector<float> wuk(sh.nope_dim * rank), qhat(rank), obar(n * rank), p(total),
        oh(n * sh.v_dim);
    for (int64_t h = static_cast<int64_t>(hb); h < static_cast<int64_t>(he); ++h) {
      for (int64_t i = 0; i < sh.nope_dim; ++i)
        kernels::decode_row(kv_b, h * kvw + i, wuk.data() + i * rank);
      for (int64_t r = 0; r < n; ++r) {
        const float* qh = q + (r * nh + h) * sh.qk_dim();
        std::fill(qhat.begin(), qhat.end(), 0.0f);
        for (int64_t i = 0; i < sh.nope_dim; ++i) {
          const float qi = qh[i];
          const float* wi = wuk.data() + i * rank;
          for (int64_t c = 0; c < rank; ++c) qhat[c] += qi * wi[c];
        }
        const int64_t len = first + r + 1;
        for (int64_t s = 0; s < len; ++s) {
          p[s] = (dot(qhat.data(), cache.latent.data() + s * rank, rank) +
                  dot(qh + sh.nope_dim, cache.k_pe.data() + s * sh.rope_dim, sh.rope_dim)) *
                 scale;
        }
        kernels::softmax(p.data(), len);
        float* ob = obar.data() + r * rank;
        std::fill(ob, ob + rank, 0.0f);
        for (int64_t s = 0; s < len; ++s) {
          const float* ls = cache.latent.data() + s * rank;
          for (int64_t c = 0; c < rank; ++c) ob[c] += p[s] * ls[c];
        }
      }
      const WeightMatrix wuv = kernels::row_block(kv_b, h * kvw + sh.nope_dim, sh.v_dim);
      kernels::matmul_rows(wuv, obar.data(), n, oh.data(), 0, sh.v_dim);
      for (int64_t r = 0; r < n; ++r)
        std::copy(oh.data() + r * sh.v_dim, oh.data() + (r + 1) * sh.v_dim,
                  o + (r * nh + h) * sh.v_dim);
    }
  });
}

bool prefer_expanded(const MlaShape& sh, int64_t n, int64_t total) {
  const double per_pos = static_cast<double>(sh.n_heads) * (sh.nope_dim + sh.v_dim) *
                         sh.kv_lora_rank;  // kv_b for one position, or absorb+unabsorb for one row
  const double expanded = total * per_pos + n * total * sh.n_heads * (sh.qk_dim() + sh.v_dim);
  const double absorbed =
      n * per_pos + n * total * sh.n_heads * (2.0 * sh.kv_lora_rank + sh.rope_dim);
  return expanded < absorbed;
}

}  // namespace

uint64_t mla_cache_bytes_per_position(const MlaShape& sh) {
  return static_cast<uint64_t>(sh.kv_lora_rank + sh.rope_dim) * sizeof(float);
}

uint64_t mla_auto_scratch_bytes(const MlaShape& sh, int64_t rows, int64_t max_positions) {
  // prefer_expanded is linear in the cache length: it holds for every length up to a threshold
  // (or for all of them), so the widest expanded pass is at the last length where it holds.
  int64_t lo = 0, hi = max_positions;  // largest length in [0, max] preferring expanded: lo
  if (prefer_expanded(sh, rows, hi)) {
    lo = hi;
  } else {
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (prefer_expanded(sh, rows, mid) ? lo : hi) = mid;
    }
  }
  return static_cast<uint64_t>(lo) * sh.n_heads * (sh.nope_dim + sh.v_dim) * sizeof(float);
}

void mla_forward(const MlaShape& sh, const MlaWeights& w, const float* x, int64_t n,
                 MlaCache& cache, MlaMode mode, float* out) {
  const int64_t nh = sh.n_heads, rank = sh.kv_lora_rank;
  std::vector<float> q(n * nh * sh.qk_dim());
  if (sh.q_lora_rank > 0) {
    std::vector<float> qa(n * sh.q_lora_rank);
    kernels::matmul(w.q_a, x, n, qa.data());
    rmsnorm_rows(qa.data(), w.q_a_norm.data(), n, sh.q_lora_rank, sh.latent_norm_eps, qa.data());
    kernels::matmul(w.q_b, qa.data(), n, q.data());
  } else {
    kernels::matmul(w.q_proj, x, n, q.data());
  }

  const int64_t ckv_w = rank + sh.rope_dim;
  std::vector<float> ckv(n * ckv_w);
  kernels::matmul(w.kv_a, x, n, ckv.data());
  const int64_t first = cache.n_positions;
  cache.latent.resize((first + n) * rank);
  cache.k_pe.resize((first + n) * sh.rope_dim);
  for (int64_t r = 0; r < n; ++r) {
    rmsnorm_rows(ckv.data() + r * ckv_w, w.kv_a_norm.data(), 1, rank, sh.latent_norm_eps,
                 cache.latent.data() + (first + r) * rank);
    std::copy(ckv.data() + r * ckv_w + rank, ckv.data() + (r + 1) * ckv_w,
              cache.k_pe.data() + (first + r) * sh.rope_dim);
  }
  cache.n_positions = first + n;

  std::vector<float> o(n * nh * sh.v_dim);
  const bool expanded = mode == MlaMode::kExpanded ||
                        (mode == MlaMode::kAuto && prefer_expanded(sh, n, cache.n_positions));
  if (expanded) {
    attend_expanded(sh, w.kv_b, cache, q.data(), n, o.data());
  } else {
    attend_absorbed(sh, w.kv_b, cache, q.data(), n, o.data());
  }

  if (sh.output_gate) {
    std::vector<float> gate(n * nh * sh.v_dim);
    kernels::matmul(w.g_proj, x, n, gate.data());
    for (size_t i = 0; i < o.size(); ++i) o[i] *= sigmoid(gate[i]);
  }
  kernels::matmul(w.o_proj, o.data(), n, out);
}

}  // namespace deltafin::model
