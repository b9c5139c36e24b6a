// AttnRes mixing: one portable definition; it mixes the raw (not normalized) sources.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "kernels/activation.h"
#include "kernels/attn_res.h"
#include "kernels/elementwise.h"

namespace deltafin::kernels {

void attn_res_mix(const float* key, const float* blocks, int64_t n_blocks, int64_t block_stride,
                  const float* prefix, int64_t n, int64_t hidden, float eps, float* out) {
  DF_ASSERT(n_blocks >= 0 && n_blocks <= kAttnResMaxBlocks);
  const int64_t ns = n_blocks + 1;
  auto source = [&](int64_t i) { return i < n_blocks ? blocks + i * block_stride : prefix; };
  float p[kAttnResMaxBlocks + 1];
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < ns; ++i) {
      const float* v = source(i) + r * hidden;
      p[i] = dot(v, key, hidden) / std::sqrt(dot(v, v, hidden) / static_cast<float>(hidden) + eps);
    }
    softmax(p, ns);
    float* o = out + r * hidden;
    std::fill(o, o + hidden, 0.0f);
    for (int64_t i = 0; i < ns; ++i) {
      const float* v = source(i) + r * hidden;
      for (int64_t j = 0; j < hidden; ++j) o[j] += p[i] * v[j];
    }
  }
}

}  // namespace deltafin::kernels
