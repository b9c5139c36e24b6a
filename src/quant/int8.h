// Per-row symmetric int8 (the opt-in, lossy int8 spine): row r of a matrix is q[r, c] * scale[r]
// with q in [-127, 127] and an fp32 scale. The one definition of the quantization; the kernels,
// `deltafin convert-spine` and the tests all use it.
#pragma once

#include <cstdint>

namespace deltafin::quant {

inline constexpr int kInt8Max = 127;

// Quantizes one row of n values: scale = max|w| / 127, q = round-to-nearest-even(w / scale),
// clamped to [-127, 127]. An all-zero row gets scale 0 and q = 0. Returns the scale. Values must be
// finite (a NaN or Inf row is refused by the caller, which can name the tensor).
float quantize_row_int8(const float* w, int64_t n, int8_t* q);

// W[r, c] as fp32: exact in f64, and in f32 up to one rounding of the product.
inline double int8_value(int8_t q, float scale) { return static_cast<double>(q) * scale; }

}  // namespace deltafin::quant
