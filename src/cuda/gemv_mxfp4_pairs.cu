// The exact MXFP4 GEMV at one activation row for rows of 96 or 112 groups (K3's expert downs and
// its gates and ups). A warp takes weight rows two at a time, each lane one 16-byte group of each
// per step; a 112-group pair's half-empty last step holds both rows' tails (lanes 0-15 the first
// row's, 16-31 the second's). Weights and scales arrive through a per-warp ring of cp.async
// stages in shared memory, the next pairs' loads in flight while this pair's math runs, with no
// registers held for them; a lane reads its pieces of a stage into registers before the math. The
// arithmetic and its order are gemv.cu's (gemv.h), so every output is bit-identical to the general
// kernel's; only the instructions around it are fewer (docs/CUDA.md).
#include "cuda/gemv_mxfp4_pairs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/gemv_common.cuh"
#include "cuda/gemv_launch.cuh"
#include "cuda/op_count.h"

namespace deltafin::cuda::detail {
namespace {

using namespace gemv;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
int g_stages = kMxfp4PairsDefaultStages;

// A row pair's work for rows of G groups: kFull steps in which every lane takes a group of each
// row, then (G % 32 == 16) one step holding both rows' last 16 groups. A stage of a warp's ring
// holds the pair's 16-byte pieces ([kPieces][32 lanes]) and both rows' scales (2G bytes, 16-byte
// chunks).
template <int G>
struct PairShape {
  static_assert(G % 32 == 0 || G % 32 == 16, "a row's last step must be whole or half");
  static constexpr int kFull = G / 32;
  static constexpr bool kTail = G % 32 != 0;
  static constexpr int kPieces = 2 * kFull + (kTail ? 1 : 0);
  static constexpr int kPieceBytes = kPieces * 32 * 16;
  static constexpr int kStageBytes = kPieceBytes + 2 * G;
  static int smem_bytes(int stages) {
    return G * kMxGroupStride * 4 + kWarps * stages * kStageBytes;
  }
};

__device__ __forceinline__ uint32_t word(const uint4& w, int k) {
  return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w;
}

// acc + round(p · 2^63) · 2^(s-127): the general kernel's group step. kFast, for scales s <= 191
// only: one FMA by the normal float 2^(s-64), which gives the same bits, since the two powers of
// two multiply exactly and p · 2^63 does not overflow (|p| < 2^10 while |x| < 2^65; at larger x
// both are inf or NaN).
template <bool kFast>
__device__ __forceinline__ float add_group(float p, uint32_t s, float acc) {
  if constexpr (kFast) return __fmaf_rn(p, __uint_as_float(s * (1u << 23) + (63u << 23)), acc);
  return __fmaf_rn(__fmul_rn(p, kXScale), e8m0_to_f32(s), acc);
}

// One group's 32 products in order (fma8 four times), from 0: the general kernel's group sum.
__device__ __forceinline__ float group_sum(const uint4& w, const float4* xg) {
  float p = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float f[8];
    e2m1x8_raw(word(w, k), f);
    p = fma8(f, xg[2 * k], xg[2 * k + 1], p);
  }
  return p;
}

// Both rows' group sums for a step whose lanes all take group g of each row: the activations are
// read once for the two.
__device__ __forceinline__ void group_sums2(const uint4& wa, const uint4& wb, const float4* xg,
                                            float& pa, float& pb) {
  pa = 0.0f;
  pb = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float4 x0 = xg[2 * k], x1 = xg[2 * k + 1];
    float fa[8], fb[8];
    e2m1x8_raw(word(wa, k), fa);
    pa = fma8(fa, x0, x1, pa);
    e2m1x8_raw(word(wb, k), fb);
    pb = fma8(fb, x0, x1, pb);
  }
}

// A lane's scales of one pair: row a's and row b's groups 32s + lane, then its tail group's.
template <int G>
struct PairScales {
  uint32_t a[PairShape<G>::kFull], b[PairShape<G>::kFull], tail;
};

// The pair's two outputs from the lane's pieces of it: lane l's sums in the general kernel's order
// for both rows, then its butterfly, the first step of which (lanes l and l + 16) is formed per
// row: lanes 0-15 hold the first row's sums after it, lanes 16-31 the second's, and the other four
// steps run on both at once. Returns the lane's value after the butterfly (lane 0: row a, lane 16:
// row b).
template <int G, bool kFast>
__device__ __forceinline__ float pair_outputs(const uint4 (&w)[PairShape<G>::kPieces],
                                              const PairScales<G>& sc, const float* xs, int lane) {
  using S = PairShape<G>;
  float acc_a = 0.0f, acc_b = 0.0f;
#pragma unroll
  for (int s = 0; s < S::kFull; ++s) {
    float pa, pb;
    group_sums2(w[2 * s], w[2 * s + 1],
                reinterpret_cast<const float4*>(xs + (32 * s + lane) * kMxGroupStride), pa, pb);
    acc_a = add_group<kFast>(pa, sc.a[s], acc_a);
    acc_b = add_group<kFast>(pb, sc.b[s], acc_b);
  }
  float v;
  if constexpr (S::kTail) {
    // Lane l < 16 adds the first row's group 32·kFull + l to its own sum; lane l + 16 adds the
    // second row's to the sum of that row's lane l, moved up to it.
    const bool row_a = lane < 16;
    const float p = group_sum(
        w[2 * S::kFull],
        reinterpret_cast<const float4*>(xs + (32 * S::kFull + lane % 16) * kMxGroupStride));
    const float b_below = __shfl_up_sync(kFullMask, acc_b, 16);
    const float a_above = __shfl_down_sync(kFullMask, acc_a, 16);
    const float t = add_group<kFast>(p, sc.tail, row_a ? acc_a : b_below);
    v = __fadd_rn(t, row_a ? a_above : acc_b);
  } else {
    const float other = __shfl_xor_sync(kFullMask, lane < 16 ? acc_b : acc_a, 16);
    v = __fadd_rn(lane < 16 ? acc_a : acc_b, other);
  }
#pragma unroll
  for (int off = 8; off > 0; off /= 2) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

template <int G, int D>
__device__ __forceinline__ void pairs_body(const DeviceMxfp4Task& task, int rows) {
  using S = PairShape<G>;
  if (task.n <= 0) return;  // the whole block returns: nothing to read or write
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);  // [G][kMxGroupStride], x · 2^63
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint8_t* const ring =
      reinterpret_cast<uint8_t*>(xs + G * kMxGroupStride) + warp * D * S::kStageBytes;
  uint8_t* const ring_end = ring + D * S::kStageBytes;
  const int pairs = (rows + 1) / 2, whole_pairs = rows / 2;
  const int first = blockIdx.x * kWarps + warp, step = gridDim.x * kWarps;
  const bool scales_aligned = reinterpret_cast<uintptr_t>(task.scales) % 16 == 0;
  float* const y = task.y;

  // The loads run D - 1 pairs ahead of the math: the issuing side's pair, its rows' weights and
  // scales and its stage advance by a grid's worth of pairs per call. One commit group per call,
  // empty past the last pair.
  int issue_pair = first;
  const uint8_t* iw = task.packed + static_cast<int64_t>(first) * (2 * G * 16);
  const uint8_t* is = task.scales + static_cast<int64_t>(first) * (2 * G);
  uint8_t* issue_stage = ring;
  // The tail piece: the first row's group 32·kFull + lane (lanes 0-15) or the second's.
  const int tail_offset = (lane < 16 ? 0 : G * 16) + (32 * S::kFull + lane % 16) * 16;
  auto issue = [&] {
    if (issue_pair < pairs) {
      const bool has_b = issue_pair < whole_pairs;
      const uint8_t* ib = has_b ? iw + G * 16 : iw;  // an absent row reads nothing
#pragma unroll
      for (int s = 0; s < S::kFull; ++s) {
        cp_async16(issue_stage + (2 * s * 32 + lane) * 16, iw + (32 * s + lane) * 16, true);
        cp_async16(issue_stage + ((2 * s + 1) * 32 + lane) * 16, ib + (32 * s + lane) * 16, has_b);
      }
      if constexpr (S::kTail)
        cp_async16(issue_stage + (2 * S::kFull * 32 + lane) * 16, iw + tail_offset,
                   lane < 16 || has_b);
      uint8_t* sc = issue_stage + S::kPieceBytes;
      if (scales_aligned) {
        if (lane < G / 8) cp_async16(sc + lane * 16, is + lane * 16, lane < G / 16 || has_b);
      } else {  // no 16-byte copies: byte loads (the model's scales are 256-byte aligned)
        for (int j = lane; j < 2 * G; j += 32) sc[j] = (j < G || has_b) ? is[j] : 0;
      }
    }
    cp_async_commit();
    issue_pair += step;
    iw += static_cast<int64_t>(step) * (2 * G * 16);
    is += static_cast<int64_t>(step) * (2 * G);
    issue_stage = issue_stage + S::kStageBytes == ring_end ? ring : issue_stage + S::kStageBytes;
  };

#pragma unroll
  for (int q = 0; q < (D > 1 ? D - 1 : 1); ++q) issue();
  for (int q = threadIdx.x; q < G * 8; q += kThreads) {
    float4 v = __ldg(reinterpret_cast<const float4*>(task.x) + q);
    v = make_float4(v.x * kXScale, v.y * kXScale, v.z * kXScale, v.w * kXScale);
    reinterpret_cast<float4*>(xs + (q / 8) * kMxGroupStride)[q % 8] = v;
  }
  __syncthreads();
  const uint8_t* stage = ring;
  for (int pair = first; pair < pairs; pair += step) {
    if constexpr (D > 1) issue();  // into the stage the previous pair's math left
    cp_async_wait<D - 1>();
    __syncwarp();  // the scales a lane reads came through other lanes' copies
    uint4 w[S::kPieces];
#pragma unroll
    for (int p = 0; p < S::kPieces; ++p)
      w[p] = reinterpret_cast<const uint4*>(stage)[p * 32 + lane];
    const uint8_t* sc = stage + S::kPieceBytes;  // [2][G]
    PairScales<G> scales;
    uint32_t top = 0;
#pragma unroll
    for (int s = 0; s < S::kFull; ++s) {
      scales.a[s] = sc[32 * s + lane];
      scales.b[s] = sc[G + 32 * s + lane];
      top = max(top, max(scales.a[s], scales.b[s]));
    }
    scales.tail = S::kTail ? sc[(lane < 16 ? 0 : G) + 32 * S::kFull + lane % 16] : 0u;
    top = max(top, scales.tail);
    if constexpr (D == 1) {
      __syncwarp();  // the one stage is read: the next pair's loads go in while this one's math
                     // runs
      issue();
    }
    // Scales above 2^64 (s > 191) are far outside trained weights; the general step takes them.
    const float v = __all_sync(kFullMask, top <= 191u)
                        ? pair_outputs<G, true>(w, scales, xs, lane)
                        : pair_outputs<G, false>(w, scales, xs, lane);
    if (lane == 0) y[2 * pair] = v;
    if (lane == 16 && 2 * pair + 1 < rows) y[2 * pair + 1] = v;
    if constexpr (D > 1) {
      __syncwarp();  // every lane is done with the stage before it is refilled
      stage = stage + S::kStageBytes == ring_end ? ring : stage + S::kStageBytes;
    }
  }
  cp_async_wait<0>();
}

template <int G, int D>
__global__ void __launch_bounds__(kThreads) pairs_kernel(DeviceMxfp4Task task, int rows) {
  pairs_body<G, D>(task, rows);
}

template <int G, int D>
__global__ void __launch_bounds__(kThreads)
    pairs_grouped_kernel(const DeviceMxfp4Task* __restrict__ tasks, int rows) {
  pairs_body<G, D>(tasks[blockIdx.y], rows);
}

// The most blocks of `kernel` the GPU holds at once.
template <auto kKernel>
int resident_blocks(int smem) {
  return blocks_per_sm<kKernel>(kThreads, smem) * device_sms();
}

// One wave: as many blocks as fit at once, shared evenly by the tasks, each block's warps taking
// pairs blockIdx.x · 4 + warp, then a grid's worth further, ... (no more blocks than pairs need).
template <int G, int D>
void launch(const DeviceMxfp4Task* tasks, int count, const DeviceMxfp4Task& single, int rows,
            cudaStream_t stream) {
  const int smem = PairShape<G>::smem_bytes(D);
  const int pairs = (rows + 1) / 2;
  const int most = (pairs + kWarps - 1) / kWarps;
  if (count > 0) {
    constexpr auto kernel = pairs_grouped_kernel<G, D>;
    const int per_task = std::max(1, resident_blocks<kernel>(smem) / count);
    kernel<<<dim3(std::min(per_task, most), count), kThreads, smem, stream>>>(tasks, rows);
  } else {
    constexpr auto kernel = pairs_kernel<G, D>;
    kernel<<<std::min(resident_blocks<kernel>(smem), most), kThreads, smem, stream>>>(single, rows);
  }
  count_launches(1);
}

bool run(const DeviceMxfp4Task* tasks, int count, const DeviceMxfp4Task& single, int rows, int cols,
         cudaStream_t stream) {
  if (!mxfp4_pairs_takes(cols) || g_stages == 0) return false;
  auto with_groups = [&](auto g) {
    constexpr int G = decltype(g)::value;
    switch (g_stages) {
      case 1:
        return launch<G, 1>(tasks, count, single, rows, stream);
      case 2:
        return launch<G, 2>(tasks, count, single, rows, stream);
      default:
        return launch<G, 3>(tasks, count, single, rows, stream);
    }
  };
  if (cols == 3584)
    with_groups(std::integral_constant<int, 112>{});
  else
    with_groups(std::integral_constant<int, 96>{});
  return true;
}

}  // namespace

bool mxfp4_pairs_takes(int64_t cols) { return cols == 3072 || cols == 3584; }

bool mxfp4_pairs_single(const DeviceMxfp4& w, const float* x, float* y, cudaStream_t stream) {
  return run(nullptr, 0, DeviceMxfp4Task{w.packed, w.scales, x, y, 1}, static_cast<int>(w.rows),
             static_cast<int>(w.cols), stream);
}

bool mxfp4_pairs_grouped(const DeviceMxfp4Task* tasks, int count, int rows, int cols,
                         cudaStream_t stream) {
  return run(tasks, count, DeviceMxfp4Task{}, rows, cols, stream);
}

void set_mxfp4_pairs_stages(int stages) {
  if (stages < 0 || stages > 3)
    throw std::invalid_argument("set_mxfp4_pairs_stages: stages is " + std::to_string(stages) +
                                ", expected 0..3");
  g_stages = stages;
}

}  // namespace deltafin::cuda::detail
