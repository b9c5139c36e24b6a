// RMSNorm on the GPU, with the CPU kernels' numerics: the sum of squares in fp64 (each square is
// exact there), the scale 1/sqrt(ss/n + eps) rounded once to fp32, y = w * (x * scale).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deltafin::cuda {

// y[r] = rmsnorm(x[r]) for each of `rows` rows of width n; device pointers; y may alias x.
// Throws std::invalid_argument for rows or n below 1, std::runtime_error on a launch error.
void rmsnorm_rows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y,
                  cudaStream_t stream = 0);
void rmsnorm_rows(const float* x, const uint16_t* w_bf16, int64_t rows, int64_t n, float eps,
                  float* y, cudaStream_t stream = 0);

}  // namespace deltafin::cuda
