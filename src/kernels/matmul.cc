// Matmul front end: variant selection, the split over threads and the tiling of large batches
// (shared by every ISA, so the variants only implement "rows r0..r1 for up to 16 activations").
#include "kernels/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/isa_variant.h"
#include "kernels/matmul_variant.h"
#include "quant/bf16.h"
#include "quant/int8.h"
#include "quant/mxfp4.h"

namespace deltafin::kernels {
namespace detail {
namespace {

// Batches beyond kMatmulMaxBatch run in tiles of rows whose weights (about this many bytes) stay in
// L2 while every activation tile passes over them, so DRAM still sees each weight byte once.
constexpr int64_t kReuseTileBytes = 256 << 10;
// Threads get at least this many weight bytes each, so tiny matrices stay on one thread.
constexpr int64_t kMinChunkBytes = 64 << 10;

int64_t row_bytes(const Mxfp4Matrix& w) { return w.cols / 2 + w.cols / 32; }
int64_t row_bytes(const Bf16Matrix& w) { return w.cols * 2; }
int64_t row_bytes(const F32Matrix& w) { return w.cols * 4; }
int64_t row_bytes(const Int8Matrix& w) { return w.cols + 4; }

void check_shape(const Mxfp4Matrix& w) { DF_ASSERT(w.cols % 32 == 0 && w.rows >= 0); }
void check_shape(const Bf16Matrix& w) { DF_ASSERT(w.cols >= 0 && w.rows >= 0); }
void check_shape(const F32Matrix& w) { DF_ASSERT(w.cols >= 0 && w.rows >= 0); }
void check_shape(const Int8Matrix& w) { DF_ASSERT(w.cols >= 0 && w.rows >= 0); }

template <typename Matrix, typename Kernel>
void run_rows(Kernel kernel, const Matrix& w, const float* x, int64_t n, float* y, int64_t r0,
              int64_t r1) {
  if (n <= kMatmulMaxBatch) {
    kernel(w, x, n, y, r0, r1);
    return;
  }
  const int64_t tile_rows =
      std::max<int64_t>(1, kReuseTileBytes / std::max<int64_t>(1, row_bytes(w)));
  for (int64_t rb = r0; rb < r1; rb += tile_rows) {
    const int64_t re = std::min(r1, rb + tile_rows);
    for (int64_t i = 0; i < n; i += kMatmulMaxBatch)
      kernel(w, x + i * w.cols, std::min(kMatmulMaxBatch, n - i), y + i * w.rows, rb, re);
  }
}

template <typename Matrix, typename Kernel>
void run_parallel(Kernel kernel, base::ThreadPool& pool, const Matrix& w, const float* x, int64_t n,
                  float* y) {
  check_shape(w);
  if (n <= 0 || w.rows == 0) return;
  const int64_t grain = std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, row_bytes(w)));
  pool.parallel_for(
      static_cast<size_t>(w.rows), static_cast<size_t>(grain), [&](size_t b, size_t e) {
        run_rows(kernel, w, x, n, y, static_cast<int64_t>(b), static_cast<int64_t>(e));
      });
}

const MatmulVariant& selected() {
  static const MatmulVariant& v = matmul_variant(base::selected_isa());
  return v;
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

float* thread_scratch(int64_t n_floats) {
  thread_local std::unique_ptr<float, FreeDeleter> buffer;
  thread_local int64_t capacity = 0;
  if (n_floats > capacity) {
    const int64_t want = std::max<int64_t>(n_floats, capacity * 2);
    const size_t bytes = (static_cast<size_t>(want) * sizeof(float) + 63) / 64 * 64;
    buffer.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    DF_ASSERT(buffer != nullptr);
    capacity = want;
  }
  return buffer.get();
}

const MatmulVariant& matmul_variant(base::Isa isa) {
  static const MatmulVariant kRef{ref::mxfp4_rows, ref::bf16_rows, ref::f32_rows, ref::int8_rows,
                                  ref::find_scale_nan};
  static const MatmulVariant kAvx2{avx2::mxfp4_rows, avx2::bf16_rows, avx2::f32_rows,
                                   avx2::int8_rows, avx2::find_scale_nan};
  static const MatmulVariant kAvx512{avx512::mxfp4_rows, avx512::bf16_rows, avx512::f32_rows,
                                     avx512::int8_rows, avx512::find_scale_nan};
  return pick_isa_variant(isa, kRef, kAvx2, kAvx512);
}

void matmul(const MatmulVariant& v, base::ThreadPool& pool, const Mxfp4Matrix& w, const float* x,
            int64_t n, float* y) {
  run_parallel(v.mxfp4, pool, w, x, n, y);
}
void matmul(const MatmulVariant& v, base::ThreadPool& pool, const Bf16Matrix& w, const float* x,
            int64_t n, float* y) {
  run_parallel(v.bf16, pool, w, x, n, y);
}
void matmul(const MatmulVariant& v, base::ThreadPool& pool, const F32Matrix& w, const float* x,
            int64_t n, float* y) {
  run_parallel(v.f32, pool, w, x, n, y);
}
void matmul(const MatmulVariant& v, base::ThreadPool& pool, const Int8Matrix& w, const float* x,
            int64_t n, float* y) {
  run_parallel(v.int8, pool, w, x, n, y);
}
void matmul_rows(const MatmulVariant& v, const Mxfp4Matrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end) {
  check_shape(w);
  DF_ASSERT(0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n > 0 && row_begin < row_end) run_rows(v.mxfp4, w, x, n, y, row_begin, row_end);
}
void matmul_rows(const MatmulVariant& v, const Bf16Matrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end) {
  check_shape(w);
  DF_ASSERT(0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n > 0 && row_begin < row_end) run_rows(v.bf16, w, x, n, y, row_begin, row_end);
}

void matmul_rows(const MatmulVariant& v, const F32Matrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end) {
  check_shape(w);
  DF_ASSERT(0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n > 0 && row_begin < row_end) run_rows(v.f32, w, x, n, y, row_begin, row_end);
}
void matmul_rows(const MatmulVariant& v, const Int8Matrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end) {
  check_shape(w);
  DF_ASSERT(0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n > 0 && row_begin < row_end) run_rows(v.int8, w, x, n, y, row_begin, row_end);
}

}  // namespace detail

void matmul(const Mxfp4Matrix& w, const float* x, int64_t n, float* y) {
  detail::matmul(detail::selected(), base::default_pool(), w, x, n, y);
}
void matmul(const Bf16Matrix& w, const float* x, int64_t n, float* y) {
  detail::matmul(detail::selected(), base::default_pool(), w, x, n, y);
}
void matmul(const F32Matrix& w, const float* x, int64_t n, float* y) {
  detail::matmul(detail::selected(), base::default_pool(), w, x, n, y);
}
void matmul(const Int8Matrix& w, const float* x, int64_t n, float* y) {
  detail::matmul(detail::selected(), base::default_pool(), w, x, n, y);
}
void matmul(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, base::ThreadPool& pool) {
  detail::matmul(detail::selected(), pool, w, x, n, y);
}
void matmul(const Bf16Matrix& w, const float* x, int64_t n, float* y, base::ThreadPool& pool) {
  detail::matmul(detail::selected(), pool, w, x, n, y);
}
void matmul(const F32Matrix& w, const float* x, int64_t n, float* y, base::ThreadPool& pool) {
  detail::matmul(detail::selected(), pool, w, x, n, y);
}
void matmul(const Int8Matrix& w, const float* x, int64_t n, float* y, base::ThreadPool& pool) {
  detail::matmul(detail::selected(), pool, w, x, n, y);
}

void matmul_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end) {
  detail::matmul_rows(detail::selected(), w, x, n, y, row_begin, row_end);
}
void matmul_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end) {
  detail::matmul_rows(detail::selected(), w, x, n, y, row_begin, row_end);
}
void matmul_rows(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end) {
  detail::matmul_rows(detail::selected(), w, x, n, y, row_begin, row_end);
}
void matmul_rows(const Int8Matrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end) {
  detail::matmul_rows(detail::selected(), w, x, n, y, row_begin, row_end);
}

void check_mxfp4_scales(const uint8_t* scales, int64_t rows, int64_t blocks_per_row,
                        const std::string& what) {
  const int64_t at = detail::selected().find_scale_nan(scales, rows * blocks_per_row);
  if (at >= 0)
    base::fail(what, ": E8M0 scale byte 255 (NaN) at row ", at / blocks_per_row, " block ",
               at % blocks_per_row);
}

void dequant_mxfp4(const Mxfp4Matrix& w, int64_t row_begin, int64_t row_end, float* out) {
  DF_ASSERT(w.cols % 32 == 0 && 0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  quant::dequant_mxfp4_rows(w.packed, w.scales, w.cols, row_begin, row_end, out);
}

void dequant_bf16(const uint16_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = quant::bf16_to_f32(in[i]);
}

void dequant_int8(const Int8Matrix& w, int64_t row_begin, int64_t row_end, float* out) {
  DF_ASSERT(0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  for (int64_t r = row_begin; r < row_end; ++r) {
    float scale;
    std::memcpy(&scale, w.scales + 4 * r, 4);
    for (int64_t c = 0; c < w.cols; ++c)
      *out++ = static_cast<float>(quant::int8_value(w.q[r * w.cols + c], scale));
  }
}

}  // namespace deltafin::kernels
