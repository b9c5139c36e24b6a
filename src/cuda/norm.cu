// The RMSNorm kernel: one block per row; fp64 partial sums per thread, a shuffle and shared-memory
// tree, then the fp32 scale. The fp64 sum's order differs from the CPU's, but its rounding error
// (~1e-16 relative) can change the fp32 scale only when it sits on a rounding boundary.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda/norm.h"
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float weight_f32(const float* w, int64_t i) { return w[i]; }
__device__ __forceinline__ float weight_f32(const uint16_t* w, int64_t i) {
  return __uint_as_float(static_cast<uint32_t>(w[i]) << 16);
}

template <typename W>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_kernel(const float* x, const W* w, int64_t n, float eps, float* y) {
  __shared__ double partial[kThreads / 32];
  __shared__ float scale;
  const float* row = x + blockIdx.x * n;
  // Each thread's chain runs over i = t, t + 256, ... in order. Loads are issued kBatch at a
  // time before their arithmetic, in both loops: a decode row is one block, and with one load in
  // flight per thread it waited on memory latency once per 256 values. y may alias x: each value
  // is read and written by one thread only, and each batch is read before any of it is written.
  constexpr int kBatch = 16;
  double ss = 0.0;
  for (int64_t base = threadIdx.x; base < n; base += kBatch * kThreads) {
    float v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t i = base + b * kThreads;
      v[b] = i < n ? row[i] : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (base + b * kThreads < n) {
        const double d = v[b];
        ss = __fma_rn(d, d, ss);
      }
    }
  }
  for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int k = 0; k < kThreads / 32; ++k) total += partial[k];
    scale = static_cast<float>(1.0 / sqrt(total / static_cast<double>(n) + eps));
  }
  __syncthreads();
  const float r = scale;
  float* out = y + blockIdx.x * n;
  for (int64_t base = threadIdx.x; base < n; base += kBatch * kThreads) {
    float v[kBatch], wv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t i = base + b * kThreads;
      v[b] = i < n ? row[i] : 0.0f;
      wv[b] = i < n ? weight_f32(w, i) : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t i = base + b * kThreads;
      if (i < n) out[i] = __fmul_rn(wv[b], __fmul_rn(v[b], r));
    }
  }
}

template <typename W>
void launch(const float* x, const W* w, int64_t rows, int64_t n, float eps, float* y,
            cudaStream_t stream) {
  if (rows < 1 || rows > INT32_MAX || n < 1)
    throw std::invalid_argument("cuda::rmsnorm_rows: rows is " + std::to_string(rows) +
                                " and n is " + std::to_string(n) + ", expected both >= 1");
  rmsnorm_kernel<W><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, n, eps, y);
  count_launches(1);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("cuda::rmsnorm_rows: CUDA launch failed: ") +
                             cudaGetErrorString(err));
}

}  // namespace

void rmsnorm_rows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y,
                  cudaStream_t stream) {
  launch(x, w, rows, n, eps, y, stream);
}

void rmsnorm_rows(const float* x, const uint16_t* w_bf16, int64_t rows, int64_t n, float eps,
                  float* y, cudaStream_t stream) {
  launch(x, w_bf16, rows, n, eps, y, stream);
}

}  // namespace deltafin::cuda
