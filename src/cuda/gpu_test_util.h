// Small helpers shared by the GPU test and benchmark programs, which must build on the device
// host with nothing but the CUDA toolkit (no gtest): CUDA error checks and device buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace deltafin::cuda::testing {

// Exit code ctest reads as "skipped" (SKIP_RETURN_CODE in src/cuda/CMakeLists.txt).
inline constexpr int kSkipExitCode = 77;

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(err));
    std::exit(2);
  }
}

// Exits with kSkipExitCode when no usable GPU is present, printing why.
inline void require_gpu(const char* program) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("%s: SKIPPED, no CUDA device (%s)\n", program,
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    std::exit(kSkipExitCode);
  }
}

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) {
    check(cudaMalloc(&ptr, n * sizeof(T) + 16), "cudaMalloc");
  }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& host) {
    check(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download(size_t n) const {
    std::vector<T> out(n);
    check(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return out;
  }
};

}  // namespace deltafin::cuda::testing
