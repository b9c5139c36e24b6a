// The causal depthwise short convolution with SiLU that KDA applies to q, k and v, carrying the
// last kernel - 1 inputs of a sequence from one call to the next.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// Longest kernel supported (K3 and Kimi-Linear use 4).
inline constexpr int64_t kShortConvMaxKernel = 8;

// y[t, c] = silu(Σ_i w[c, i] · in[t + i, c]) over in = [hist; x] for n rows of width p, where
// w is [p, kernel] (the last column multiplies the current row) and hist [kernel - 1, p] holds
// the previous inputs, oldest first; hist is then advanced to the last kernel - 1 inputs.
// y must not alias x.
void short_conv_silu(const float* x, int64_t n, int64_t p, int64_t kernel, const float* w,
                     float* hist, float* y);
// Advances hist [kernel - 1, p] past n input rows x [n, p] as short_conv_silu does (a data move).
void short_conv_push(const float* x, int64_t n, int64_t p, int64_t kernel, float* hist);

}  // namespace deltafin::kernels
