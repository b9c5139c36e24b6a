// MLA forward: queries and the new latents for all rows, append to the cache, then attention per
// head in parallel (a kernel), output gate and o_proj.
#include "model/mla.h"

#include <algorithm>

#include "base/error.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/mla_attention.h"

namespace deltafin::model {
namespace {

bool prefer_expanded(const MlaShape& sh, int64_t n, int64_t total) {
  const double per_pos = static_cast<double>(sh.n_heads) * (sh.nope_dim + sh.v_dim) *
                         sh.kv_lora_rank;  // kv_b for one position, or absorb+unabsorb for one row
  const double expanded = total * per_pos + n * total * sh.n_heads * (sh.qk_dim() + sh.v_dim);
  const double absorbed =
      n * per_pos + n * total * sh.n_heads * (2.0 * sh.kv_lora_rank + sh.rope_dim);
  return expanded < absorbed;
}

kernels::MlaDims dims(const MlaShape& sh) {
  return {sh.n_heads, sh.kv_lora_rank, sh.nope_dim, sh.rope_dim, sh.v_dim};
}

// o[n, heads, v] for queries q[n] at the last n of the cache's first `total` positions.
void attend(const MlaShape& sh, const MlaWeights& w, const MlaCache& cache, int64_t total,
            const float* q, int64_t n, MlaMode mode, MlaWorkspace& ws, float* o) {
  const kernels::LatentCache view{cache.latent.data(), cache.k_pe.data(), total};
  const bool expanded =
      mode == MlaMode::kExpanded || (mode == MlaMode::kAuto && prefer_expanded(sh, n, total));
  if (expanded) {
    float* scratch = ws.attend.get(kernels::mla_expanded_scratch_floats(dims(sh), total));
    kernels::mla_attend_expanded(dims(sh), w.kv_b, view, q, n, scratch, o);
  } else {
    // Sized for the planned context (enough for every shorter one), not for each new length.
    const int64_t plan = std::max(total, cache.max_positions);
    float* scratch = ws.attend.get(kernels::mla_absorbed_scratch_floats(dims(sh), n, plan));
    kernels::mla_attend_absorbed(dims(sh), w.kv_b, view, q, n, scratch, o);
  }
}

}  // namespace

void MlaCache::reset(const MlaShape& shape, int64_t max) {
  latent.clear();
  k_pe.clear();
  n_positions = 0;
  max_positions = max;
  latent.reserve(max * shape.kv_lora_rank);
  k_pe.reserve(max * shape.rope_dim);
}

void MlaCache::extend(const MlaShape& shape, int64_t n) {
  const int64_t need = n_positions + n;
  if (static_cast<int64_t>(latent.capacity()) < need * shape.kv_lora_rank) {
    // Beyond the reservation (none planned, or a copy): room for the plan, or twice the need.
    const int64_t room = std::max(max_positions, 2 * need);
    latent.reserve(room * shape.kv_lora_rank);
    k_pe.reserve(room * shape.rope_dim);
  }
  latent.resize(need * shape.kv_lora_rank);
  k_pe.resize(need * shape.rope_dim);
}

void MlaCache::truncate(const MlaShape& shape, int64_t n) {
  DF_ASSERT(n >= 0 && n <= n_positions);
  latent.resize(n * shape.kv_lora_rank);
  k_pe.resize(n * shape.rope_dim);
  n_positions = n;
}

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
                 MlaCache& cache, MlaMode mode, MlaWorkspace& ws, float* out) {
  const int64_t nh = sh.n_heads, rank = sh.kv_lora_rank;
  float* q = ws.q.get(n * nh * sh.qk_dim());
  if (sh.q_lora_rank > 0) {
    float* qa = ws.qa.get(n * sh.q_lora_rank);
    kernels::matmul(w.q_a, x, n, qa);
    kernels::rmsnorm_rows(qa, w.q_a_norm.data(), n, sh.q_lora_rank, sh.latent_norm_eps, qa);
    kernels::matmul(w.q_b, qa, n, q);
  } else {
    kernels::matmul(w.q_proj, x, n, q);
  }

  const int64_t ckv_w = rank + sh.rope_dim;
  float* ckv = ws.ckv.get(n * ckv_w);
  kernels::matmul(w.kv_a, x, n, ckv);
  const int64_t first = cache.n_positions;
  cache.extend(sh, n);
  for (int64_t r = 0; r < n; ++r) {
    kernels::rmsnorm(ckv + r * ckv_w, w.kv_a_norm.data(), rank, sh.latent_norm_eps,
                     cache.latent.data() + (first + r) * rank);
    std::copy(ckv + r * ckv_w + rank, ckv + (r + 1) * ckv_w,
              cache.k_pe.data() + (first + r) * sh.rope_dim);
  }
  cache.n_positions = first + n;

  const int64_t total = cache.n_positions;
  float* o = ws.o.get(n * nh * sh.v_dim);
  if (mode == MlaMode::kDecodeRows) {
    for (int64_t r = 0; r < n; ++r) {
      attend(sh, w, cache, first + r + 1, q + r * nh * sh.qk_dim(), 1, MlaMode::kAuto, ws,
             o + r * nh * sh.v_dim);
    }
  } else {
    attend(sh, w, cache, total, q, n, mode, ws, o);
  }
  if (sh.output_gate) {
    float* gate = ws.gate.get(n * nh * sh.v_dim);
    kernels::matmul(w.g_proj, x, n, gate);
    kernels::mul_sigmoid(gate, n * nh * sh.v_dim, o);
  }
  kernels::matmul(w.o_proj, o, n, out);
}

}  // namespace deltafin::model
