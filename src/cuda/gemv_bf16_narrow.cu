// The exact BF16 GEMV for rows of at most 128 columns at 1-8 activation rows. The tiled kernels
// (gemv.cu) give lane l a row's chunks l, l + 32, ... of 8 columns, so on such a row lanes 16-31
// hold nothing and a 24- or 32-row block makes one pass: its loads, then its math, then its sums,
// with nothing to overlap them (K3's f_b; figures in docs/PERFORMANCE.md). Here a warp takes two
// rows at a time, one a half-warp, each lane the chunk the tiled kernels give it, and loads the
// next pair's weights before this pair's math. Every output keeps its operations and their order
// (docs/CUDA.md, "Exactness").
#include "cuda/gemv_bf16_narrow.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/gemv_common.cuh"
#include "cuda/gemv_launch.cuh"
#include "cuda/op_count.h"

namespace deltafin::cuda::detail {
namespace {

using namespace gemv;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

// A chunk's 8 activations sit 12 floats apart in shared memory, as in the tiled kernels: the 8
// lanes of a 16-byte load phase then hit distinct banks.
constexpr int kChunkStride = 12;
constexpr int kMaxChunks = static_cast<int>(kBf16NarrowMaxCols / 8);

// Rows 2p (lanes 0-15) and 2p + 1 (lanes 16-31) for pairs p = blockIdx.x · kWarps + warp, then a
// grid's worth further. A lane's sum for activation row i is the tiled kernels' lane-l chain: one
// chunk's 8 fused multiply-adds from 0, or 0 where the row has no chunk l. Their butterfly
// (warp_sum) adds lane l + 16's sum first, which on these rows is that 0, then lanes l ^ 8, ^ 4,
// ^ 2, ^ 1, which stay inside the half-warp: so each half adds +0 and then runs those four steps,
// for N activation rows at once as a reduce-scatter (scatter_sums: the same additions).
// The activations are staged in shared memory once a block (in registers they took 64 at 8 rows,
// which held an SM to 16 warps; the grid is then too small to have a K3 f_b's loads in flight).
template <int N>
__global__ void __launch_bounds__(kThreads)
    bf16_narrow_kernel(const uint16_t* __restrict__ wbits, int rows, int cols,
                       const float* __restrict__ x, int n, float* __restrict__ y) {
  __shared__ float4 xs[N * kMaxChunks * kChunkStride / 4];  // [i][chunk][kChunkStride]
  const int lane = threadIdx.x % 32, half = lane / 16, chunk = lane % 16;
  const int chunks = cols / 8;
  const bool has_chunk = chunk < chunks;
  const int pairs = (rows + 1) / 2, step = gridDim.x * kWarps;
  int p = blockIdx.x * kWarps + threadIdx.x / 32;
  auto load = [&](int pair) {
    const int row = 2 * pair + half;
    return pair < pairs && row < rows && has_chunk
               ? load_stream(wbits + static_cast<int64_t>(row) * cols + chunk * 8)
               : make_uint4(0, 0, 0, 0);
  };
  uint4 w = load(p);  // before the activations: its latency is the longer one
  // Piece q: activation row q / 32, chunk (q / 2) % 16, half q % 2; rows past n and chunks past
  // the row's are zeros (never read into a sum that is stored).
  for (int q = threadIdx.x; q < N * kMaxChunks * 2; q += kThreads) {
    const int i = q / (kMaxChunks * 2), c = (q / 2) % kMaxChunks, part = q % 2;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < n && c < chunks)
      v = __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(i) * cols + c * 8) + part);
    xs[(i * kMaxChunks + c) * (kChunkStride / 4) + part] = v;
  }
  __syncthreads();

  for (; p < pairs; p += step) {
    const uint4 next = load(p + step);
    float wv[8];
    bf16x8_to_f32(w, wv);
    const int row = 2 * p + half;
    float v[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float4* xc = xs + (i * kMaxChunks + chunk) * (kChunkStride / 4);
      v[i] = has_chunk ? fma8(wv, xc[0], xc[1], 0.0f) : 0.0f;
      v[i] = __fadd_rn(v[i], 0.0f);  // warp_sum's first step: lane l + 16 of the tiled kernel's row
    }
    // The four steps left, within the half-warp, by reduce-scatter: chunk c holds activation
    // row c / (16 / N)'s sum.
    const float sum = scatter_sums<16>(v, lane);
    const int i = chunk / (16 / N);
    if (chunk % (16 / N) == 0 && i < n && row < rows) y[static_cast<int64_t>(i) * rows + row] = sum;
    w = next;
  }
}

template <int N>
void launch(const DeviceBf16& w, const float* x, int n, float* y, cudaStream_t stream) {
  constexpr auto kernel = bf16_narrow_kernel<N>;
  const int rows = static_cast<int>(w.rows);
  const int wanted = ((rows + 1) / 2 + kWarps - 1) / kWarps;
  const int resident = blocks_per_sm<kernel>(kThreads, 0) * device_sms();
  kernel<<<std::min(wanted, resident), kThreads, 0, stream>>>(w.data, rows,
                                                              static_cast<int>(w.cols), x, n, y);
  count_launches(1);
}

}  // namespace

bool bf16_narrow(const DeviceBf16& w, const float* x, int n, float* y, cudaStream_t stream) {
  if (w.cols > kBf16NarrowMaxCols || w.cols % 8 != 0 || n < 1 || n > 8) return false;
  if (n == 1)
    launch<1>(w, x, n, y, stream);
  else if (n == 2)
    launch<2>(w, x, n, y, stream);
  else if (n <= 4)
    launch<4>(w, x, n, y, stream);
  else
    launch<8>(w, x, n, y, stream);
  return true;
}

}  // namespace deltafin::cuda::detail
