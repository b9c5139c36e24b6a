// Absorbed MLA attention (the decode form): per head, W_UK folded into the query and W_UV applied
// to the latent mix, so no position's keys or values are ever expanded.
#include <algorithm>
#include <cmath>
#include <utility>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/mla_attention.h"

namespace deltafin::kernels {
namespace {

// One head's buffers, carved from its slice of the scratch in this order.
struct HeadScratch {
  float* wuk;   // [nope, rank]: W_UK rows of the head, decoded
  float* qhat;  // [rank]
  float* obar;  // [n, rank]
  float* p;     // [n_positions]
  float* oh;    // [n, v_dim]

  HeadScratch(float* s, const MlaDims& d, int64_t n, int64_t n_positions) {
    auto take = [&s](int64_t k) { return std::exchange(s, s + k); };
    wuk = take(d.nope_dim * d.kv_lora_rank);
    qhat = take(d.kv_lora_rank);
    obar = take(n * d.kv_lora_rank);
    p = take(n_positions);
    oh = take(n * d.v_dim);
  }
  static int64_t floats(const MlaDims& d, int64_t n, int64_t n_positions) {
    return d.nope_dim * d.kv_lora_rank + d.kv_lora_rank + n * d.kv_lora_rank + n_positions +
           n * d.v_dim;
  }
};

}  // namespace

int64_t mla_absorbed_scratch_floats(const MlaDims& d, int64_t n, int64_t n_positions) {
  return d.n_heads * HeadScratch::floats(d, n, n_positions);
}

void mla_attend_absorbed(const MlaDims& sh, const WeightMatrix& kv_b, const LatentCache& cache,
                         const float* q, int64_t n, float* scratch, float* o) {
  const int64_t nh = sh.n_heads, kvw = sh.kv_width(), total = cache.n_positions;
  const int64_t rank = sh.kv_lora_rank, first = total - n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.qk_dim()));
  const int64_t per_head = HeadScratch::floats(sh, n, total);
  base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
    for (int64_t h = static_cast<int64_t>(hb); h < static_cast<int64_t>(he); ++h) {
      const HeadScratch b(scratch + h * per_head, sh, n, total);
      for (int64_t i = 0; i < sh.nope_dim; ++i) decode_row(kv_b, h * kvw + i, b.wuk + i * rank);
      for (int64_t r = 0; r < n; ++r) {
        const float* qh = q + (r * nh + h) * sh.qk_dim();
        std::fill(b.qhat, b.qhat + rank, 0.0f);
        for (int64_t i = 0; i < sh.nope_dim; ++i) {
          const float qi = qh[i];
          const float* wi = b.wuk + i * rank;
          for (int64_t c = 0; c < rank; ++c) b.qhat[c] += qi * wi[c];
        }
        const int64_t len = first + r + 1;
        for (int64_t s = 0; s < len; ++s) {
          b.p[s] = (dot(b.qhat, cache.latent + s * rank, rank) +
                    dot(qh + sh.nope_dim, cache.k_pe + s * sh.rope_dim, sh.rope_dim)) *
                   scale;
        }
        softmax(b.p, len);
        float* ob = b.obar + r * rank;
        std::fill(ob, ob + rank, 0.0f);
        for (int64_t s = 0; s < len; ++s) {
          const float* ls = cache.latent + s * rank;
          for (int64_t c = 0; c < rank; ++c) ob[c] += b.p[s] * ls[c];
        }
      }
      const WeightMatrix wuv = row_block(kv_b, h * kvw + sh.nope_dim, sh.v_dim);
      matmul_rows(wuv, b.obar, n, b.oh, 0, sh.v_dim);
      for (int64_t r = 0; r < n; ++r)
        std::copy(b.oh + r * sh.v_dim, b.oh + (r + 1) * sh.v_dim, o + (r * nh + h) * sh.v_dim);
    }
  });
}

}  // namespace deltafin::kernels
