// Small element-wise pieces the blocks share (scalar activations and gates in fp32).
#pragma once

#include <cmath>
#include <cstdint>

namespace deltafin::model {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch's softplus (threshold 20): x above the threshold is returned as is.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// y[r, :] = w ⊙ x[r, :] / sqrt(mean(x[r, :]²) + eps) for n rows of width d (in place allowed).
void rmsnorm_rows(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y);

}  // namespace deltafin::model
