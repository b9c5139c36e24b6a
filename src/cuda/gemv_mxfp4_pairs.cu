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
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/gemv_common.cuh"
#include "cuda/gemv_launch.cuh"
#include "cuda/mxfp4_layout.cuh"
#include "cuda/op_count.h"

namespace deltafin::cuda::detail {
namespace {

using namespace gemv;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// The shape set_mxfp4_pairs_shape forced on every width, if any.
std::optional<Mxfp4PairsShape> g_forced;

// A warp step's work for R rows (2 or 4) of G groups each: kFull steps in which every lane takes a
// group of each row, then (G % 32 == 16) R / 2 half steps, the h-th holding the last 16 groups of
// rows 2h (lanes 0-15) and 2h + 1 (lanes 16-31). A stage of a warp's ring holds the step's 16-byte
// pieces ([kPieces][32 lanes]: full step s's row r at R·s + r, then the half steps) and the rows'
// scales ([R][G] bytes, 16-byte chunks).
template <int G, int R>
struct RowsShape {
  static_assert(G % 32 == 0 || G % 32 == 16, "a row's last step must be whole or half");
  static_assert(R == 2 || R == 4, "rows a warp step: 2 or 4");
  static constexpr int kFull = G / 32;
  static constexpr bool kTail = G % 32 != 0;
  static constexpr int kHalves = kTail ? R / 2 : 0;
  static constexpr int kPieces = R * kFull + kHalves;
  static constexpr int kPieceBytes = kPieces * 32 * 16;
  static constexpr int kStageBytes = kPieceBytes + R * G;
  static int smem_bytes(int stages) {
    return G * kMxGroupStride * 4 + kWarps * stages * kStageBytes;
  }
};

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
    e2m1x8_permuted(word(w, k), f);
    p = fma8(f, xg[2 * k], xg[2 * k + 1], p);
  }
  return p;
}

// R rows' group sums for a step whose lanes all take group g of each row: the activations are
// read once for all of them.
template <int R>
__device__ __forceinline__ void group_sums(const uint4* w, const float4* xg, float (&p)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) p[r] = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float4 x0 = xg[2 * k], x1 = xg[2 * k + 1];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float f[8];
      e2m1x8_permuted(word(w[r], k), f);
      p[r] = fma8(f, x0, x1, p[r]);
    }
  }
}

// A lane's scales of one step: row r's group 32s + lane at full[s][r], then its half steps' groups.
template <int G, int R>
struct RowsScales {
  uint32_t full[RowsShape<G, R>::kFull][R];
  uint32_t half[R / 2];
};

// The step's R outputs from the lane's pieces of it: lane l's sums in the general kernel's order
// for every row, then its butterfly. The first step (lanes l and l + 16) is formed per row pair:
// lanes 0-15 hold row 2h's sums after it, lanes 16-31 row 2h + 1's. With 4 rows the second step
// (lanes l and l + 8) takes rows 0 and 1 where l % 16 < 8 and rows 2 and 3 elsewhere, each lane
// adding the same two values the general kernel adds (an addition commutes bit for bit), and the
// last three steps run on all rows at once. Returns the lane's value after the butterfly: row 0 at
// lane 0, row 1 at 16, row 2 at 8, row 3 at 24.
template <int G, int R, bool kFast>
__device__ __forceinline__ float rows_outputs(const uint4 (&w)[RowsShape<G, R>::kPieces],
                                              const RowsScales<G, R>& sc, const float* xs,
                                              int lane) {
  using S = RowsShape<G, R>;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll
  for (int s = 0; s < S::kFull; ++s) {
    float p[R];
    group_sums<R>(&w[R * s], reinterpret_cast<const float4*>(xs + (32 * s + lane) * kMxGroupStride),
                  p);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = add_group<kFast>(p[r], sc.full[s][r], acc[r]);
  }
  const bool low = lane < 16;
  float v[R / 2];
#pragma unroll
  for (int h = 0; h < R / 2; ++h) {
    const float a = acc[2 * h], b = acc[2 * h + 1];
    if constexpr (S::kTail) {
      // Lane l < 16 adds row 2h's group 32·kFull + l to its own sum; lane l + 16 adds row
      // 2h + 1's to the sum of that row's lane l, moved up to it.
      const float p = group_sum(
          w[R * S::kFull + h],
          reinterpret_cast<const float4*>(xs + (32 * S::kFull + lane % 16) * kMxGroupStride));
      const float b_below = __shfl_up_sync(kFullMask, b, 16);
      const float a_above = __shfl_down_sync(kFullMask, a, 16);
      const float t = add_group<kFast>(p, sc.half[h], low ? a : b_below);
      v[h] = __fadd_rn(t, low ? a_above : b);
    } else {
      const float other = __shfl_xor_sync(kFullMask, low ? b : a, 16);
      v[h] = __fadd_rn(low ? a : b, other);
    }
  }
  float u;
  if constexpr (R == 4) {
    const bool upper8 = (lane & 8) != 0;
    const float sent = __shfl_xor_sync(kFullMask, upper8 ? v[0] : v[1], 8);
    u = __fadd_rn(upper8 ? v[1] : v[0], sent);
  } else {
    u = __fadd_rn(v[0], __shfl_xor_sync(kFullMask, v[0], 8));
  }
#pragma unroll
  for (int off = 4; off > 0; off /= 2) u = __fadd_rn(u, __shfl_xor_sync(kFullMask, u, off));
  return u;
}

template <int G, int D, int R>
__device__ __forceinline__ void rows_body(const DeviceMxfp4Task& task, int rows) {
  using S = RowsShape<G, R>;
  if (task.n <= 0) return;  // the whole block returns: nothing to read or write
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);  // [G][kMxGroupStride], x · 2^63
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint8_t* const ring =
      reinterpret_cast<uint8_t*>(xs + G * kMxGroupStride) + warp * D * S::kStageBytes;
  uint8_t* const ring_end = ring + D * S::kStageBytes;
  const int sets = (rows + R - 1) / R;  // a set: the R rows of one warp step
  const int first = blockIdx.x * kWarps + warp, step = gridDim.x * kWarps;
  const bool scales_aligned = reinterpret_cast<uintptr_t>(task.scales) % 16 == 0;
  float* const y = task.y;

  // The loads run D - 1 sets ahead of the math: the issuing side's set, its rows' weights and
  // scales and its stage advance by a grid's worth of sets per call. One commit group per call,
  // empty past the last set. A row past the matrix's last reads nothing and stages zeros.
  int issue_set = first;
  const uint8_t* iw = task.packed + static_cast<int64_t>(first) * (R * G * 16);
  const uint8_t* is = task.scales + static_cast<int64_t>(first) * (R * G);
  uint8_t* issue_stage = ring;
  // Per lane, the same every set: the row of its half-step pieces (2h + this) and of its 16-byte
  // scale chunk.
  const int half_row = lane < 16 ? 0 : 1, scale_row = lane * 16 / G;
  auto issue = [&] {
    if (issue_set < sets) {
      const int present = rows - issue_set * R;  // rows of the set that exist, if below R
#pragma unroll
      for (int s = 0; s < S::kFull; ++s)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const bool has = r == 0 || r < present;  // the set's first row exists
          cp_async16(issue_stage + ((R * s + r) * 32 + lane) * 16,
                     iw + (has ? r : 0) * G * 16 + (32 * s + lane) * 16, has);
        }
#pragma unroll
      for (int h = 0; h < S::kHalves; ++h) {
        const int r = 2 * h + half_row;
        const bool has = r == 0 || r < present;
        cp_async16(issue_stage + ((R * S::kFull + h) * 32 + lane) * 16,
                   iw + (has ? r : 0) * G * 16 + (32 * S::kFull + lane % 16) * 16, has);
      }
      uint8_t* sc = issue_stage + S::kPieceBytes;
      if (scales_aligned) {
        if (lane < R * G / 16) {
          const bool has = scale_row == 0 || scale_row < present;
          cp_async16(sc + lane * 16, is + (has ? lane * 16 : 0), has);
        }
      } else {  // no 16-byte copies: byte loads (the model's scales are 256-byte aligned)
        for (int j = lane; j < R * G; j += 32) sc[j] = j / G < present ? is[j] : 0;
      }
    }
    cp_async_commit();
    issue_set += step;
    iw += static_cast<int64_t>(step) * (R * G * 16);
    is += static_cast<int64_t>(step) * (R * G);
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
  // Where the lane's output row sits in its set (lanes 0, 16, 8, 24 hold rows 0-3), or -1.
  const int out_row = lane == 0                ? 0
                      : lane == 16             ? 1
                      : (R == 4 && lane == 8)  ? 2
                      : (R == 4 && lane == 24) ? 3
                                               : -1;
  for (int set = first; set < sets; set += step) {
    if constexpr (D > 1) issue();  // into the stage the previous set's math left
    cp_async_wait<D - 1>();
    __syncwarp();  // the scales a lane reads came through other lanes' copies
    uint4 w[S::kPieces];
#pragma unroll
    for (int p = 0; p < S::kPieces; ++p)
      w[p] = reinterpret_cast<const uint4*>(stage)[p * 32 + lane];
    const uint8_t* sc = stage + S::kPieceBytes;  // [R][G]
    RowsScales<G, R> scales;
    uint32_t top = 0;
#pragma unroll
    for (int s = 0; s < S::kFull; ++s)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        scales.full[s][r] = sc[r * G + 32 * s + lane];
        top = max(top, scales.full[s][r]);
      }
#pragma unroll
    for (int h = 0; h < R / 2; ++h) {
      scales.half[h] = S::kTail ? sc[(2 * h + half_row) * G + 32 * S::kFull + lane % 16] : 0u;
      top = max(top, scales.half[h]);
    }
    if constexpr (D == 1) {
      __syncwarp();  // the one stage is read: the next set's loads go in while this one's math
                     // runs
      issue();
    }
    // Scales above 2^64 (s > 191) are far outside trained weights; the general step takes them.
    const float v = __all_sync(kFullMask, top <= 191u)
                        ? rows_outputs<G, R, true>(w, scales, xs, lane)
                        : rows_outputs<G, R, false>(w, scales, xs, lane);
    if (out_row >= 0 && R * set + out_row < rows) y[R * set + out_row] = v;
    if constexpr (D > 1) {
      __syncwarp();  // every lane is done with the stage before it is refilled
      stage = stage + S::kStageBytes == ring_end ? ring : stage + S::kStageBytes;
    }
  }
  cp_async_wait<0>();
}

template <int G, int D, int R>
__global__ void __launch_bounds__(kThreads) rows_kernel(DeviceMxfp4Task task, int rows) {
  rows_body<G, D, R>(task, rows);
}

template <int G, int D, int R>
__global__ void __launch_bounds__(kThreads)
    rows_grouped_kernel(const DeviceMxfp4Task* __restrict__ tasks, int rows) {
  rows_body<G, D, R>(tasks[blockIdx.y], rows);
}

// The most blocks of `kernel` the GPU holds at once.
template <auto kKernel>
int resident_blocks(int smem) {
  return blocks_per_sm<kKernel>(kThreads, smem) * device_sms();
}

// One wave: as many blocks as fit at once, shared evenly by the tasks, each block's warps taking
// sets blockIdx.x · 4 + warp, then a grid's worth further, ... (no more blocks than sets need).
template <int G, int D, int R>
void launch(const DeviceMxfp4Task* tasks, int count, const DeviceMxfp4Task& single, int rows,
            cudaStream_t stream) {
  const int smem = RowsShape<G, R>::smem_bytes(D);
  const int sets = (rows + R - 1) / R;
  const int most = (sets + kWarps - 1) / kWarps;
  if (count > 0) {
    constexpr auto kernel = rows_grouped_kernel<G, D, R>;
    const int per_task = std::max(1, resident_blocks<kernel>(smem) / count);
    kernel<<<dim3(std::min(per_task, most), count), kThreads, smem, stream>>>(tasks, rows);
  } else {
    constexpr auto kernel = rows_kernel<G, D, R>;
    kernel<<<std::min(resident_blocks<kernel>(smem), most), kThreads, smem, stream>>>(single, rows);
  }
  count_launches(1);
}

template <int G, int R>
void launch_depth(const DeviceMxfp4Task* tasks, int count, const DeviceMxfp4Task& single, int rows,
                  int stages, cudaStream_t stream) {
  switch (stages) {
    case 1:
      return launch<G, 1, R>(tasks, count, single, rows, stream);
    case 2:
      return launch<G, 2, R>(tasks, count, single, rows, stream);
    default:
      return launch<G, 3, R>(tasks, count, single, rows, stream);
  }
}

bool run(const DeviceMxfp4Task* tasks, int count, const DeviceMxfp4Task& single, int rows, int cols,
         cudaStream_t stream) {
  if (!mxfp4_pairs_takes(cols)) return false;
  const Mxfp4PairsShape shape =
      g_forced.value_or(mxfp4_pairs_default(cols, gemv::device_dram_gbps_per_sm(), count > 0));
  if (shape.stages == 0) return false;
  auto with_groups = [&](auto g) {
    constexpr int G = decltype(g)::value;
    if (shape.rows_per_warp == 4)
      launch_depth<G, 4>(tasks, count, single, rows, shape.stages, stream);
    else
      launch_depth<G, 2>(tasks, count, single, rows, shape.stages, stream);
  };
  if (cols == 3584)
    with_groups(std::integral_constant<int, 112>{});
  else
    with_groups(std::integral_constant<int, 96>{});
  return true;
}

}  // namespace

bool mxfp4_pairs_takes(int64_t cols) { return cols == 3072 || cols == 3584; }

Mxfp4PairsShape mxfp4_pairs_default(int64_t cols, double dram_gbps_per_sm, bool grouped) {
  if (cols != 3584) return {4, 3};
  if (dram_gbps_per_sm <= gemv::kFastDramGbpsPerSm) return {4, 2};
  // On an H200 the kernel is issue-bound. Grouped, 4 rows with the stage read into registers
  // before the next loads (a smaller ring, more warps an SM) read 1.05x 2 rows 1 step ahead on the
  // device layout's decode; one matrix alone fills too few SMs for 4 rows, and 2 rows read 1.08x.
  return grouped ? Mxfp4PairsShape{4, 1} : Mxfp4PairsShape{2, 2};
}

bool mxfp4_pairs_single(const DeviceMxfp4& w, const float* x, float* y, cudaStream_t stream) {
  return run(nullptr, 0, DeviceMxfp4Task{w.packed, w.scales, x, y, 1}, static_cast<int>(w.rows),
             static_cast<int>(w.cols), stream);
}

bool mxfp4_pairs_grouped(const DeviceMxfp4Task* tasks, int count, int rows, int cols,
                         cudaStream_t stream) {
  return run(tasks, count, DeviceMxfp4Task{}, rows, cols, stream);
}

std::vector<Mxfp4PairsShape> mxfp4_pairs_shapes() {
  std::vector<Mxfp4PairsShape> shapes;
  for (const int rows : {2, 4})
    for (const int stages : {1, 2, 3}) shapes.push_back({rows, stages});
  return shapes;
}

void set_mxfp4_pairs_shape(Mxfp4PairsShape shape) {
  const std::vector<Mxfp4PairsShape> compiled = mxfp4_pairs_shapes();
  const bool known = shape.stages == 0 ||
                     std::any_of(compiled.begin(), compiled.end(), [&](const Mxfp4PairsShape& c) {
                       return c.rows_per_warp == shape.rows_per_warp && c.stages == shape.stages;
                     });
  if (!known)
    throw std::invalid_argument("set_mxfp4_pairs_shape: " + std::to_string(shape.rows_per_warp) +
                                " rows a warp step and " + std::to_string(shape.stages) +
                                " stages, expected 2 or 4 rows and 1..3 stages, or 0 stages");
  g_forced = shape;
}

void reset_mxfp4_pairs_shape() { g_forced.reset(); }

}  // namespace deltafin::cuda::detail
