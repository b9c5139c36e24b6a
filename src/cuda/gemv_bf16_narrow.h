// The exact BF16 GEMV for rows of at most 128 columns (K3's f_b: 12288x128) at 1-8 activation
// rows (gemv_bf16_narrow.cu): what gemv.cu's matmul calls before its tiled kernels. Internal to
// src/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/gemv.h"

namespace deltafin::cuda::detail {

// The widest row the narrow kernel takes: 16 chunks of 8 columns, half a warp's lanes.
constexpr int64_t kBf16NarrowMaxCols = 128;

// y = x · Wᵀ for n (1..8) activation rows of a matrix whose rows have at most kBf16NarrowMaxCols
// columns, bit-identical to the tiled kernels (the same arithmetic in the same order, gemv.h).
// Returns false, launching nothing, where it does not take the shape (n or cols out of its range);
// the caller then runs a tiled kernel.
bool bf16_narrow(const DeviceBf16& w, const float* x, int n, float* y, cudaStream_t stream);

}  // namespace deltafin::cuda::detail
