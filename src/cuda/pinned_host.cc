// The pinned host memory resource (pinned_host.h).
#include "cuda/pinned_host.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace deltafin::cuda {
namespace {

class PinnedHostResource final : public std::pmr::memory_resource {
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    // cudaHostAlloc returns page-aligned memory: any alignment a container asks for.
    if (alignment > 4096) throw std::bad_alloc();
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(
          "CUDA backend: " + std::to_string(bytes) + " bytes of pinned host memory for logits: " +
          cudaGetErrorString(err) + "; lower --memory-budget's other uses or use --device cpu");
    }
    return p;
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override {
    cudaFreeHost(p);  // at exit the context may be gone: nothing to do about an error then
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }
};

}  // namespace

std::pmr::memory_resource* pinned_host_memory() {
  static auto* resource = new PinnedHostResource;  // never destroyed (see the header)
  return resource;
}

}  // namespace deltafin::cuda
