// Element-wise kernels: one portable definition (no ISA variant pays for these memory-bound loops).
#include "kernels/elementwise.h"

namespace deltafin::kernels {

void add(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void apply_sigmoid(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = sigmoid(x[i]);
}

void mul_sigmoid(const float* gate, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= sigmoid(gate[i]);
}

void l2norm_rows(float* x, int64_t rows, int64_t dim, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    const float ss = dot(v, v, dim);
    const float inv = 1.0f / std::sqrt(ss + 1e-6f);
    for (int64_t i = 0; i < dim; ++i) v[i] = v[i] * inv * scale;
  }
}

}  // namespace deltafin::kernels
