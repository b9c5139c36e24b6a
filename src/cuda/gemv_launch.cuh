// Host helpers the GEMV launchers share (gemv.cu, gemv_mxfp4_pairs.cu): a kernel's opt-in to more
// than 48 KB of shared memory, the device's SM count and DRAM rate per SM, and how many blocks of a
// kernel an SM holds.
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

// The current device's peak DRAM rate per SM in GB/s (double data rate over its bus), found once:
// 25.4 on an H100 SXM (3.35 TB/s, 132 SMs), 37.3 on an H200 (4.92 TB/s, 132 SMs). 0 without a
// device.
inline double device_dram_gbps_per_sm() {
  static const double rate = [] {
    int device = 0, khz = 0, bits = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess)
      return 0.0;
    return 2.0 * khz * 1e3 * (bits / 8.0) / 1e9 / device_sms();
  }();
  return rate;
}
// Where DRAM feeds an SM faster than this, the GEMV kernels are bound inside the SM rather than by
// the read, and some want other shapes than on slower cards (the H200 against the H100: gemv.cu's
// bf16_choose, gemv_mxfp4_pairs.cu's mxfp4_pairs_default).
inline constexpr double kFastDramGbpsPerSm = 30.0;

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
