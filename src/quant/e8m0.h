// E8M0 block scales (OCP MX): an unsigned biased exponent, value 2^(s - 127). There is no zero
// and no infinity; byte 255 is NaN and never expected in a release, so readers must report it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace deltafin::quant {

inline constexpr uint8_t kE8m0Nan = 255;
inline constexpr int kE8m0Bias = 127;

// 2^(s - 127) for s < 255 (s = 0 gives the subnormal 2^-127, exactly); NaN for s = 255.
inline float e8m0_to_f32(uint8_t s) {
  if (s == kE8m0Nan) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(s) - kE8m0Bias);
}

// All 256 decoded values, for kernels that look scales up instead of computing them.
const float* e8m0_table();

}  // namespace deltafin::quant
