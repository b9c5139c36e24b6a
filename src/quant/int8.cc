// Per-row symmetric int8 quantization.
#include "quant/int8.h"

#include <algorithm>
#include <cfenv>
#include <cmath>

namespace deltafin::quant {

float quantize_row_int8(const float* w, int64_t n, int8_t* q) {
  float max_abs = 0.0f;
  for (int64_t c = 0; c < n; ++c) max_abs = std::max(max_abs, std::fabs(w[c]));
  if (max_abs == 0.0f) {
    std::fill(q, q + n, int8_t{0});
    return 0.0f;
  }
  const float scale = max_abs / static_cast<float>(kInt8Max);
  // nearbyint rounds in the current mode, which deltafin never changes from to-nearest-even.
  for (int64_t c = 0; c < n; ++c) {
    const float v = std::nearbyint(w[c] / scale);
    q[c] = static_cast<int8_t>(
        std::clamp(v, -static_cast<float>(kInt8Max), static_cast<float>(kInt8Max)));
  }
  return scale;
}

}  // namespace deltafin::quant
