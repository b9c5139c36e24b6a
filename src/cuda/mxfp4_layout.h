// Moving packed MXFP4 codes on the device into the layout the kernels decode (gemv.h DeviceMxfp4,
// mxfp4_layout.cuh) and back. Host memory always holds the published layout; the codes move
// right after the copy that brings them to the device (gpu_place.cc's uploads, the expert
// cache's misses, the streamed spine's layers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace deltafin::cuda {

// Packed codes in device memory: a multiple of 16 bytes at a 16-byte aligned address.
struct CodeSpan {
  uint8_t* packed;
  size_t bytes;
};

// Every 32-bit word of packed[0, bytes) in place, on `stream`: into the device layout (forward)
// or back. Throws std::invalid_argument for a size or address the span rules refuse.
void permute_mxfp4_codes(uint8_t* packed, size_t bytes, bool forward, cudaStream_t stream = 0);
// The same for several spans, one launch for each kMaxCodeSpans of them (none when empty).
inline constexpr int kMaxCodeSpans = 8;
void permute_mxfp4_codes(const std::vector<CodeSpan>& spans, bool forward, cudaStream_t stream = 0);

}  // namespace deltafin::cuda
