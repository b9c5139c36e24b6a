// BF16 <-> F32 bit conversions. BF16 is the top half of an IEEE binary32, so widening is a shift
// and narrowing rounds to nearest, ties to even (as torch does), keeping NaN a quiet NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace deltafin::quant {

inline float bf16_to_f32(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  // A NaN must stay NaN: rounding could carry its payload into the exponent and make it Inf.
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace deltafin::quant
