// AttnRes mixing: one softmax over the sources per row; mixes the raw (not normalized) sources.
#include "model/attn_res.h"

#include <algorithm>
#include <cmath>

#include "kernels/activation.h"
#include "model/ops.h"

namespace deltafin::model {

void attn_res_mix(const AttnResSite& site, const std::vector<const float*>& blocks,
                  const float* prefix, int64_t n, int64_t hidden, float eps, float* out) {
  std::vector<const float*> src(blocks);
  src.push_back(prefix);
  const size_t ns = src.size();
  std::vector<float> p(ns);
  for (int64_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < ns; ++i) {
      const float* v = src[i] + r * hidden;
      p[i] = dot(v, site.key.data(), hidden) /
             std::sqrt(dot(v, v, hidden) / static_cast<float>(hidden) + eps);
    }
    kernels::softmax(p.data(), static_cast<int64_t>(ns));
    float* o = out + r * hidden;
    std::fill(o, o + hidden, 0.0f);
    for (size_t i = 0; i < ns; ++i) {
      const float* v = src[i] + r * hidden;
      for (int64_t j = 0; j < hidden; ++j) o[j] += p[i] * v[j];
    }
  }
}

}  // namespace deltafin::model
