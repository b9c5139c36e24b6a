// Short convolution: one portable definition, summing the taps oldest first for every channel.
#include <cstring>

#include "base/error.h"
#include "kernels/elementwise.h"
#include "kernels/short_conv.h"

namespace deltafin::kernels {

void short_conv_silu(const float* x, int64_t n, int64_t p, int64_t kernel, const float* w,
                     float* hist, float* y) {
  DF_ASSERT(kernel >= 1 && kernel <= kShortConvMaxKernel && x != y);
  const int64_t h = kernel - 1;
  const float* in[kShortConvMaxKernel];  // row t + i of [hist; x]
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < kernel; ++i)
      in[i] = t + i < h ? hist + (t + i) * p : x + (t + i - h) * p;
    float* yt = y + t * p;
    for (int64_t c = 0; c < p; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < kernel; ++i) acc += w[c * kernel + i] * in[i][c];
      yt[c] = silu(acc);
    }
  }
  short_conv_push(x, n, p, kernel, hist);
}

void short_conv_push(const float* x, int64_t n, int64_t p, int64_t kernel, float* hist) {
  const int64_t h = kernel - 1;
  if (n >= h) {
    std::memcpy(hist, x + (n - h) * p, h * p * sizeof(float));
  } else {
    std::memmove(hist, hist + n * p, (h - n) * p * sizeof(float));
    std::memcpy(hist + (h - n) * p, x, n * p * sizeof(float));
  }
}

}  // namespace deltafin::kernels
