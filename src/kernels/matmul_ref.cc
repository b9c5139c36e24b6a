// Scalar matmul: the definition every SIMD variant is tested against. Weights are decoded exactly
// (MXFP4 to f64, since E2M1 * 2^127 can exceed the f32 range), products and sums are taken in f64,
// and each output is rounded once.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/matmul_variant.h"
#include "quant/bf16.h"
#include "quant/e2m1.h"
#include "quant/e8m0.h"
#include "quant/mxfp4.h"

namespace deltafin::kernels::detail::ref {
namespace {

template <typename T>
double dot(const T* w, const float* x, int64_t cols) {
  double acc = 0.0;
  for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(w[c]) * x[c];
  return acc;
}

}  // namespace

void mxfp4_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  std::vector<double> row(w.cols);
  const int64_t n_blocks = w.cols / quant::kMxfp4BlockElems;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      const uint8_t byte = w.packed[r * (w.cols / 2) + c / 2];
      const uint8_t s = w.scales[r * n_blocks + c / quant::kMxfp4BlockElems];
      const double scale =
          s == quant::kE8m0Nan ? std::nan("") : std::ldexp(1.0, s - quant::kE8m0Bias);
      row[c] = quant::e2m1_to_f32(c % 2 == 0 ? byte & 0x0f : byte >> 4) * scale;
    }
    for (int64_t i = 0; i < n; ++i)
      y[i * w.rows + r] = static_cast<float>(dot(row.data(), x + i * w.cols, w.cols));
  }
}

void bf16_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  std::vector<float> row(w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) row[c] = quant::bf16_to_f32(w.data[r * w.cols + c]);
    for (int64_t i = 0; i < n; ++i)
      y[i * w.rows + r] = static_cast<float>(dot(row.data(), x + i * w.cols, w.cols));
  }
}

void f32_rows(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t i = 0; i < n; ++i)
      y[i * w.rows + r] = static_cast<float>(dot(w.data + r * w.cols, x + i * w.cols, w.cols));
}

void int8_rows(const Int8Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    float scale;
    std::memcpy(&scale, w.scales + 4 * r, 4);
    for (int64_t i = 0; i < n; ++i)
      y[i * w.rows + r] = static_cast<float>(dot(w.q + r * w.cols, x + i * w.cols, w.cols) * scale);
  }
}

int64_t find_scale_nan(const uint8_t* scales, int64_t n) { return quant::find_e8m0_nan(scales, n); }

}  // namespace deltafin::kernels::detail::ref
