// Element-wise and reduction kernels around the matmuls: RMSNorm, the GLU activations (SiTU for
// Kimi K3, SiLU for SwiGLU models) and softmax, all in fp32. The ISA variant is chosen once from
// base::selected_isa(); SIMD variants use vector exp/tanh accurate to about 2 ulp.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// y = w ⊙ x / sqrt(mean(x²) + eps) over n elements; y may alias x. mean(x²) is accumulated in fp64,
// then y[i] = w[i] * (x[i] * r) with r = 1 / sqrt(mean + eps) rounded to f32 (HF's order:
// normalize, then scale by the weight).
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);
void rmsnorm(const float* x, const uint16_t* w_bf16, int64_t n, float eps, float* y);
// The same for each of `rows` rows of width n (y[r] = rmsnorm(x[r])); y may alias x.
void rmsnorm_rows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y);

// SiTU GLU (Kimi K3): y = [beta·tanh(g/beta)·sigmoid(g)] · [linear_beta·tanh(u/linear_beta)]
// (K3: beta 4, linear_beta 25). y may alias g or u.
void situ_glu(const float* g, const float* u, int64_t n, float beta, float linear_beta, float* y);
// SiLU GLU (SwiGLU): y = g·sigmoid(g)·u. y may alias g or u.
void silu_glu(const float* g, const float* u, int64_t n, float* y);

// In place, max-subtracted: x = exp(x - max) / Σ exp(x - max). Needs one element that is not -Inf.
void softmax(float* x, int64_t n);

}  // namespace deltafin::kernels
