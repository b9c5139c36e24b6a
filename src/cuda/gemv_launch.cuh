// Host helpers the GEMV launchers share (gemv.cu, gemv_mxfp4_pairs.cu): a kernel's opt-in to more
// than 48 KB of shared memory, the device's SM count, and how many blocks of a kernel an SM holds.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace deltafin::cuda::gemv {

// Above 48 KB of dynamic shared memory a kernel must opt in. Only kernels whose size is fixed go
// there (a tile's), so once per kernel suffices; a smaller maximum is never set, since it would
// refuse a later launch of that kernel with more (the resident MXFP4 rows vary with cols).
template <auto kKernel>
void opt_in(int smem) {
  if (smem <= 48 * 1024) return;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    throw std::runtime_error(std::string("cuda::matmul: shared memory of ") + std::to_string(smem) +
                             " bytes refused: " + cudaGetErrorString(attr));
}

// The current device's SM count, found once: the device a process computes on does not change.
inline int device_sms() {
  static const int sms = [] {
    int device = 0, count = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    return count > 0 ? count : 1;
  }();
  return sms;
}

// Blocks of `kKernel` an SM holds at once with `threads` threads and `smem` bytes, found at the
// first call: for kernels launched with one shared-memory size only (the first call's is kept).
template <auto kKernel>
int blocks_per_sm(int threads, int smem) {
  static const int per_sm = [threads, smem] {
    opt_in<kKernel>(smem);
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, threads, smem) != cudaSuccess)
      n = 1;
    return n > 0 ? n : 1;
  }();
  return per_sm;
}

}  // namespace deltafin::cuda::gemv
