// The device pass that moves packed MXFP4 codes into the kernels' layout and back
// (mxfp4_layout.h): one 16-byte chunk a thread, grid-strided over up to kMaxCodeSpans spans.
#include "cuda/mxfp4_layout.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/gemv_launch.cuh"
#include "cuda/mxfp4_layout.cuh"
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

struct Spans {
  uint4* chunks[kMaxCodeSpans];
  size_t end[kMaxCodeSpans];  // chunks up to and including span i
  int count;
};

template <bool kForward>
__global__ void permute_kernel(Spans spans) {
  const size_t total = spans.end[spans.count - 1];
  int s = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    while (i >= spans.end[s]) ++s;  // i only grows, so the span index only does
    uint4* chunk = spans.chunks[s] + (i - (s == 0 ? 0 : spans.end[s - 1]));
    uint4 v = *chunk;
    auto move = [](uint32_t w) {
      return kForward ? gemv::permute_e2m1_word(w) : gemv::unpermute_e2m1_word(w);
    };
    *chunk = make_uint4(move(v.x), move(v.y), move(v.z), move(v.w));
  }
}

void check_span(const CodeSpan& span) {
  if (span.bytes % 16 != 0 || reinterpret_cast<uintptr_t>(span.packed) % 16 != 0)
    throw std::invalid_argument("permute_mxfp4_codes: " + std::to_string(span.bytes) +
                                " bytes, expected a multiple of 16 at a 16-byte aligned address");
}

void launch(const Spans& spans, bool forward, cudaStream_t stream) {
  const size_t total = spans.end[spans.count - 1];
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((total + threads - 1) / threads, 4096));
  if (forward)
    permute_kernel<true><<<blocks, threads, 0, stream>>>(spans);
  else
    permute_kernel<false><<<blocks, threads, 0, stream>>>(spans);
  count_launches(1);
  gemv::check_launch("permute_mxfp4_codes");
}

}  // namespace

void permute_mxfp4_codes(const std::vector<CodeSpan>& spans, bool forward, cudaStream_t stream) {
  for (const CodeSpan& span : spans) check_span(span);
  Spans batch{};
  for (const CodeSpan& span : spans) {
    if (span.bytes == 0) continue;
    const size_t before = batch.count == 0 ? 0 : batch.end[batch.count - 1];
    batch.chunks[batch.count] = reinterpret_cast<uint4*>(span.packed);
    batch.end[batch.count] = before + span.bytes / 16;
    if (++batch.count == kMaxCodeSpans) {
      launch(batch, forward, stream);
      batch = Spans{};
    }
  }
  if (batch.count > 0) launch(batch, forward, stream);
}

void permute_mxfp4_codes(uint8_t* packed, size_t bytes, bool forward, cudaStream_t stream) {
  permute_mxfp4_codes(std::vector<CodeSpan>{{packed, bytes}}, forward, stream);
}

}  // namespace deltafin::cuda
