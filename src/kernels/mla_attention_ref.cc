// Expanded MLA attention: the definition (keys and values materialized for every position, one
// softmax per query row and head). Each head's rows use their own slice of the scratch.
#include <algorithm>
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/mla_attention.h"

namespace deltafin::kernels {

int64_t mla_expanded_scratch_floats(const MlaDims& d, int64_t n_positions) {
  return n_positions * d.n_heads * d.kv_width() + d.n_heads * n_positions;
}

void mla_attend_expanded(const MlaDims& sh, const WeightMatrix& kv_b, const LatentCache& cache,
                         const float* q, int64_t n, float* scratch, float* o) {
  const int64_t nh = sh.n_heads, kvw = sh.kv_width(), total = cache.n_positions;
  const int64_t first = total - n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.qk_dim()));
  float* kv = scratch;  // [total, nh, kvw]
  matmul(kv_b, cache.latent, total, kv);
  base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
    for (int64_t h = static_cast<int64_t>(hb); h < static_cast<int64_t>(he); ++h) {
      float* p = scratch + total * nh * kvw + h * total;  // [total]
      for (int64_t r = 0; r < n; ++r) {
        const float* qh = q + (r * nh + h) * sh.qk_dim();
        const int64_t len = first + r + 1;
        for (int64_t s = 0; s < len; ++s) {
          const float* kn = kv + (s * nh + h) * kvw;
          p[s] = (dot(qh, kn, sh.nope_dim) +
                  dot(qh + sh.nope_dim, cache.k_pe + s * sh.rope_dim, sh.rope_dim)) *
                 scale;
        }
        softmax(p, len);
        float* oh = o + (r * nh + h) * sh.v_dim;
        std::fill(oh, oh + sh.v_dim, 0.0f);
        for (int64_t s = 0; s < len; ++s) {
          const float* vs = kv + (s * nh + h) * kvw + sh.nope_dim;
          for (int64_t c = 0; c < sh.v_dim; ++c) oh[c] += p[s] * vs[c];
        }
      }
    }
  });
}

}  // namespace deltafin::kernels
