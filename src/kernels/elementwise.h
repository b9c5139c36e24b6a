// Element-wise pieces between the matmuls in fp32: the scalar sigmoid/SiLU/softplus, a dot product
// with a fixed summation tree, residual adds, sigmoid gates and per-head l2norm. Plain C++ compiled
// without ISA flags, so every build and thread count gives the same bits.
#pragma once

#include <cmath>
#include <cstdint>

namespace deltafin::kernels {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch's softplus (threshold 20): x above the threshold is returned as is.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Σ a[i]·b[i] with 8 interleaved partial sums combined in a fixed tree: the compiler vectorizes it
// without reassociating, so the result is the same on every ISA and thread count. Inline: the
// attention and delta-rule loops call it per position and per state row.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int u = 0; u < 8; ++u) acc[u] += a[i + u] * b[i + u];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

// y[i] += x[i] for n elements (the residual add).
void add(const float* x, int64_t n, float* y);
// x[i] = sigmoid(x[i]) for n elements, in place.
void apply_sigmoid(float* x, int64_t n);
// y[i] *= sigmoid(gate[i]) for n elements (the attention blocks' output gates).
void mul_sigmoid(const float* gate, int64_t n, float* y);
// Every row of `rows` rows of width dim, in place: x ← x / sqrt(Σ x² + 1e-6) · scale (fla's
// l2norm; KDA's q and k per head, q with scale 1/sqrt(dim)).
void l2norm_rows(float* x, int64_t rows, int64_t dim, float scale);

}  // namespace deltafin::kernels
