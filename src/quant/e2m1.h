// FP4 E2M1 elements of MXFP4 (1 sign bit = bit 3, 2 exponent bits, 1 mantissa bit; no Inf/NaN).
#pragma once

#include <cstdint>

namespace deltafin::quant {

// Value of each 4-bit code; -0 is kept as -0.0f so that decoding is bit-exact.
inline constexpr float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

inline float e2m1_to_f32(uint8_t code) { return kE2m1Values[code & 0x0f]; }

}  // namespace deltafin::quant
