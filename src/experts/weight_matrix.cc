// Dispatch from a dtype-tagged WeightMatrix to the shared kernels for that dtype.
#include "experts/weight_matrix.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/error.h"
#include "kernels/matmul.h"

namespace deltafin::experts {
namespace {

kernels::Mxfp4Matrix as_mxfp4(const WeightMatrix& w) { return {w.data, w.scales, w.rows, w.cols}; }
kernels::Bf16Matrix as_bf16(const WeightMatrix& w) {
  return {reinterpret_cast<const uint16_t*>(w.data), w.rows, w.cols};
}
kernels::F32Matrix as_f32(const WeightMatrix& w) {
  return {reinterpret_cast<const float*>(w.data), w.rows, w.cols};
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  switch (w.dtype) {
    case format::DType::kU8:
      return kernels::matmul(as_mxfp4(w), x, n, y);
    case format::DType::kBF16:
      return kernels::matmul(as_bf16(w), x, n, y);
    case format::DType::kF32:
      return kernels::matmul(as_f32(w), x, n, y);
    default:
      DF_ASSERT(false && "weight dtype without a matmul");
  }
}

void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end) {
  switch (w.dtype) {
    case format::DType::kU8:
      return kernels::matmul_rows(as_mxfp4(w), x, n, y, row_begin, row_end);
    case format::DType::kBF16:
      return kernels::matmul_rows(as_bf16(w), x, n, y, row_begin, row_end);
    case format::DType::kF32:
      return kernels::matmul_rows(as_f32(w), x, n, y, row_begin, row_end);
    default:
      DF_ASSERT(false && "weight dtype without a matmul");
  }
}

void decode_row(const WeightMatrix& w, int64_t r, float* out) {
  switch (w.dtype) {
    case format::DType::kU8:
      return kernels::dequant_mxfp4(as_mxfp4(w), r, r + 1, out);
    case format::DType::kBF16:
      return kernels::dequant_bf16(as_bf16(w).data + r * w.cols, w.cols, out);
    case format::DType::kF32:
      std::memcpy(out, as_f32(w).data + r * w.cols, w.cols * sizeof(float));
      return;
    default:
      DF_ASSERT(false && "weight dtype without a decoder");
  }
}

namespace {

void will_need(const uint8_t* p, size_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

}  // namespace

void will_need_row(const WeightMatrix& w, int64_t r) {
  // Row r's bytes run up to where row r + 1 starts; row_block knows each dtype's layout.
  const WeightMatrix row = row_block(w, r, 1), next = row_block(w, r + 1, 0);
  will_need(row.data, static_cast<size_t>(next.data - row.data));
  if (row.scales != nullptr) will_need(row.scales, static_cast<size_t>(next.scales - row.scales));
}

WeightMatrix row_block(const WeightMatrix& w, int64_t begin, int64_t count) {
  DF_ASSERT(begin >= 0 && count >= 0 && begin + count <= w.rows);
  WeightMatrix out = w;
  out.rows = count;
  switch (w.dtype) {
    case format::DType::kU8:
      out.data = w.data + begin * (w.cols / 2);
      out.scales = w.scales + begin * (w.cols / 32);
      break;
    case format::DType::kBF16:
      out.data = w.data + begin * w.cols * 2;
      break;
    case format::DType::kF32:
      out.data = w.data + begin * w.cols * 4;
      break;
    default:
      DF_ASSERT(false && "weight dtype without a layout");
  }
  return out;
}

}  // namespace deltafin::experts
