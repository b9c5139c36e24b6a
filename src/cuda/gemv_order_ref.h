// CPU emulation of the GPU kernels' exact arithmetic order (gemv.h): the bit-exact reference the
// GPU tests compare against. Plain C++; no CUDA needed.
#pragma once

#include <cstdint>

namespace deltafin::cuda {

// Same arguments and layout as deltafin::kernels::matmul on host memory; y[n, rows].
void cpu_order_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                     const float* x, int64_t n, float* y);
void cpu_order_bf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                    float* y);

}  // namespace deltafin::cuda
