// The device pass that moves packed MXFP4 codes into the permuted layout and back
// (mxfp4_layout.h): one 16-byte chunk a thread, grid-strided.
#include "cuda/mxfp4_layout.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/mxfp4_layout.cuh"

namespace deltafin::cuda {
namespace {

template <bool kForward>
__global__ void permute_kernel(uint4* chunks, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint4 v = chunks[i];
    auto move = [](uint32_t w) {
      return kForward ? gemv::permute_e2m1_word(w) : gemv::unpermute_e2m1_word(w);
    };
    v = make_uint4(move(v.x), move(v.y), move(v.z), move(v.w));
    chunks[i] = v;
  }
}

}  // namespace

void permute_mxfp4_codes(uint8_t* packed, size_t bytes, bool forward, cudaStream_t stream) {
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(packed) % 16 != 0)
    throw std::invalid_argument("permute_mxfp4_codes: " + std::to_string(bytes) +
                                " bytes, expected a multiple of 16 at a 16-byte aligned address");
  if (bytes == 0) return;
  const size_t count = bytes / 16;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((count + threads - 1) / threads, 4096));
  auto* chunks = reinterpret_cast<uint4*>(packed);
  if (forward)
    permute_kernel<true><<<blocks, threads, 0, stream>>>(chunks, count);
  else
    permute_kernel<false><<<blocks, threads, 0, stream>>>(chunks, count);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("permute_mxfp4_codes: ") + cudaGetErrorString(e));
}

}  // namespace deltafin::cuda
