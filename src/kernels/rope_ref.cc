// NeoX RoPE: one cos/sin table per row (shared by its heads), then the pairwise rotation in fp32.
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/rope.h"

namespace deltafin::kernels {

void rope_neox_rows(float* x, int64_t rows, int64_t n_heads, int64_t head_dim,
                    int64_t first_position, double theta) {
  DF_ASSERT(head_dim % 2 == 0 && first_position >= 0);
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(first_position + r);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[i];
      cos_t[i] = static_cast<float>(std::cos(angle));
      sin_t[i] = static_cast<float>(std::sin(angle));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_t[i] - b * sin_t[i];
        v[i + half] = b * cos_t[i] + a * sin_t[i];
      }
    }
  }
}

}  // namespace deltafin::kernels
