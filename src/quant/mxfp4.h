// MXFP4 weights (OCP MX: blocks of 32 E2M1 elements sharing one E8M0 scale) in the two checkpoint
// layouts deltafin reads, and their scalar decoding: the definition the fast kernels are tested
// against. W[r, c] = E2M1(code(r, c)) * 2^(scale[r, c / 32] - 127).
#pragma once

#include <cstdint>

namespace deltafin::quant {

inline constexpr int64_t kMxfp4BlockElems = 32;  // elements sharing one scale
inline constexpr int64_t kMxfp4BlockBytes = 16;  // packed bytes of one block

// compressed-tensors "mxfp4-pack-quantized" (Kimi K3): weight_packed [rows, cols/2] U8 with element
// c of a row in byte c/2, LOW nibble for even c; weight_scale [rows, cols/32] U8.
// Writes rows [row_begin, row_end) to out [row_end - row_begin, cols], row-major. cols % 32 == 0.
void dequant_mxfp4_rows(const uint8_t* packed, const uint8_t* scales, int64_t cols,
                        int64_t row_begin, int64_t row_end, float* out);

// Index of the first E8M0 NaN byte (255) in scales[0, n), or -1 when there is none.
int64_t find_e8m0_nan(const uint8_t* scales, int64_t n);

}  // namespace deltafin::quant
