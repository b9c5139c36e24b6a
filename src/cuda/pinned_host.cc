// The pinned host memory resource (pinned_host.h).
#include "cuda/pinned_host.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

namespace deltafin::cuda {
namespace {

constexpr int kMaxDevices = 64;

class PinnedHostResource final : public std::pmr::memory_resource {
 public:
  explicit PinnedHostResource(int device) : device_(device) {}

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    // cudaHostAlloc returns page-aligned memory: any alignment a container asks for.
    if (alignment > 4096) throw std::bad_alloc();
    void* p = nullptr;
    cudaError_t err = cudaSetDevice(device_);
    if (err == cudaSuccess) err = cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(
          "CUDA backend: " + std::to_string(bytes) + " bytes of pinned host memory for logits: " +
          cudaGetErrorString(err) + "; lower --memory-budget's other uses or use --device cpu");
    }
    return p;
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override {
    // On the allocating device: a thread that never used CUDA (a session destroyed elsewhere)
    // would otherwise free through, and so create, a context on device 0. At exit the context
    // may be gone: nothing to do about an error then.
    if (cudaSetDevice(device_) == cudaSuccess) cudaFreeHost(p);
    cudaGetLastError();
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  int device_;
};

}  // namespace

std::pmr::memory_resource* pinned_host_memory(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw std::invalid_argument("cuda::pinned_host_memory: device " + std::to_string(device) +
                                ", expected 0.." + std::to_string(kMaxDevices - 1));
  static std::mutex mu;
  static std::array<PinnedHostResource*, kMaxDevices> resources{};  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  if (resources[device] == nullptr) resources[device] = new PinnedHostResource(device);
  return resources[device];
}

}  // namespace deltafin::cuda
