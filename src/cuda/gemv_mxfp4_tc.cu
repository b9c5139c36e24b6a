// The MXFP4 products on the tensor cores (gemv_mxfp4_tc.h): mma.sync m16n8k16 with BF16 operands
// and fp32 accumulation. A block of W warps (4 or 8) takes a band of weight rows of one matrix
// through all its columns, 128 columns (a "sub-chunk") at a time: in a 16-row tile, the quad of
// lanes 4g..4g+3 holds rows g and g + 8, lane 4g + t the sub-chunk's group t of each (one 16-byte
// load), so a sub-chunk's 8 k-steps of 16 take elements 4s'..4s'+3 of each group (the order of
// the k index within a step is free: the weights and activations use the same one). Two layouts,
// the same steps in the same order for every row, so the same bits: 32 rows a warp (two tiles,
// one sub-chunk a load), where a B fragment feeds both tiles, and 16 rows a warp (one tile, two
// sub-chunks a load, so a quad's loads of a row fill its 128-byte line), which reads faster at
// one or two activation rows. Each lane loads its next chunk's weights while it multiplies the
// present one's. The MMA's columns are the activations' pieces: column p·n + r is BF16 piece p
// (hi, mid, lo) of activation row r, in NT tiles of 8 columns, each with its own accumulators, so
// the three pieces of a row sum apart and are added at the end, and n <= 2 rows take one MMA a
// step. The pieces of 8 sub-chunks at a time (a window) are split into shared memory in the order
// the B fragments read them: one 8-byte load a lane a tile a step, shared by all the block's rows.
// mxfp4_tc_pick chooses the block's warps and layout.
#include "cuda/gemv_mxfp4_tc.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/gemv_common.cuh"
#include "cuda/gemv_launch.cuh"
#include "cuda/gemv_mxfp4_wgmma.h"
#include "cuda/mxfp4_layout.cuh"
#include "cuda/mxfp4_tc_math.cuh"

namespace deltafin::cuda {
namespace {

using namespace gemv;
using namespace tc_math;

constexpr int kTiles = 2;  // 16-row tiles a warp (32 rows), or sub-chunks a load (16 rows)
constexpr int kSteps = 8;  // k-steps of 16 in a sub-chunk of 128 columns
// A chunk's fragments for one 8-column tile: [step][lane] as uint2 (b0b1, b2b3).
constexpr int kTileFrags = kSteps * 32;

// Chunks whose activations are staged at once.
constexpr int kWindow = 8;
template <int NT>
__host__ __device__ constexpr int smem_bytes() {
  return kWindow * NT * kTileFrags * 8;
}
// The end's sums of a warp: 32 rows of 8·NT columns, a float each, rows padded to an odd pitch.
template <int NT>
__host__ __device__ constexpr int sum_pitch() {
  return 8 * NT + 1;
}
// Activation rows the staging gives slots, a power of two >= the rows NT tiles take.
template <int NT>
__host__ __device__ constexpr int staged_rows() {
  return NT == 1 ? 2 : NT <= 3 ? 8 : 16;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint2 b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y));
}

// Where a thread's staging items go: item i (the thread's, plus multiples of the block's threads)
// is group t = i % 4 of activation row r = (i / 4) % R, then k-step and chunk of the window. A
// block's threads are a multiple of 4R, so t and r are the thread's own: its row's three piece
// columns p·n + r are fixed, and a warp's 32 slots of a piece fall in 32 banks when n >= 8.
template <int NT>
struct StageSlots {
  static constexpr int kRows = staged_rows<NT>();
  int t, r, column_at[kPieces];  // column_at: piece p's slot in a k-step's fragments
  __device__ explicit StageSlots(int n) : t(threadIdx.x & 3), r((threadIdx.x >> 2) & (kRows - 1)) {
#pragma unroll
    for (int p = 0; p < kPieces; ++p) {
      const int column = p * n + r;
      column_at[p] = (column >> 3) * kTileFrags + 4 * (column & 7) + t;
    }
  }
};

// Splits activation rows 0..n-1 of the window of chunks c0.. into its fragments. An item is one B
// fragment slot of one row: group t, k-step (q, hh) of a chunk, whose two registers take elements
// (8q + 2hh, 8q + 2hh + 4) and (8q + 2hh + 1, 8q + 2hh + 5) of the group, one slot in each piece's
// column. A thread loads kBatch items before it splits them, so their L2 latencies overlap.
// Columns past 3n are left as they were: a tensor core's output column reads only its own B
// column, and those outputs are never used; columns past the matrix's are zeros.
template <int NT, int W>
__device__ __forceinline__ void stage_window(uint2* xs, const float* __restrict__ x, int n,
                                             int cols, int c0, const StageSlots<NT>& at) {
  constexpr int kRows = staged_rows<NT>();
  constexpr int kPass = W * 32 / (4 * kRows);  // k-steps (of any chunk) a pass of the block stages
  constexpr int kItems = kWindow * kSteps;     // k-steps of the window, for each (t, r)
  constexpr int kBatch = kItems / kPass < 4 ? kItems / kPass : 4;
  static_assert(kItems % (kBatch * kPass) == 0, "whole batches");
  if (at.r >= n) return;
  const int start = c0 * 128 + at.t * 32;  // this thread's group's first column, in chunk c0
  const float* xr = x + static_cast<int64_t>(at.r) * cols + start;
  const int first = threadIdx.x / (4 * kRows);
  for (int base = first; base < kItems; base += kBatch * kPass) {
    float2 lo[kBatch], hi[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int k = base + b * kPass;  // chunk k / 8 of the window, k-step k % 8
      const int col = (k >> 3) * 128 + 8 * ((k & 7) >> 1) + 2 * (k & 1);
      lo[b] = make_float2(0.0f, 0.0f);
      hi[b] = make_float2(0.0f, 0.0f);
      if (start + col < cols) {  // cols % 32 == 0: the whole group is in or out
        lo[b] = *reinterpret_cast<const float2*>(xr + col);
        hi[b] = *reinterpret_cast<const float2*>(xr + col + 4);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int k = base + b * kPass;
      uint2* slot = xs + ((k >> 3) * NT * kSteps + (k & 7)) * 32;
      const Pieces a0 = split3(lo[b].x), a1 = split3(lo[b].y);
      const Pieces a4 = split3(hi[b].x), a5 = split3(hi[b].y);
#pragma unroll
      for (int p = 0; p < kPieces; ++p)
        slot[at.column_at[p]] =
            make_uint2(pack_bf16x2(a0.p[p], a4.p[p]), pack_bf16x2(a1.p[p], a5.p[p]));
    }
  }
}

// One chunk's products for this lane's rows. 32 rows a warp (kLines false): wq[m][h] is tile m's
// row g + 8h, and for each of the sub-chunk's 4 words of a group the decode and scaling come
// first, then the 2 k-steps those words feed, each over the column tiles and both tiles. 16 rows
// (kLines): wq[m][h] is sub-chunk m of row g + 8h, and the sub-chunks run one after the other
// into the same accumulators, so each row's steps come in the 32-row layout's order; `subs`
// (block-uniform) of them exist, 1 in the last chunk of a row of an odd count, which then runs
// no steps the other layout does not. kTwo: some scale of the warp needs scale_two. xc[m]:
// sub-chunk m's staged fragments.
template <int NT, bool kTwo, bool kLines>
__device__ __forceinline__ void chunk_math(const uint4 (&wq)[kTiles][2],
                                           const uint32_t (&sq)[kTiles][2],
                                           const uint2* const (&xc)[kTiles], int subs, int lane,
                                           float (&acc)[kTiles][NT][4]) {
  uint32_t first[kTiles][2], second[kTiles][2];
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (kTwo) {
        const ScaleTwo s = scale_two(sq[m][h]);
        first[m][h] = s.first;
        second[m][h] = s.second;
      } else {
        first[m][h] = scale_one(sq[m][h]);
      }
    }
  // Word q of (m, h) as the 4 BF16x2 A-fragment registers of its two k-steps.
  const auto decode = [&](int m, int h, int q, uint32_t(&p)[4]) {
    e2m1x8_bf16_permuted(word(wq[m][h], q), p);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      p[k] = bf16x2_mul(p[k], first[m][h]);
      if constexpr (kTwo) p[k] = bf16x2_mul(p[k], second[m][h]);
    }
  };
  if constexpr (kLines) {
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
      if (m == subs) break;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t p[2][4];
        decode(m, 0, q, p[0]);
        decode(m, 1, q, p[1]);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int step = 2 * q + hh;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            mma_bf16(acc[0][nt], p[0][2 * hh], p[1][2 * hh], p[0][2 * hh + 1], p[1][2 * hh + 1],
                     xc[m][nt * kTileFrags + step * 32 + lane]);
        }
      }
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t p[kTiles][2][4];
#pragma unroll
      for (int m = 0; m < kTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) decode(m, h, q, p[m][h]);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int step = 2 * q + hh;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint2 b = xc[0][nt * kTileFrags + step * 32 + lane];
#pragma unroll
          for (int m = 0; m < kTiles; ++m)
            mma_bf16(acc[m][nt], p[m][0][2 * hh], p[m][1][2 * hh], p[m][0][2 * hh + 1],
                     p[m][1][2 * hh + 1], b);
        }
      }
    }
  }
}

// Weight rows a warp takes in each layout.
template <bool kLines>
__host__ __device__ constexpr int warp_rows() {
  return kLines ? 16 : 32;
}

// The block's W·warp_rows rows of one product (row_block of the matrix), n activation rows in NT
// column tiles (column_tiles(n) <= NT: every n runs the same steps for its columns), two chunks'
// weights in registers so that the next chunk's loads fly during this one's math. A chunk is one
// sub-chunk (32 rows a warp) or two (16 rows). At the end the warp's sums go through shared
// memory, where each lane adds a row's three pieces (hi + mid) + lo and stores its outputs.
template <int NT, int W, bool kLines>
__device__ __forceinline__ void tc_body(const DeviceMxfp4Task& task, int rows, int cols,
                                        int row_block, uint2* xs) {
  static_assert(W * 32 * sum_pitch<NT>() * 4 <= smem_bytes<NT>(), "the end's sums fit");
  static_assert(kWindow % kTiles == 0, "a chunk's sub-chunks share a window");
  constexpr int kRows = warp_rows<kLines>();
  constexpr int kSubs = kLines ? kTiles : 1;  // sub-chunks a chunk
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int groups = cols >> 5, total_subs = (groups + 3) >> 2;
  const int chunks = (total_subs + kSubs - 1) / kSubs;
  const int n = task.n;
  const int row0 = (row_block * W + warp) * kRows;
  const StageSlots<NT> slots(n);

  // This lane's loads (m, h): row row0 + 8h + g, plus 16m with 32 rows a warp (absent rows read
  // row 0, and their outputs are not stored); of a chunk c, group 4c + t (32 rows a warp) or
  // 8c + 4m + t (16 rows).
  const uint8_t* wp[kTiles][2];
  const uint8_t* sp[kTiles][2];
  bool present[kTiles][2];
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + (kLines ? 0 : 16 * m) + 8 * h + g;
      const int group = (kLines ? 4 * m : 0) + t;
      present[m][h] = r < rows;
      const int64_t rr = present[m][h] ? r : 0;
      wp[m][h] = task.packed + rr * (cols / 2) + group * 16;
      sp[m][h] = task.scales + rr * groups + group;
    }

  float acc[kTiles][NT][4];
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[m][nt][k] = 0.0f;

  auto run_chunk = [&](const uint4(&wq)[kTiles][2], const uint32_t(&sq)[kTiles][2], int c) {
    const int sub = c * kSubs, cw = sub % kWindow;
    if (cw == 0) {  // block-uniform: every thread walks the same chunks
      __syncthreads();
      stage_window<NT, W>(xs, task.x, n, cols, sub, slots);
      __syncthreads();
    }
    bool two = false;
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) two = two || sq[m][h] > 160u;
    const uint2* const xc[kTiles] = {xs + cw * NT * kTileFrags,
                                     xs + (cw + kSubs - 1) * NT * kTileFrags};
    const int subs = sub + kSubs <= total_subs ? kSubs : total_subs - sub;
    if (__any_sync(kFullMask, two))
      chunk_math<NT, true, kLines>(wq, sq, xc, subs, lane, acc);
    else
      chunk_math<NT, false, kLines>(wq, sq, xc, subs, lane, acc);
  };
  // Chunk c's weights and scales (zeros where the row or group is absent).
  const auto load = [&](uint4(&wq)[kTiles][2], uint32_t(&sq)[kTiles][2], int c) {
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool here =
            c < chunks && 4 * kSubs * c + (kLines ? 4 * m : 0) + t < groups && present[m][h];
        wq[m][h] = here ? load_stream(wp[m][h] + 64 * kSubs * static_cast<int64_t>(c))
                        : make_uint4(0, 0, 0, 0);
        sq[m][h] = here ? __ldg(sp[m][h] + 4 * kSubs * c) : 0u;
      }
  };
  uint4 wa[kTiles][2], wb[kTiles][2];
  uint32_t sa[kTiles][2], sb[kTiles][2];
  load(wa, sa, 0);
  load(wb, sb, 1);
  for (int c = 0; c < chunks; c += 2) {
    run_chunk(wa, sa, c);
    load(wa, sa, c + 2);
    if (c + 1 < chunks) {
      run_chunk(wb, sb, c + 1);
      load(wb, sb, c + 3);
    }
  }

  // The sums: lane (g, t) holds columns 2t, 2t + 1 of each column tile for rows g and g + 8 of
  // each of its accumulators' row tiles. Through shared memory (the window, free once every warp
  // is done with it) each lane takes one weight row and adds each activation row's pieces in a
  // fixed order.
  constexpr int kPitch = sum_pitch<NT>();
  __syncthreads();
  float* sums = reinterpret_cast<float*>(xs) + warp * 32 * kPitch;
#pragma unroll
  for (int m = 0; m < kRows / 16; ++m)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k)
        sums[(16 * m + g + 8 * (k >> 1)) * kPitch + 8 * nt + 2 * t + (k & 1)] = acc[m][nt][k];
  __syncwarp();
  const int row = row0 + lane;
  if (lane < kRows && row < rows) {
    const float* mine = sums + lane * kPitch;
    for (int r = 0; r < n; ++r)
      task.y[static_cast<int64_t>(r) * rows + row] =
          __fadd_rn(__fadd_rn(mine[r], mine[n + r]), mine[2 * n + r]);
  }
}

// Two blocks of 8 warps (four of 4) an SM: at most 128 registers a thread.
template <int NT, int W, bool kLines>
__global__ void __launch_bounds__(W * 32, 512 / (W * 32))
    tc_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales, int rows,
              int cols, const float* __restrict__ x, int n, float* __restrict__ y) {
  extern __shared__ uint2 xs[];
  tc_body<NT, W, kLines>(DeviceMxfp4Task{packed, scales, x, y, n}, rows, cols, blockIdx.x, xs);
}

template <int NT, int W, bool kLines>
__global__ void __launch_bounds__(W * 32, 512 / (W * 32))
    tc_grouped_kernel(const DeviceMxfp4Task* __restrict__ tasks, int rows, int cols) {
  extern __shared__ uint2 xs[];
  const DeviceMxfp4Task task = tasks[blockIdx.y];
  if (task.n <= 0) return;
  tc_body<NT, W, kLines>(task, rows, cols, blockIdx.x, xs);
}

// The tensor cores' BF16 mma.sync needs sm_80; refused with a message before any launch.
void require_sm80(const char* what) {
  static const int major = [] {
    int device = 0, value = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
      return 0;
    return value;
  }();
  if (major < 8)
    throw std::runtime_error(std::string(what) +
                             ": the tensor-core MXFP4 mode needs a GPU of compute capability 8.0 "
                             "or newer; use the exact mode (--gpu-expert-math exact)");
}

// The kernel for n activation rows (1-16) in blocks of W warps of `rows_a_warp` rows (32 or 16):
// `count` tasks of `tasks` (grouped) or, count == 0, the single product w · x.
template <int W>
void launch_tc(int rows_a_warp, int64_t n, int rows, int cols, int count, cudaStream_t stream,
               const DeviceMxfp4Task* tasks, const DeviceMxfp4& w, const float* x, float* y) {
  const auto go = [&](auto tiles, auto lines) {
    constexpr int NT = decltype(tiles)::value;
    constexpr bool kLines = decltype(lines)::value;
    constexpr int kBlockRows = W * warp_rows<kLines>();
    const dim3 grid((rows + kBlockRows - 1) / kBlockRows, count > 0 ? count : 1);
    if (count > 0)
      launch_threads<tc_grouped_kernel<NT, W, kLines>>(32 * W, smem_bytes<NT>(), grid, stream,
                                                       tasks, rows, cols);
    else
      launch_threads<tc_kernel<NT, W, kLines>>(32 * W, smem_bytes<NT>(), grid, stream, w.packed,
                                               w.scales, rows, cols, x, static_cast<int>(n), y);
  };
  with_constant<1, 2, 3, 4, 6>(column_tiles(static_cast<int>(n)), [&](auto tiles) {
    with_constant<32, 16>(rows_a_warp, [&](auto warp_rows) {
      go(tiles, std::bool_constant<decltype(warp_rows)::value == 16>{});
    });
  });
}

// The compiled shapes: what mxfp4_tc_pick chooses among; and the wgmma kernel's
// (gemv_mxfp4_wgmma.h), on the GPUs that run it.
constexpr detail::Mxfp4TcShape kShapes[] = {{8, 32}, {4, 32}, {8, 16}, {4, 16}};
constexpr detail::Mxfp4TcShape kWgmmaShape{12, 16};
detail::Mxfp4TcShape g_forced{};

void dispatch(int64_t n, int rows, int cols, int count, cudaStream_t stream,
              const DeviceMxfp4Task* tasks, const DeviceMxfp4& w, const float* x, float* y) {
  const detail::Mxfp4TcShape sh =
      g_forced.warps > 0
          ? g_forced
          : detail::mxfp4_tc_pick(rows, count, n, device_sms(), detail::mxfp4_wgmma_available());
  if (sh.warps == kWgmmaShape.warps)
    return detail::launch_mxfp4_wgmma(n, rows, cols, count, stream, tasks, w, x, y);
  if (sh.warps == 4)
    return launch_tc<4>(sh.warp_rows, n, rows, cols, count, stream, tasks, w, x, y);
  launch_tc<8>(sh.warp_rows, n, rows, cols, count, stream, tasks, w, x, y);
}

}  // namespace

void matmul_tc(const DeviceMxfp4& w, const float* x, int64_t n, float* y, cudaStream_t stream) {
  const char* what = "cuda::matmul_tc(MXFP4)";
  check_shape(what, w.rows, w.cols, n, 32, w.packed, x, y);
  if (w.scales == nullptr) throw std::invalid_argument(std::string(what) + ": scales is null");
  require_sm80(what);
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  for (int64_t i0 = 0; i0 < n; i0 += kGpuMaxBatch) {
    const int64_t nb = n - i0 < kGpuMaxBatch ? n - i0 : kGpuMaxBatch;
    dispatch(nb, rows, cols, 0, stream, nullptr, w, x + i0 * w.cols, y + i0 * w.rows);
  }
  check_launch(what);
}

void matmul_grouped_tc(const DeviceMxfp4Task* tasks, int64_t count, int64_t rows, int64_t cols,
                       int64_t max_n, cudaStream_t stream) {
  const char* what = "cuda::matmul_grouped_tc(MXFP4)";
  check_grouped(what, tasks, count, rows, cols, max_n);
  if (count == 0 || max_n == 0) return;
  require_sm80(what);
  dispatch(max_n, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(count), stream,
           tasks, DeviceMxfp4{}, nullptr, nullptr);
  check_launch(what);
}

namespace detail {

void set_mxfp4_tc_shape(Mxfp4TcShape shape) {
  if (shape.warps != 0) {
    bool known = false;
    for (const Mxfp4TcShape& k : mxfp4_tc_shapes())
      known = known || (k.warps == shape.warps && k.warp_rows == shape.warp_rows);
    if (!known)
      throw std::invalid_argument("set_mxfp4_tc_shape: " + mxfp4_tc_shape_name(shape) +
                                  " is not compiled");
  }
  g_forced = shape;
}

std::vector<Mxfp4TcShape> mxfp4_tc_shapes() {
  std::vector<Mxfp4TcShape> shapes(std::begin(kShapes), std::end(kShapes));
  if (mxfp4_wgmma_available()) shapes.push_back(kWgmmaShape);
  return shapes;
}

Mxfp4TcShape mxfp4_tc_pick(int64_t rows, int64_t count, int64_t n, int sms, bool wgmma) {
  const int tiles = column_tiles(static_cast<int>(n));
  if (tiles == 1) return {4, 16};
  if (wgmma && tiles >= 3) {
    // One 192-row block an SM: a last wave of blocks under 90% full costs more than the
    // warpgroup MMA gains at three tiles, not at six; fewer blocks than SMs lose at any n.
    constexpr int kRows = kMxfp4WgmmaBlockRows;
    const int64_t blocks = (rows + kRows - 1) / kRows * (count > 0 ? count : 1);
    const int64_t slots = (blocks + sms - 1) / sms * sms;
    if (blocks >= sms && (tiles >= 6 || 10 * blocks >= 9 * slots)) return kWgmmaShape;
  }
  const int64_t blocks_of_8 = (rows + 255) / 256 * (count > 0 ? count : 1);
  return {blocks_of_8 < sms ? 4 : 8, 32};  // a short grid: twice the blocks
}

std::string mxfp4_tc_shape_name(Mxfp4TcShape shape) {
  if (shape.warps == kWgmmaShape.warps && shape.warp_rows == kWgmmaShape.warp_rows)
    return "3 warpgroups of 64 rows (wgmma)";
  return std::to_string(shape.warps) + " warps of " + std::to_string(shape.warp_rows) + " rows";
}

}  // namespace detail

}  // namespace deltafin::cuda
