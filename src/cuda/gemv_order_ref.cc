// The GPU GEMV order on the CPU: 32 lane sums (lane l takes chunks l, l+32, ...), a sequential
// std::fma chain inside each, then the xor butterfly the warp shuffle performs. MXFP4 also
// scales as the kernel does: weights times 2^-126, activations times 2^63, group sums times 2^63.
#include "cuda/gemv_order_ref.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace deltafin::cuda {
namespace {

constexpr int kLanes = 32;
constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
// The kernel's decode yields 2^-126 times the value (exact: the smallest, 0.5, is the subnormal
// 2^-127), and its staged activations are x · 2^63 (gemv.cu, kXScale).
constexpr float kWeightScale = 0x1p-126f;
constexpr float kXScale = 0x1p63f;

float e8m0(uint8_t s) {
  if (s == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(s) - 127);
}

float bf16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

// The shuffle butterfly: at each step every lane adds its partner's value (a + b == b + a, so
// all lanes agree and lane 0's value is the result).
float butterfly(float (&v)[kLanes]) {
  for (int off = kLanes / 2; off > 0; off /= 2) {
    float next[kLanes];
    for (int l = 0; l < kLanes; ++l) next[l] = v[l] + v[l ^ off];
    std::memcpy(v, next, sizeof(next));
  }
  return v[0];
}

}  // namespace

void cpu_order_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                     const float* x, int64_t n, float* y) {
  const int64_t groups = cols / 32;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      float lane[kLanes] = {};
      for (int l = 0; l < kLanes; ++l) {
        for (int64_t g = l; g < groups; g += kLanes) {
          const uint8_t* bytes = packed + r * (cols / 2) + g * 16;
          const float* xg = x + i * cols + g * 32;
          float p = 0.0f;
          for (int e = 0; e < 32; ++e) {
            const uint8_t code = (e % 2 == 0) ? (bytes[e / 2] & 0x0f) : (bytes[e / 2] >> 4);
            p = std::fma(kE2m1[code] * kWeightScale, xg[e] * kXScale, p);
          }
          lane[l] = std::fma(p * kXScale, e8m0(scales[r * groups + g]), lane[l]);
        }
      }
      y[i * rows + r] = butterfly(lane);
    }
  }
}

void cpu_order_bf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                    float* y) {
  const int64_t chunks = cols / 8;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      float lane[kLanes] = {};
      for (int l = 0; l < kLanes; ++l)
        for (int64_t c = l; c < chunks; c += kLanes)
          for (int e = 0; e < 8; ++e)
            lane[l] = std::fma(bf16(w[r * cols + c * 8 + e]), x[i * cols + c * 8 + e], lane[l]);
      y[i * rows + r] = butterfly(lane);
    }
  }
}

}  // namespace deltafin::cuda
