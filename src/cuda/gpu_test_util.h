// Small helpers shared by the GPU test and benchmark programs, which must build on the device
// host with nothing but the CUDA toolkit (no gtest): CUDA error checks, device buffers and random
// test data.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/mxfp4_layout.h"

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

// Whether this run has a device: without one the test program still runs its host-side checks
// (the CPU emulations against the repository's references), then exits kSkipExitCode.
inline bool has_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// The check counters of one test program.
inline int g_failures = 0;
inline int g_checks = 0;

inline void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

// memcmp, except that any two NaNs match: the GPU returns its canonical NaN where x86 keeps the
// input's payload.
template <typename T>
bool same_bits(const T* a, const T* b, int64_t count) {
  for (int64_t k = 0; k < count; ++k) {
    if (std::memcmp(a + k, b + k, sizeof(T)) == 0) continue;
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a[k]) && std::isnan(b[k])) continue;
    }
    return false;
  }
  return true;
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

// MXFP4 codes as the kernels read them (gemv.h DeviceMxfp4): the published bytes on the device,
// moved into the device layout as every upload of the model's weights moves them.
struct DeviceCodes : DeviceBuffer<uint8_t> {
  explicit DeviceCodes(const std::vector<uint8_t>& packed) : DeviceBuffer<uint8_t>(packed) {
    permute_mxfp4_codes(ptr, packed.size(), true);
    check(cudaDeviceSynchronize(), "permute_mxfp4_codes");
  }
};

// What `call` throws as std::invalid_argument ("" when it does not throw): the refusals of bad
// shapes, checked by their messages.
template <typename Call>
std::string invalid_argument_message(Call&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Activations with a spread of magnitudes and signs, so sums cancel and order matters.
inline std::vector<float> random_x(std::mt19937& rng, int64_t count) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-6, 6);
  std::vector<float> x(count);
  for (auto& v : x) v = std::ldexp(normal(rng), exp(rng));
  return x;
}

struct Mxfp4Host {
  int64_t rows, cols;
  std::vector<uint8_t> packed, scales;
};

inline Mxfp4Host random_mxfp4(std::mt19937& rng, int64_t rows, int64_t cols) {
  Mxfp4Host w{rows, cols, std::vector<uint8_t>(rows * cols / 2),
              std::vector<uint8_t>(rows * cols / 32)};
  std::uniform_int_distribution<int> byte(0, 255), scale(112, 132);
  for (auto& b : w.packed) b = static_cast<uint8_t>(byte(rng));
  for (auto& s : w.scales) s = static_cast<uint8_t>(scale(rng));
  return w;
}

}  // namespace deltafin::cuda::testing
