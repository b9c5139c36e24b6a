// Small element-wise pieces the blocks share (scalar activations and gates in fp32).
#pragma once

#include <cmath>
#include <cstdint>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace deltafin::model {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch's softplus (threshold 20): x above the threshold is returned as is.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Σ a[i]·b[i] with 8 interleaved partial sums combined in a fixed tree: the compiler vectorizes it
// without reassociating, so the result is the same on every ISA and thread count.
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

// Flushes subnormal results and inputs to zero on this thread while in scope. Long products of
// decay factors (KDA: up to e^-5 per token) sink through the subnormal range, where x86 arithmetic
// is ~100x slower; values below 1.2e-38 change nothing at fp32 resolution.
class FlushSubnormals {
 public:
#if defined(__SSE__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ | DAZ
  ~FlushSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

// y[r, :] = w ⊙ x[r, :] / sqrt(mean(x[r, :]²) + eps) for n rows of width d (in place allowed).
void rmsnorm_rows(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y);

}  // namespace deltafin::model
