// Weight-times-activation products for every weight dtype deltafin streams or keeps resident
// (MXFP4 experts, BF16 spine, small F32 tensors, the opt-in int8 spine), the MXFP4 scale check,
// and dequantization.
// The ISA variant (ref, avx2, avx512) is chosen once from base::selected_isa().
#pragma once

#include <cstdint>
#include <string>

namespace deltafin::base {
class ThreadPool;
}

namespace deltafin::kernels {

// MXFP4 matrix, compressed-tensors layout. packed: [rows, cols/2] bytes (element c of a row in
// byte c/2, low nibble for even c); scales: [rows, cols/32] E8M0 bytes. cols % 32 == 0.
struct Mxfp4Matrix {
  const uint8_t* packed;
  const uint8_t* scales;
  int64_t rows;
  int64_t cols;
};
// BF16 matrix [rows, cols] row-major, raw bf16 bits; any alignment.
struct Bf16Matrix {
  const uint16_t* data;
  int64_t rows;
  int64_t cols;
};
// F32 matrix [rows, cols] row-major (some small weights are stored F32).
struct F32Matrix {
  const float* data;
  int64_t rows;
  int64_t cols;
};

// Per-row symmetric int8 matrix (quant/int8.h): q [rows, cols] int8 row-major, scales [rows] fp32
// stored as raw bytes (any alignment). W[r, c] = q[r, c] * scale[r].
struct Int8Matrix {
  const int8_t* q;
  const uint8_t* scales;
  int64_t rows;
  int64_t cols;
};

// Largest number of activation rows one pass over the weight serves; larger n runs in tiles.
inline constexpr int64_t kMatmulMaxBatch = 16;

// y[n, rows] = x[n, cols] · W^T for n activation rows (n = 1 is the GEMV), row-major x and y.
// Each output row is bit-identical to what the same call computes with n = 1 for that activation
// row, and to what it computes with any thread count: work is split over weight rows in contiguous
// chunks and every output element is computed by one thread in a fixed order. The SIMD variants
// accumulate in fp32; the reference accumulates in fp64 and rounds once. An MXFP4 scale byte 255
// yields NaN in the rows it touches. Int8: the sum of q * x is taken first (fp32 in the SIMD
// variants, fp64 in the reference) and multiplied by the row's scale once; the rounding of the
// weights happened at conversion, so this product is exact to the same tolerance as BF16's
// (check_mxfp4_scales reports it first). The SIMD variants sum each 32-element block's products
// before applying its power-of-two scale, so only activations beyond about 1e37 in magnitude could
// overflow where the reference does not.
void matmul(const Mxfp4Matrix& w, const float* x, int64_t n, float* y);
void matmul(const Bf16Matrix& w, const float* x, int64_t n, float* y);
void matmul(const F32Matrix& w, const float* x, int64_t n, float* y);
void matmul(const Int8Matrix& w, const float* x, int64_t n, float* y);
// The same on an explicit pool (benchmarks and tests vary the thread count).
void matmul(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, base::ThreadPool& pool);
void matmul(const Bf16Matrix& w, const float* x, int64_t n, float* y, base::ThreadPool& pool);
void matmul(const F32Matrix& w, const float* x, int64_t n, float* y, base::ThreadPool& pool);
void matmul(const Int8Matrix& w, const float* x, int64_t n, float* y, base::ThreadPool& pool);

// Same on weight rows [row_begin, row_end) only, on the calling thread (the expert code
// parallelizes over experts itself). y is still [n, w.rows]; only those columns are written.
void matmul_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end);
void matmul_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end);
void matmul_rows(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end);
void matmul_rows(const Int8Matrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end);

// Scans an MXFP4 scale array [rows, blocks_per_row]; throws base::Error
// "<what>: E8M0 scale byte 255 (NaN) at row R block B" for the first such byte. SIMD, cheap
// enough to run on every streamed expert.
void check_mxfp4_scales(const uint8_t* scales, int64_t rows, int64_t blocks_per_row,
                        const std::string& what);

// Dequantize rows [row_begin, row_end) to out [row_end - row_begin, cols] f32 (tests, absorbed MLA
// precompute). Exact: every MXFP4 and BF16 value is representable in f32.
void dequant_mxfp4(const Mxfp4Matrix& w, int64_t row_begin, int64_t row_end, float* out);
void dequant_bf16(const uint16_t* in, int64_t n, float* out);
void dequant_int8(const Int8Matrix& w, int64_t row_begin, int64_t row_end, float* out);

}  // namespace deltafin::kernels
