// Dispatch from a dtype-tagged WeightMatrix to the shared kernels for that dtype.
#include "kernels/weight_matrix.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/error.h"
#include "kernels/matmul.h"

namespace deltafin::kernels {
const char* weight_dtype_name(WeightDType dtype) {
  switch (dtype) {
    case WeightDType::kF32:
      return "F32";
    case WeightDType::kBF16:
      return "BF16";
    case WeightDType::kMxfp4:
      return "MXFP4";
    case WeightDType::kInt8:
      return "INT8";
  }
  return "?";
}

uint64_t WeightMatrix::nbytes() const {
  const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  switch (dtype) {
    case WeightDType::kF32:
      return n * 4;
    case WeightDType::kBF16:
      return n * 2;
    case WeightDType::kMxfp4:
      return n / 2 + n / 32;
    case WeightDType::kInt8:
      return n + static_cast<uint64_t>(rows) * 4;
  }
  return 0;
}

namespace {

Mxfp4Matrix as_mxfp4(const WeightMatrix& w) { return {w.data, w.scales, w.rows, w.cols}; }
Bf16Matrix as_bf16(const WeightMatrix& w) {
  return {reinterpret_cast<const uint16_t*>(w.data), w.rows, w.cols};
}
Int8Matrix as_int8(const WeightMatrix& w) {
  return {reinterpret_cast<const int8_t*>(w.data), w.scales, w.rows, w.cols};
}
F32Matrix as_f32(const WeightMatrix& w) {
  return {reinterpret_cast<const float*>(w.data), w.rows, w.cols};
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  switch (w.dtype) {
    case WeightDType::kMxfp4:
      return matmul(as_mxfp4(w), x, n, y);
    case WeightDType::kBF16:
      return matmul(as_bf16(w), x, n, y);
    case WeightDType::kF32:
      return matmul(as_f32(w), x, n, y);
    case WeightDType::kInt8:
      return matmul(as_int8(w), x, n, y);
    default:
      DF_ASSERT(false && "weight dtype without a matmul");
  }
}

void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                 int64_t row_end) {
  switch (w.dtype) {
    case WeightDType::kMxfp4:
      return matmul_rows(as_mxfp4(w), x, n, y, row_begin, row_end);
    case WeightDType::kBF16:
      return matmul_rows(as_bf16(w), x, n, y, row_begin, row_end);
    case WeightDType::kF32:
      return matmul_rows(as_f32(w), x, n, y, row_begin, row_end);
    case WeightDType::kInt8:
      return matmul_rows(as_int8(w), x, n, y, row_begin, row_end);
    default:
      DF_ASSERT(false && "weight dtype without a matmul");
  }
}

void decode_row(const WeightMatrix& w, int64_t r, float* out) {
  switch (w.dtype) {
    case WeightDType::kMxfp4:
      return dequant_mxfp4(as_mxfp4(w), r, r + 1, out);
    case WeightDType::kBF16:
      return dequant_bf16(as_bf16(w).data + r * w.cols, w.cols, out);
    case WeightDType::kF32:
      std::memcpy(out, as_f32(w).data + r * w.cols, w.cols * sizeof(float));
      return;
    case WeightDType::kInt8:
      return dequant_int8(as_int8(w), r, r + 1, out);
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
    case WeightDType::kMxfp4:
      out.data = w.data + begin * (w.cols / 2);
      out.scales = w.scales + begin * (w.cols / 32);
      break;
    case WeightDType::kBF16:
      out.data = w.data + begin * w.cols * 2;
      break;
    case WeightDType::kF32:
      out.data = w.data + begin * w.cols * 4;
      break;
    case WeightDType::kInt8:
      out.data = w.data + begin * w.cols;
      out.scales = w.scales + begin * 4;
      break;
    default:
      DF_ASSERT(false && "weight dtype without a layout");
  }
  return out;
}

}  // namespace deltafin::kernels
