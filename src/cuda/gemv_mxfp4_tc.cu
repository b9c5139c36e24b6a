// The MXFP4 products on the tensor cores (gemv_mxfp4_tc.h): mma.sync m16n8k16 with BF16 operands
// and fp32 accumulation. A block of W warps (4 or 8) takes 32·W weight rows of one matrix (two
// 16-row tiles a warp) through all its columns, 128 columns (a "chunk") at a time: in a tile, the
// quad of lanes 4g..4g+3 holds rows g and g + 8, lane 4g + t the chunk's group t of each (one
// 16-byte load), so a chunk's 8 k-steps of 16 take elements 4s'..4s'+3 of each group (the order of
// the k index within a step is free: the weights and activations use the same one). The activations
// of 4 or 8 chunks at a time (window_chunks) are split into their BF16 pieces in shared memory, in
// the order the B fragments read them: one 8-byte load a lane a piece a step, shared by all the
// block's rows. mxfp4_tc_pick chooses the block's shape.
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
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

using namespace gemv;

constexpr int kTiles = 2;   // 16-row tiles a warp: a block of W warps takes 32·W rows
constexpr int kSteps = 8;   // k-steps of 16 in a chunk of 128 columns
constexpr int kPieces = 3;  // BF16 pieces of an activation
// A chunk's fragments for one 8-row tile of activations: [step][piece][lane] as uint2 (b0b1, b2b3).
constexpr int kChunkFrags = kSteps * kPieces * 32;
// The weights are decoded as 2^-32 times their values and the activations staged times 2^32, so
// both fit BF16's range over the scales and activations that occur (gemv_mxfp4_tc.h).
constexpr float kXShift = 0x1p32f;

// Chunks whose activations are staged at once: 8 (48 KB a tile of 8 activation rows) with the
// weights in registers, 4 beside a cp.async ring of S stages.
template <int S>
__host__ __device__ constexpr int window_chunks() {
  return S == 0 ? 8 : 4;
}
// A warp's ring stage: one chunk's 16-byte pieces of its 2 tiles' rows, [tile][half][lane].
constexpr int kStagePieces = kTiles * 2 * 32;
template <int NT, int W, int S>
constexpr int smem_bytes() {
  return window_chunks<S>() * NT * kChunkFrags * 8 + W * S * kStagePieces * 16;
}

// An activation v's three BF16 pieces, each the top half of a float: v's top 8 significant bits,
// the next 8 (v - hi, exact), the last 8 (exact again); hi + mid + lo == v for normal v.
struct Pieces {
  uint32_t hi, mid, lo;
};
__device__ __forceinline__ Pieces split3(float x) {
  const float v = __fmul_rn(x, kXShift);
  const uint32_t hi = __float_as_uint(v) & 0xffff0000u;
  const float r = __fsub_rn(v, __uint_as_float(hi));
  const uint32_t mid = __float_as_uint(r) & 0xffff0000u;
  return {hi, mid, __float_as_uint(__fsub_rn(r, __uint_as_float(mid)))};
}
// Two pieces as BF16x2: a in the low half (the lower k index), b in the high.
__device__ __forceinline__ uint32_t pack_bf16x2(uint32_t a, uint32_t b) {
  return __byte_perm(a, b, 0x7632);
}

// The eight E2M1 codes of a word (code j in bits 4j..4j+3) as BF16x2 pairs (j, j + 4) for
// j = 0..3, each 2^-126 times its value: e2m1x8_raw's placement on BF16's fields (magnitude at
// bits 6-8, so 0.5 is the subnormal 2^-127; sign at bit 15), both codes of a pair at once since
// they sit 16 bits apart. The pair's codes are isolated by one mask and copied to both fields by
// one multiply by 2^a + 2^b (a - b = 6); the copies do not overlap, so nothing carries.
__device__ __forceinline__ void e2m1x8_bf16(uint32_t w, uint32_t (&p)[4]) {
  constexpr uint32_t kFields = 0x81c081c0u;
  const uint32_t w8 = w >> 8;
  p[0] = ((w & 0x000f000fu) * 0x1040u) & kFields;   // codes 0 and 4
  p[1] = ((w & 0x00f000f0u) * 0x0104u) & kFields;   // codes 1 and 5
  p[2] = ((w8 & 0x000f000fu) * 0x1040u) & kFields;  // codes 2 and 6
  p[3] = ((w8 & 0x00f000f0u) * 0x0104u) & kFields;  // codes 3 and 7
}

// a · b in BF16x2, exact here (a product of powers of two and 2-bit significands in range).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

// BF16x2 2^(s - 1 - 32) for scale s <= 160: times e2m1x8_bf16's 2^-126 · code, code · 2^(s-127)
// · 2^-32. Larger s take two factors (scale_two).
__device__ __forceinline__ uint32_t scale_one(uint32_t s) { return (s + 94u) * 0x00800080u; }
struct ScaleTwo {
  uint32_t first, second;
};
__device__ __forceinline__ ScaleTwo scale_two(uint32_t s) {
  if (s == 255u) return {0x7fc07fc0u, 0x3f803f80u};             // NaN, then 1
  if (s > 160u) return {0x7f007f00u, (s - 33u) * 0x00800080u};  // 2^127, then 2^(s-160)
  return {scale_one(s), 0x3f803f80u};
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint2 b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y));
}

// Splits activation rows 0..n-1 of chunks c0..c0+wc-1 into the window's fragments. Item i is a
// pair of elements (8q + j, 8q + j + 4) of group t of a chunk for one row: the two halves of a
// B register. Consecutive items take consecutive columns, so a warp's loads coalesce; a thread
// loads kBatch items before it splits them, so their L2 latencies overlap. Rows past n are left
// as they were: a tensor core's output column reads only its own activation column, and those
// outputs are never stored.
template <int NT, int W>
__device__ __forceinline__ void stage_window(uint2* xs, const float* __restrict__ x, int n,
                                             int cols, int c0, int wc) {
  constexpr int kBatch = 8, kStride = W * 32;
  uint32_t* xs32 = reinterpret_cast<uint32_t*>(xs);
  const int items = n * wc * 64;
  for (int base = threadIdx.x; base < items; base += kBatch * kStride) {
    float v0[kBatch], v1[kBatch];
    int at[kBatch];  // the item's first uint32 in xs32, or -1
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kStride;
      const int j = i & 3, q = (i >> 2) & 3, t = (i >> 4) & 3, rest = i >> 6;
      const int cw = rest % wc, row = rest / wc;
      const int col = (c0 + cw) * 128 + t * 32 + q * 8 + j;
      v0[b] = 0.0f;
      v1[b] = 0.0f;
      at[b] = -1;
      if (i < items) {
        if (col < cols) {  // cols % 32 == 0, so col + 4 < cols too
          const float* xr = x + static_cast<int64_t>(row) * cols + col;
          v0[b] = xr[0];
          v1[b] = xr[4];
        }
        const int step = 2 * q + (j >> 1);
        const int frag =
            ((cw * NT + (row >> 3)) * kSteps + step) * kPieces * 32 + (row & 7) * 4 + t;
        at[b] = 2 * frag + (j & 1);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (at[b] < 0) continue;
      const Pieces p0 = split3(v0[b]), p1 = split3(v1[b]);
      uint32_t* d = xs32 + at[b];
      d[0] = pack_bf16x2(p0.hi, p1.hi);
      d[64] = pack_bf16x2(p0.mid, p1.mid);  // the next piece: 32 lanes of uint2 further
      d[128] = pack_bf16x2(p0.lo, p1.lo);
    }
  }
}

// One chunk's products for this lane's rows: for each of the chunk's 4 words of a group, decode
// and scale, then the 2 k-steps those words feed, each over the three pieces (hi, mid, lo) and
// the activation tiles. kTwo: some scale of the warp needs scale_two.
template <int NT, bool kTwo>
__device__ __forceinline__ void chunk_math(const uint4 (&wq)[kTiles][2],
                                           const uint32_t (&sq)[kTiles][2], const uint2* xc,
                                           int tiles_n, int lane, float (&acc)[kTiles][NT][4]) {
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
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t p[kTiles][2][4];
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        e2m1x8_bf16(word(wq[m][h], q), p[m][h]);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          p[m][h][k] = bf16x2_mul(p[m][h][k], first[m][h]);
          if constexpr (kTwo) p[m][h][k] = bf16x2_mul(p[m][h][k], second[m][h]);
        }
      }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int step = 2 * q + hh;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (nt >= tiles_n) break;
#pragma unroll
        for (int piece = 0; piece < kPieces; ++piece) {
          const uint2 b = xc[(nt * kSteps + step) * kPieces * 32 + piece * 32 + lane];
#pragma unroll
          for (int m = 0; m < kTiles; ++m)
            mma_bf16(acc[m][nt], p[m][0][2 * hh], p[m][1][2 * hh], p[m][0][2 * hh + 1],
                     p[m][1][2 * hh + 1], b);
        }
      }
    }
  }
}

// The block's 32·W rows of one product (row_block of the matrix). NT activation tiles of 8 rows
// (n <= 8 * NT); a task of n <= 8 runs one tile either way, with the same steps for its rows.
// S == 0: the next chunk's weights in registers; S >= 2: each warp's weights travel through a
// ring of S cp.async stages after the window's fragments, S - 1 chunks ahead, each lane copying
// and reading back its own pieces (no barrier).
template <int NT, int W, int S>
__device__ __forceinline__ void tc_body(const DeviceMxfp4Task& task, int rows, int cols,
                                        int row_block, uint2* xs) {
  constexpr int kWindow = window_chunks<S>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int groups = cols >> 5, chunks = (groups + 3) >> 2;
  const int n = task.n, tiles_n = n > 8 ? 2 : 1;
  const int row0 = row_block * W * kTiles * 16 + warp * kTiles * 16;

  // This lane's rows: tile m, half h is row row0 + 16m + 8h + g (absent rows read row 0, and
  // their outputs are not stored); its piece of a chunk c is group 4c + t.
  const uint8_t* wp[kTiles][2];
  const uint8_t* sp[kTiles][2];
  bool present[kTiles][2];
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 16 * m + 8 * h + g;
      present[m][h] = r < rows;
      const int64_t rr = present[m][h] ? r : 0;
      wp[m][h] = task.packed + rr * (cols / 2) + t * 16;
      sp[m][h] = task.scales + rr * groups + t;
    }
  // The scales of chunk c (a byte a row; 0 where the row or group is absent).
  const auto scales = [&](uint32_t(&sq)[kTiles][2], int c) {
    const bool in = c < chunks && 4 * c + t < groups;
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) sq[m][h] = in && present[m][h] ? __ldg(sp[m][h] + 4 * c) : 0u;
  };

  float acc[kTiles][NT][4];
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[m][nt][k] = 0.0f;

  auto run_chunk = [&](const uint4(&wq)[kTiles][2], const uint32_t(&sq)[kTiles][2], int c) {
    const int cw = c % kWindow;
    if (cw == 0) {  // block-uniform: every thread walks the same chunks
      __syncthreads();
      stage_window<NT, W>(xs, task.x, n, cols, c, min(kWindow, chunks - c));
      __syncthreads();
    }
    bool two = false;
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) two = two || sq[m][h] > 160u;
    const uint2* xc = xs + cw * NT * kChunkFrags;
    if (__any_sync(kFullMask, two))
      chunk_math<NT, true>(wq, sq, xc, tiles_n, lane, acc);
    else
      chunk_math<NT, false>(wq, sq, xc, tiles_n, lane, acc);
  };

  if constexpr (S == 0) {
    // Two chunks' weights in registers: the next chunk's loads fly during this one's math.
    const auto load = [&](uint4(&wq)[kTiles][2], uint32_t(&sq)[kTiles][2], int c) {
      const bool in = c < chunks && 4 * c + t < groups;
#pragma unroll
      for (int m = 0; m < kTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wq[m][h] = in && present[m][h] ? load_stream(wp[m][h] + 64 * static_cast<int64_t>(c))
                                         : make_uint4(0, 0, 0, 0);
      scales(sq, c);
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
  } else {
    uint4* ring =
        reinterpret_cast<uint4*>(xs + kWindow * NT * kChunkFrags) + warp * S * kStagePieces + lane;
    // Chunk c into stage c % S (past the last chunk: an empty group, so the waits stay uniform).
    const auto issue = [&](int c) {
      const bool in = c < chunks && 4 * c + t < groups;
      uint4* stage = ring + (c % S) * kStagePieces;
#pragma unroll
      for (int m = 0; m < kTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          cp_async16(stage + (2 * m + h) * 32, wp[m][h] + 64 * static_cast<int64_t>(c),
                     in && present[m][h]);
      cp_async_commit();
    };
    for (int c = 0; c < S - 1; ++c) issue(c);
    uint32_t next[kTiles][2];  // the scales one chunk ahead
    scales(next, 0);
    for (int c = 0; c < chunks; ++c) {
      issue(c + S - 1);
      uint32_t sq[kTiles][2];
#pragma unroll
      for (int m = 0; m < kTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) sq[m][h] = next[m][h];
      scales(next, c + 1);
      cp_async_wait<S - 1>();  // chunk c's copies (this lane's own) have landed
      const uint4* stage = ring + (c % S) * kStagePieces;
      uint4 wq[kTiles][2];
#pragma unroll
      for (int m = 0; m < kTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) wq[m][h] = stage[(2 * m + h) * 32];
      run_chunk(wq, sq, c);
    }
    cp_async_wait<0>();
  }

#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt >= tiles_n) break;
      const int i0 = nt * 8 + 2 * t;  // activation rows of acc[..][0] and [1] (and [2], [3])
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!present[m][h]) continue;
        float* yr = task.y + row0 + 16 * m + 8 * h + g;
        if (i0 < n) yr[static_cast<int64_t>(i0) * rows] = acc[m][nt][2 * h];
        if (i0 + 1 < n) yr[static_cast<int64_t>(i0 + 1) * rows] = acc[m][nt][2 * h + 1];
      }
    }
}

template <int NT, int W, int S>
__global__ void __launch_bounds__(W * 32)
    tc_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales, int rows,
              int cols, const float* __restrict__ x, int n, float* __restrict__ y) {
  extern __shared__ uint2 xs[];
  tc_body<NT, W, S>(DeviceMxfp4Task{packed, scales, x, y, n}, rows, cols, blockIdx.x, xs);
}

template <int NT, int W, int S>
__global__ void __launch_bounds__(W * 32)
    tc_grouped_kernel(const DeviceMxfp4Task* __restrict__ tasks, int rows, int cols) {
  extern __shared__ uint2 xs[];
  const DeviceMxfp4Task task = tasks[blockIdx.y];
  if (task.n <= 0) return;
  tc_body<NT, W, S>(task, rows, cols, blockIdx.x, xs);
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

template <auto kKernel, typename... Args>
void launch(int threads, int smem, dim3 blocks, cudaStream_t stream, Args... args) {
  opt_in<kKernel>(smem);
  kKernel<<<blocks, threads, smem, stream>>>(args...);
  count_launches(1);
}

// The kernel for n activation rows (1-16) in shape W warps, S stages: `count` tasks of `tasks`
// (grouped) or, count == 0, the single product w · x.
template <int W, int S>
void launch_tc(int64_t n, int rows, int cols, int count, cudaStream_t stream,
               const DeviceMxfp4Task* tasks, const DeviceMxfp4& w, const float* x, float* y) {
  const dim3 grid((rows + 32 * W - 1) / (32 * W), count > 0 ? count : 1);
  const auto go = [&](auto tiles) {
    constexpr int NT = decltype(tiles)::value;
    constexpr int kSmem = smem_bytes<NT, W, S>();
    if (count > 0)
      launch<tc_grouped_kernel<NT, W, S>>(32 * W, kSmem, grid, stream, tasks, rows, cols);
    else
      launch<tc_kernel<NT, W, S>>(32 * W, kSmem, grid, stream, w.packed, w.scales, rows, cols, x,
                                  static_cast<int>(n), y);
  };
  if (n <= 8)
    go(std::integral_constant<int, 1>{});
  else
    go(std::integral_constant<int, 2>{});
}

// The compiled shapes, the default first.
// The compiled shapes: what mxfp4_tc_pick chooses among.
constexpr detail::Mxfp4TcShape kShapes[] = {{8, 0}, {8, 4}, {4, 0}};
detail::Mxfp4TcShape g_forced{};

void dispatch(int64_t n, int rows, int cols, int count, cudaStream_t stream,
              const DeviceMxfp4Task* tasks, const DeviceMxfp4& w, const float* x, float* y) {
  const detail::Mxfp4TcShape sh =
      g_forced.warps > 0 ? g_forced : detail::mxfp4_tc_pick(n, rows, count, device_sms());
  if (sh.warps == 8 && sh.stages == 4)
    return launch_tc<8, 4>(n, rows, cols, count, stream, tasks, w, x, y);
  if (sh.warps == 4) return launch_tc<4, 0>(n, rows, cols, count, stream, tasks, w, x, y);
  launch_tc<8, 0>(n, rows, cols, count, stream, tasks, w, x, y);
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
    for (const Mxfp4TcShape& k : kShapes)
      known = known || (k.warps == shape.warps && k.stages == shape.stages);
    if (!known)
      throw std::invalid_argument("set_mxfp4_tc_shape: " + mxfp4_tc_shape_name(shape) +
                                  " is not compiled");
  }
  g_forced = shape;
}

std::vector<Mxfp4TcShape> mxfp4_tc_shapes() {
  return std::vector<Mxfp4TcShape>(std::begin(kShapes), std::end(kShapes));
}

Mxfp4TcShape mxfp4_tc_pick(int64_t n, int64_t rows, int64_t count, int sms) {
  const int64_t blocks_of_8 = (rows + 255) / 256 * (count > 0 ? count : 1);
  if (blocks_of_8 < sms) return {4, 0};  // a short grid: twice the blocks
  if (n > 4 && n <= 8) return {8, 4};
  return {8, 0};
}

std::string mxfp4_tc_shape_name(Mxfp4TcShape shape) {
  return std::to_string(shape.warps) +
         (shape.stages ? "w ring " + std::to_string(shape.stages) : "w regs");
}

}  // namespace detail

}  // namespace deltafin::cuda
