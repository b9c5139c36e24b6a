// AttnRes mixing: one softmax over the sources per row; mixes the raw (not normalized) sources.
#include "model/attn_res.h"

#include <algorithm>
#include <cmath>

namespace deltafin::model {

void attn_res_mix(const AttnResSite& site, const std::vector<const float*>& blocks,
                  const float* prefix, int64_t n, int64_t hidden, float eps, float* out) {
  std::vector<const float*> src(blocks);
  src.push_back(prefix);
  const size_t ns = src.size();
  std::vector<float> p(ns);
  for (int64_t r = 0; r < n; ++r) {
    float mx = -INFINITY;
    for (size_t i = 0; i < ns; ++i) {
      const float* v = src[i] + r * hidden;
      float ss = 0.0f, d = 0.0f;
      for (int64_t j = 0; j < hidden; ++j) {
        ss += v[j] * v[j];
        d += v[j] * site.key[j];
      }
      p[i] = d / std::sqrt(ss / static_cast<float>(hidden) + eps);
      mx = std::max(mx, p[i]);
    }
    float sum = 0.0f;
    for (size_t i = 0; i < ns; ++i) {
      p[i] = std::exp(p[i] - mx);
      sum += p[i];
    }
    float* o = out + r * hidden;
    std::fill(o, o + hidden, 0.0f);
    for (size_t i = 0; i < ns; ++i) {
      const float wgt = p[i] / sum;
      const float* v = src[i] + r * hidden;
      for (int64_t j = 0; j < hidden; ++j) o[j] += wgt * v[j];
    }
  }
}

}  // namespace deltafin::model
