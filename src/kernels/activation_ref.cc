// Scalar activations: the definition the SIMD variants are tested against. Transcendentals are
// evaluated in f64 and each output is rounded once to f32.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/activation_variant.h"
#include "quant/bf16.h"

namespace deltafin::kernels::detail::ref {
namespace {

double sum_squares(const float* x, int64_t n) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

void rmsnorm_f32(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float r = rms_scale(sum_squares(x, n), n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
}

void rmsnorm_bf16(const float* x, const uint16_t* w, int64_t n, float eps, float* y) {
  const float r = rms_scale(sum_squares(x, n), n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = quant::bf16_to_f32(w[i]) * (x[i] * r);
}

void situ_glu(const float* g, const float* u, int64_t n, float beta, float linear_beta, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i], ui = u[i];
    const double gate = beta * std::tanh(gi / beta) * sigmoid(gi);
    const double up = linear_beta * std::tanh(ui / linear_beta);
    y[i] = static_cast<float>(gate * up);
  }
}

void silu_glu(const float* g, const float* u, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i];
    y[i] = static_cast<float>(gi * sigmoid(gi) * u[i]);
  }
}

void softmax(float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  // x - max is rounded to f32 as an fp32 framework does; only exp and the sum use f64.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - m));
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(std::exp(static_cast<double>(x[i] - m)) / sum);
}

}  // namespace deltafin::kernels::detail::ref
