// Scalar MXFP4 decoding for both checkpoint layouts, and the E8M0 lookup table.
#include "quant/mxfp4.h"

#include <array>

#include "quant/e2m1.h"
#include "quant/e8m0.h"

namespace deltafin::quant {

const float* e8m0_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int s = 0; s < 256; ++s) t[s] = e8m0_to_f32(static_cast<uint8_t>(s));
    return t;
  }();
  return table.data();
}

void dequant_mxfp4_rows(const uint8_t* packed, const uint8_t* scales, int64_t cols,
                        int64_t row_begin, int64_t row_end, float* out) {
  const int64_t row_bytes = cols / 2, n_blocks = cols / kMxfp4BlockElems;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = packed + r * row_bytes;
    const uint8_t* row_scales = scales + r * n_blocks;
    float* dst = out + (r - row_begin) * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = row[c / 2];
      const uint8_t code = (c % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      dst[c] = e2m1_to_f32(code) * e8m0_to_f32(row_scales[c / kMxfp4BlockElems]);
    }
  }
}

int64_t find_e8m0_nan(const uint8_t* scales, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (scales[i] == kE8m0Nan) return i;
  return -1;
}

}  // namespace deltafin::quant
