// A weight matrix viewed in the dtype it is stored in (BF16, F32, MXFP4 or the opt-in int8), and
// the products the model takes with it. Views never own bytes: they point into a mapping or a read
// buffer.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// How a matrix's bytes encode its values. MXFP4 is the OCP microscaling block: 32 E2M1 values
// sharing one E8M0 scale. kInt8 is the lossy int8 spine (quant/int8.h): per-row symmetric int8
// with an fp32 scale per row, used only when asked for (--spine-dtype int8).
enum class WeightDType { kF32, kBF16, kMxfp4, kInt8 };
const char* weight_dtype_name(WeightDType dtype);

// [rows = out, cols = in], row-major. kMxfp4: `data` holds [rows, cols/2] packed
// E2M1 nibbles (low nibble = even column) and `scales` [rows, cols/32] E8M0 bytes. kInt8: `data`
// holds [rows, cols] int8 and `scales` [rows] fp32 (raw bytes, any alignment).
struct WeightMatrix {
  WeightDType dtype = WeightDType::kF32;
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;  // MXFP4 and int8 only
  int64_t rows = 0;
  int64_t cols = 0;

  bool empty() const { return data == nullptr; }
  // Bytes of the values (and of the scales, for MXFP4).
  uint64_t nbytes() const;
};

// y[n, rows] = x[n, cols] · Wᵀ, fp32 accumulation; parallel over weight rows on the default pool.
// Row i of y is bit-identical to the n = 1 call on row i of x.
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y);
// Same product restricted to output columns [row_begin, row_end) (y keeps its full [n, rows]
// layout), on the calling thread only: for use inside the caller's own parallel loops.
void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end);
// Rows [begin, begin + count) as a matrix of their own.
WeightMatrix row_block(const WeightMatrix& w, int64_t begin, int64_t count);
// Row r decoded to fp32 (cols values): embedding lookups and transposed products.
void decode_row(const WeightMatrix& w, int64_t r, float* out);
// Starts reading row r's bytes if they sit in a file mapping that is not in memory, so that
// decode_row then waits for one small read instead of a page fault's read-around of the device's
// whole read_ahead_kb (docs/PERFORMANCE.md). Only advice: it changes no value and ignores failure.
void will_need_row(const WeightMatrix& w, int64_t r);

}  // namespace deltafin::kernels
