// Host helpers the GEMV and decode launchers share (gemv.cu, gemv_mxfp4_pairs.cu, gemv_mxfp4_tc.cu,
// decode_ops.cu, decode_ops_mla.cu, mxfp4_layout.cu): the choice of a kernel instantiation from a
// runtime count, a kernel's opt-in to more than 48 KB of shared memory and its counted launch, the
// device's SM count and DRAM rate per SM, how many blocks of a kernel an SM holds, and the checks
// of a launch's arguments and result.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/gemv.h"
#include "cuda/op_count.h"

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

// Calls f(std::integral_constant<int, k>{}) for the first k of kValues equal to v, or for the
// last of kValues when none is: a runtime count to the kernel instantiation compiled for it.
template <int... kValues, typename F>
void with_constant(int v, F&& f) {
  constexpr int kAll[] = {kValues...};
  constexpr int kLast = kAll[sizeof...(kValues) - 1];
  bool done = false;
  ((done = done || ((v == kValues || kValues == kLast) &&
                    (f(std::integral_constant<int, kValues>{}), true))),
   ...);
}

// One counted launch of kKernel, opted in to its shared memory first.
template <auto kKernel, typename... Args>
void launch_threads(int threads, int smem, dim3 blocks, cudaStream_t stream, Args... args) {
  opt_in<kKernel>(smem);
  kKernel<<<blocks, threads, smem, stream>>>(args...);
  count_launches(1);
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

// A launch error of the last kernel as std::runtime_error naming `what`; shape and pointer
// checks of the single products as std::invalid_argument naming the field.
inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) +
                             ": CUDA launch failed: " + cudaGetErrorString(err));
}

inline void check_shape(const char* what, int64_t rows, int64_t cols, int64_t n,
                        int64_t col_multiple, const void* weights, const float* x, const float* y) {
  const std::string w(what);
  if (rows <= 0 || rows > INT32_MAX)
    throw std::invalid_argument(w + ": rows is " + std::to_string(rows) + ", expected 1..2^31-1");
  if (cols <= 0 || cols > INT32_MAX || cols % col_multiple != 0)
    throw std::invalid_argument(w + ": cols is " + std::to_string(cols) +
                                ", expected a positive multiple of " +
                                std::to_string(col_multiple));
  if (n < 0) throw std::invalid_argument(w + ": n is " + std::to_string(n) + ", expected >= 0");
  if (reinterpret_cast<uintptr_t>(weights) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    throw std::invalid_argument(w + ": weights and x must be 16-byte aligned device pointers");
  if (weights == nullptr || x == nullptr || y == nullptr)
    throw std::invalid_argument(w + ": null device pointer");
}

// The arguments of a grouped MXFP4 launch (matmul_grouped, matmul_grouped_tc).
inline void check_grouped(const char* what, const void* tasks, int64_t count, int64_t rows,
                          int64_t cols, int64_t max_n) {
  if (rows <= 0 || rows > INT32_MAX || cols <= 0 || cols > INT32_MAX || cols % 32 != 0)
    throw std::invalid_argument(std::string(what) + ": rows x cols is " + std::to_string(rows) +
                                "x" + std::to_string(cols) +
                                ", expected rows 1..2^31-1 and cols a positive multiple of 32");
  if (tasks == nullptr) throw std::invalid_argument(std::string(what) + ": tasks is null");
  if (count < 0 || count > 65535)
    throw std::invalid_argument(std::string(what) + ": count is " + std::to_string(count) +
                                ", expected 0..65535");
  if (max_n < 0 || max_n > kGpuMaxBatch)
    throw std::invalid_argument(std::string(what) + ": max_n is " + std::to_string(max_n) +
                                ", expected 0..16");
}

}  // namespace deltafin::cuda::gemv
