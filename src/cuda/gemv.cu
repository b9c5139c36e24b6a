// The MXFP4 and BF16 GEMV/small-batch kernels and their launchers, single and grouped (MXFP4). A
// block of 4 warps (BF16 at 8-16 rows: 8) owns 2-4 weight rows per warp; the activations are
// staged in padded shared memory (conflict-free float4 reads; BF16 at 1-2 rows in two buffers, the
// next tile's landing while this one's is read, at 8-16 rows through a cp.async ring) and shared
// by the block's rows, each lane loads one 16-byte piece per row, and the next piece of work's
// weights are loaded before this one's math. At one activation row, MXFP4 matrices of K3's expert
// widths go to gemv_mxfp4_pairs.cu instead (same bits).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/gemv.h"
#include "cuda/gemv_bf16_narrow.h"
#include "cuda/gemv_common.cuh"
#include "cuda/gemv_knobs.h"
#include "cuda/gemv_launch.cuh"
#include "cuda/gemv_mxfp4_pairs.h"
#include "cuda/mxfp4_layout.cuh"

namespace deltafin::cuda {
namespace {

using namespace gemv;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

// BF16 tile: U 8-value (16-byte) chunks per lane (U = 2: 512 columns); a chunk's 8 floats sit 12
// apart.
constexpr int kBfChunkStride = 12;
// Whether the BF16 kernels for N activation rows double-buffer their activation tiles through
// registers (bf16_body, when it has no cp.async ring).
__host__ __device__ constexpr bool bf16_two_buffers(int n) { return n <= 2; }
// Their shared memory: S tiles' activations with a ring of S, else one or two.
template <int N, int U, int S>
constexpr int bf16_smem_bytes() {
  return (S > 0 ? S : bf16_two_buffers(N) ? 2 : 1) * N * 32 * U * kBfChunkStride * 4;
}
// With the weights in the ring (K = 1), each buffer also holds the block's weight tile: W warps'
// kRowsPerWarp rows of 32 · U 16-byte chunks.
template <int N, int kRowsPerWarp, int W, int U, int S, int K>
constexpr int bf16_smem_bytes() {
  return bf16_smem_bytes<N, U, S>() + (K ? S * W * kRowsPerWarp * 32 * U * 16 : 0);
}

// Each lane's partial sums reduced across the warp in warp_sum's order, by a reduce-scatter
// (scatter_sums) over the sums padded with zeros to a power of two, 32 sums at a time at most; the
// lanes left holding a sum of a row below row_end and an activation that exist store it (y is
// [n, rows], activation-major).
template <int N, int kRowsPerWarp>
__device__ __forceinline__ void store_rows(const float (&acc)[kRowsPerWarp][N], int lane, int n,
                                           int rows, int row_end, int row0, float* y) {
  constexpr int kSums = kRowsPerWarp * N;
  static_assert(kSums <= 32 || kSums % 32 == 0, "sums beyond 32 go in whole rounds of 32");
  constexpr int kRound = kSums < 32 ? kSums : 32;  // sums a reduce-scatter takes
  constexpr int kPadded = kRound <= 1    ? 1
                          : kRound <= 2  ? 2
                          : kRound <= 4  ? 4
                          : kRound <= 8  ? 8
                          : kRound <= 16 ? 16
                                         : 32;
#pragma unroll
  for (int k0 = 0; k0 < kSums; k0 += kRound) {
    float v[kPadded];
#pragma unroll
    for (int k = 0; k < kRound; ++k) v[k] = acc[(k0 + k) / N][(k0 + k) % N];
#pragma unroll
    for (int k = kRound; k < kPadded; ++k) v[k] = 0.0f;
    const float sum = scatter_sums<32>(v, lane);
    constexpr int kLanesASum = 32 / kPadded;
    const int k = k0 + lane / kLanesASum, r = k / N, i = k % N;
    if (lane % kLanesASum == 0 && k < k0 + kRound && i < n && row0 + r < row_end)
      y[static_cast<int64_t>(i) * rows + row0 + r] = sum;
  }
}

// One block's MXFP4 work: items (row block, chunk) for row blocks blockIdx.x, +gridDim.x, ...
// and their chunks in order; a chunk is 32·T groups, lane l taking groups l, l+32, ... of it. The
// next item's weights are loaded before this item's math. kResident: the whole activation rows
// are staged once per block (they fit in shared memory); else each chunk's part is staged before
// its math (once, when a row is one chunk).
template <int N, int R, int T, bool kResident>
__device__ __forceinline__ void mxfp4_body(const DeviceMxfp4Task& task, int rows, int cols) {
  constexpr int kChunk = 32 * T;
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);  // [N][xs_groups][kMxGroupStride]
  const uint8_t* __restrict__ packed = task.packed;
  const uint8_t* __restrict__ scales = task.scales;
  const float* __restrict__ x = task.x;
  const int n = task.n;
  if (n <= 0) return;  // a task with no rows reads nothing (the whole block returns)

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int groups = cols / 32;
  const int chunks = (groups + kChunk - 1) / kChunk;
  const int xs_groups = kResident ? groups : kChunk;
  const int64_t row_bytes = cols / 2;
  const int row_blocks = (rows + kWarps * R - 1) / (kWarps * R);

  // Piece q of a staging: activation row i, group g, eighth `part` of the group. A chunk's pieces
  // are numbered over its full width, so the divisions are by constants (shifts); divisions by
  // the chunk's group count, a runtime value, were a fifth of the kernel's instructions at 16
  // rows (docs/PERFORMANCE.md). Groups past `count` stage zeros, which no lane reads.
  auto stage = [&](int g0, int count) {
    const int width = kResident ? count : kChunk;  // a constant unless resident
    for (int q = threadIdx.x; q < N * width * 8; q += kThreads) {
      const int i = q / (width * 8), g = (q / 8) % width, part = q % 8;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < n && g < count)
        v = __ldg(
            reinterpret_cast<const float4*>(x + static_cast<int64_t>(i) * cols + (g0 + g) * 32) +
            part);
      v = make_float4(v.x * kXScale, v.y * kXScale, v.z * kXScale, v.w * kXScale);
      reinterpret_cast<float4*>(xs + (i * xs_groups + g) * kMxGroupStride)[part] = v;
    }
  };

  uint4 w[R][T];
  uint32_t s[R][T];
  auto load = [&](int rb, int c) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int u = 0; u < T; ++u) {
        const int g = c * kChunk + 32 * u + lane;
        const int row = rb * (kWarps * R) + warp * R + r;
        if (row < rows && g < groups) {
          w[r][u] = load_stream(packed + row * row_bytes + g * 16);
          s[r][u] = scales[static_cast<int64_t>(row) * groups + g];
        } else {
          w[r][u] = make_uint4(0, 0, 0, 0);
          s[r][u] = 127;
        }
      }
    }
  };

  int rb = blockIdx.x, c = 0, staged = -1;
  if (rb >= row_blocks) return;
  load(rb, 0);
  if (kResident) {
    stage(0, groups);
    __syncthreads();
  }
  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[r][i] = 0.0f;

  while (true) {
    if (!kResident && staged != c) {
      __syncthreads();  // the previous chunk's activations are no longer read
      stage(c * kChunk, min(kChunk, groups - c * kChunk));
      __syncthreads();
      staged = c;
    }
    uint4 wc[R][T];
    uint32_t sc[R][T];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < T; ++u) wc[r][u] = w[r][u], sc[r][u] = s[r][u];
    const int c_next = c + 1 < chunks ? c + 1 : 0;
    const int rb_next = c + 1 < chunks ? rb : rb + gridDim.x;
    if (rb_next < row_blocks) load(rb_next, c_next);

#pragma unroll
    for (int u = 0; u < T; ++u) {
      const int g = c * kChunk + 32 * u + lane;
      if (g >= groups) break;                        // past the row's end: adds nothing
      const int gx = kResident ? g : 32 * u + lane;  // its place in shared memory
      float p[R][N];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < N; ++i) p[r][i] = 0.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float wv[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t word = k == 0   ? wc[r][u].x
                                : k == 1 ? wc[r][u].y
                                : k == 2 ? wc[r][u].z
                                         : wc[r][u].w;
          e2m1x8_permuted(word, wv[r]);
        }
        // Each activation float4 pair is read from shared memory once for all of the warp's rows.
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const float4* xg =
              reinterpret_cast<const float4*>(xs + (i * xs_groups + gx) * kMxGroupStride);
          const float4 a = xg[2 * k], b = xg[2 * k + 1];
#pragma unroll
          for (int r = 0; r < R; ++r) p[r][i] = fma8(wv[r], a, b, p[r][i]);
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float scale = e8m0_to_f32(sc[r][u]);
#pragma unroll
        for (int i = 0; i < N; ++i) {
          acc[r][i] = __fmaf_rn(__fmul_rn(p[r][i], kXScale), scale, acc[r][i]);
        }
      }
    }

    if (c + 1 == chunks) {
      store_rows<N, R>(acc, lane, n, rows, rows, rb * (kWarps * R) + warp * R, task.y);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < N; ++i) acc[r][i] = 0.0f;
    }
    if (rb_next >= row_blocks) break;
    rb = rb_next;
    c = c_next;
  }
}

template <int N, int R, int T, bool kResident>
__global__ void __launch_bounds__(kThreads)
    mxfp4_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales, int rows,
                 int cols, const float* __restrict__ x, int n, float* __restrict__ y) {
  mxfp4_body<N, R, T, kResident>(DeviceMxfp4Task{packed, scales, x, y, n}, rows, cols);
}

template <int N, int R, int T, bool kResident>
__global__ void __launch_bounds__(kThreads)
    mxfp4_grouped_kernel(const DeviceMxfp4Task* __restrict__ tasks, int rows, int cols) {
  mxfp4_body<N, R, T, kResident>(tasks[blockIdx.y], rows, cols);
}

// Row block `block` of one BF16 product: rows block · block_rows on, block_rows <= W ·
// kRowsPerWarp of them, kRowsPerWarp a warp (warps past the block's rows only stage; every thread
// of the block calls it: it synchronizes).
// S > 0: the activation tiles arrive through a cp.async ring of S buffers, issued S - 1 tiles
// ahead; S == 0: through registers into two buffers (bf16_two_buffers) or into one between two
// barriers. K = 1 (rings only): the weight tiles travel in the same ring, S - 1 tiles ahead with
// no registers held for them, instead of one tile ahead in registers.
template <int N, int kRowsPerWarp, int W, int U, int S, int K>
__device__ __forceinline__ void bf16_body(const uint16_t* __restrict__ wbits, int rows, int cols,
                                          const float* __restrict__ x, int n, float* __restrict__ y,
                                          int block, int block_rows) {
  static_assert(S == 0 || S >= 2, "a ring holds the tile being read and one landing");
  static_assert(K == 0 || S > 0, "weights travel in a ring only");
  constexpr int kThreads = 32 * W;
  extern __shared__ float4 smem[];
  constexpr int kBfChunksPerLane = U, kBfTileChunks = 32 * U;
  float* xs = reinterpret_cast<float*>(smem);  // [buffers][N][kBfTileChunks][kBfChunkStride]

  const int lane = threadIdx.x % 32;
  const int first_row = block * block_rows, row_end = min(rows, first_row + block_rows);
  const int row0 = first_row + (threadIdx.x / 32) * kRowsPerWarp;
  const bool has_rows = row0 < row_end;  // the warp's: no math without them
  const int chunks = cols / 8;
  const int tiles = (chunks + kBfTileChunks - 1) / kBfTileChunks;

  uint4 w[kRowsPerWarp][kBfChunksPerLane];
  auto load = [&](int tile) {
    if constexpr (!K) {  // else the ring brings them
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
        for (int u = 0; u < kBfChunksPerLane; ++u) {
          const int c = tile * kBfTileChunks + u * 32 + lane;
          const int row = row0 + r;
          w[r][u] = (row < row_end && c < chunks)
                        ? load_stream(wbits + static_cast<int64_t>(row) * cols + c * 8)
                        : make_uint4(0, 0, 0, 0);
        }
      }
    }
  };

  float acc[kRowsPerWarp][N];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[r][i] = 0.0f;

  // Without a ring, at 1-2 activation rows (bf16_two_buffers), tile t + 1's activations are
  // loaded into registers before tile t's math and stored into the other buffer after it: one
  // barrier a tile, the loads' latency hidden behind the math, where one buffer made every tile
  // wait for its activations between two barriers. At 4 or more rows the registers that takes
  // cost more than the wait (docs/CUDA.md has the figures), which a ring (no registers) avoids.
  constexpr bool kRing = S > 0;
  constexpr bool kTwoBuffers = !kRing && bf16_two_buffers(N);
  constexpr int kTileFloats = N * kBfTileChunks * kBfChunkStride;
  constexpr int kPieces = N * kBfTileChunks * 2;  // 16-byte pieces of a tile's activations
  constexpr int kStagePerThread = kTwoBuffers ? (kPieces + kThreads - 1) / kThreads : 1;
  // Piece q of a tile: activation row i, chunk c of the tile, half `part` of the chunk.
  auto piece = [](int q, int& i, int& c, int& part) {
    i = q / (kBfTileChunks * 2), c = (q / 2) % kBfTileChunks, part = q % 2;
  };
  float4 next_x[kStagePerThread];
  auto fetch = [&](int t) {
#pragma unroll
    for (int j = 0; j < kStagePerThread; ++j) {
      const int q = threadIdx.x + j * kThreads;
      int i, c, part;
      piece(q, i, c, part);
      const int cc = t * kBfTileChunks + c;
      next_x[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (q < kPieces && i < n && cc < chunks)
        next_x[j] = __ldg(
            reinterpret_cast<const float4*>(x + static_cast<int64_t>(i) * cols + cc * 8) + part);
    }
  };
  auto put = [&](int t) {
    float* buf = xs + (t % 2) * kTileFloats;  // two buffers only
#pragma unroll
    for (int j = 0; j < kStagePerThread; ++j) {
      const int q = threadIdx.x + j * kThreads;
      int i, c, part;
      piece(q, i, c, part);
      if (q < kPieces)
        reinterpret_cast<float4*>(buf + (i * kBfTileChunks + c) * kBfChunkStride)[part] = next_x[j];
    }
  };
  // Ring: tile t's pieces into buffer t % S as one commit group (empty past the last tile, so
  // every thread counts the same groups); activation rows past n land as zeros. A thread copies
  // the same chunk half of every kRingRowStep-th activation row, through L1: the SM's other
  // blocks read the same tiles (through L2 alone it measured 0.27-0.55 of the read at n = 8).
  constexpr int kRingRowStep = S > 0 ? kThreads / (kBfTileChunks * 2) : 1;
  constexpr int kWeightTilePieces = W * kRowsPerWarp * kBfTileChunks;
  uint4* const weight_tiles = reinterpret_cast<uint4*>(xs + (S > 0 ? S : 1) * kTileFloats);
  // Tile t's weights in the ring (K = 1): its buffer's W · kRowsPerWarp rows of kBfTileChunks.
  auto weight_tile = [&](int t) {
    return weight_tiles + (t % (S > 0 ? S : 1)) * kWeightTilePieces;
  };
  static_assert(S == 0 || (kThreads % (kBfTileChunks * 2) == 0 && N % kRingRowStep == 0),
                "a ring's pieces divide evenly among the threads");
  auto issue = [&](int t) {
    if (t < tiles) {
      const int i0 = threadIdx.x / (kBfTileChunks * 2), c = (threadIdx.x / 2) % kBfTileChunks;
      const int cc = t * kBfTileChunks + c, part = threadIdx.x % 2;
      const float* src = x + static_cast<int64_t>(i0) * cols + cc * 8 + part * 4;
      float* dst =
          xs + (t % (S > 0 ? S : 1)) * kTileFloats + (i0 * kBfTileChunks + c) * kBfChunkStride;
#pragma unroll
      for (int j = 0; j < N / kRingRowStep; ++j) {
        const bool valid = i0 + j * kRingRowStep < n && cc < chunks;
        cp_async16_l1(dst + part * 4, valid ? src : x, valid);
        src += kRingRowStep * static_cast<int64_t>(cols);
        dst += kRingRowStep * kBfTileChunks * kBfChunkStride;
      }
      if constexpr (K) {
        // Piece p of the block's weight tile: row p / kBfTileChunks of the block, the tile's chunk
        // p % kBfTileChunks; consecutive threads take consecutive chunks of a row. Through L2
        // only: each weight is read once.
        uint4* wdst = weight_tile(t);
#pragma unroll
        for (int j = 0; j < kRowsPerWarp * U; ++j) {
          const int p = threadIdx.x + j * kThreads;
          const int row = first_row + p / kBfTileChunks;
          const int wc = t * kBfTileChunks + p % kBfTileChunks;
          const bool valid = row < row_end && wc < chunks;
          cp_async16(wdst + p, valid ? wbits + static_cast<int64_t>(row) * cols + wc * 8 : wbits,
                     valid);
        }
      }
    }
    cp_async_commit();
  };

  load(0);
  if constexpr (kRing) {
#pragma unroll
    for (int t = 0; t < S - 1; ++t) issue(t);
  } else if constexpr (kTwoBuffers) {
    fetch(0);
    put(0);
  }
  for (int t = 0; t < tiles; ++t) {
    if constexpr (kRing) {
      // This thread's pieces of tile t have landed; after the barrier everyone's have, and every
      // warp is past tile t - 1's math, so its buffer takes tile t + S - 1.
      cp_async_wait<(S > 1 ? S - 2 : 0)>();
      __syncthreads();
      issue(t + S - 1);
    } else if constexpr (kTwoBuffers) {
      // Tile t's activations are in its buffer, and every warp is past tile t - 1's math, whose
      // buffer takes tile t + 1 after this tile's math.
      __syncthreads();
      if (t + 1 < tiles) fetch(t + 1);
    } else {
      __syncthreads();
      for (int q = threadIdx.x; q < kPieces; q += kThreads) {
        int i, c, part;
        piece(q, i, c, part);
        const int cc = t * kBfTileChunks + c;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < n && cc < chunks)
          v = __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(i) * cols + cc * 8) +
                    part);
        reinterpret_cast<float4*>(xs + (i * kBfTileChunks + c) * kBfChunkStride)[part] = v;
      }
      __syncthreads();
    }
    const float* tile = xs + (kRing         ? (t % (S > 0 ? S : 1)) * kTileFloats
                              : kTwoBuffers ? (t % 2) * kTileFloats
                                            : 0);
    uint4 wc[kRowsPerWarp][kBfChunksPerLane];
    const uint4* warp_tile = weight_tile(t) + (threadIdx.x / 32) * kRowsPerWarp * kBfTileChunks;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int u = 0; u < kBfChunksPerLane; ++u) {
        if constexpr (K)
          wc[r][u] = warp_tile[r * kBfTileChunks + u * 32 + lane];
        else
          wc[r][u] = w[r][u];
      }
    if (t + 1 < tiles) load(t + 1);

#pragma unroll
    for (int u = 0; u < kBfChunksPerLane; ++u) {
      if (!has_rows || t * kBfTileChunks + u * 32 + lane >= chunks) break;  // in order
      float wv[kRowsPerWarp][8];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) bf16x8_to_f32(wc[r][u], wv[r]);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float4* xc = reinterpret_cast<const float4*>(
            tile + (i * kBfTileChunks + u * 32 + lane) * kBfChunkStride);
        const float4 a = xc[0], b = xc[1];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[r][i] = fma8(wv[r], a, b, acc[r][i]);
      }
    }
    if constexpr (kTwoBuffers) {
      if (t + 1 < tiles) put(t + 1);
    }
  }
  if constexpr (kRing) cp_async_wait<0>();  // no copy outlives the block's shared memory

  store_rows<N, kRowsPerWarp>(acc, lane, n, rows, row_end, row0, y);
}

template <int N, int kRowsPerWarp, int W, int U, int S, int K>
__global__ void __launch_bounds__(32 * W)
    bf16_kernel(const uint16_t* __restrict__ wbits, int rows, int cols, const float* __restrict__ x,
                int n, float* __restrict__ y, int block_rows) {
  bf16_body<N, kRowsPerWarp, W, U, S, K>(wbits, rows, cols, x, n, y, blockIdx.x, block_rows);
}

// Sibling products of one x (matmul_siblings), passed by value: blockIdx.y picks the matrix,
// blocks past its rows return before any synchronization.
struct Bf16Siblings {
  const uint16_t* w[kMaxBf16Siblings];
  float* y[kMaxBf16Siblings];
  int rows[kMaxBf16Siblings];
};

// At 16 rows the 8-warp shapes are held to two blocks an SM (128 registers), as their plain
// kernels are: the struct argument's addressing would otherwise take the 4-row shape to 136 and
// one block.
template <int N, int kRowsPerWarp, int W, int U, int S, int K>
__global__ void __launch_bounds__(32 * W, N == 16 && W == 8 ? 2 : 1)
    bf16_siblings_kernel(Bf16Siblings s, int cols, const float* __restrict__ x, int n,
                         int block_rows) {
  const int t = blockIdx.y;
  if (static_cast<int>(blockIdx.x) * block_rows >= s.rows[t]) return;
  bf16_body<N, kRowsPerWarp, W, U, S, K>(s.w[t], s.rows[t], cols, x, n, s.y[t], blockIdx.x,
                                         block_rows);
}

template <auto kKernel, typename... Args>
void launch(int smem, dim3 blocks, cudaStream_t stream, Args... args) {
  launch_threads<kKernel>(kThreads, smem, blocks, stream, args...);
}

// Blocks per task of a grouped launch: twice as many as the SMs hold at once in all, each looping
// over row blocks, so a block stages its task's activations once for many rows. The second wave
// (a block starts where one ends) evens out blocks that finish at different times; it measured
// faster than one wave on K3's layer shapes (docs/CUDA.md).
template <auto kKernel>
int grouped_blocks(int smem, int row_blocks, int count) {
  opt_in<kKernel>(smem);
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kThreads, smem) !=
      cudaSuccess)
    per_sm = 1;
  const int64_t resident = 2 * static_cast<int64_t>(device_sms()) * (per_sm > 0 ? per_sm : 1);
  const int64_t per_task = (resident + count - 1) / count;
  return static_cast<int>(per_task < row_blocks ? per_task : row_blocks);
}

// MXFP4 shape for a pass of N rows: R weight rows per warp (4 where each staged activation then
// feeds 4 rows' FMAs, at N = 16 too: 255 registers and 2 blocks an SM cost less than twice the
// shared-memory reads of 2 rows; docs/CUDA.md), T groups per lane in a chunk (2 at N = 4: with 4
// the 4x4 live weight words cost occupancy, measured slower). N <= 2: the whole
// activation rows reside in shared memory when they fit in 48 KB (K3: 14 KB per row).
template <int N>
struct MxShape {
  static constexpr int R = (N == 4 || N == 8 || N == 16) ? 4 : 2;
  static constexpr int T = N <= 4 ? 2 : 1;
  static constexpr bool kMayReside = N <= 2;
  static int blocks(int64_t rows) {
    return static_cast<int>((rows + kWarps * R - 1) / (kWarps * R));
  }
};

// The MXFP4 kernel for N rows: `count` tasks of the table `tasks` (grouped) or, count == 0, the
// single product w · x.
template <int N>
void launch_mxfp4(int rows, int cols, int count, cudaStream_t stream, const DeviceMxfp4Task* tasks,
                  const DeviceMxfp4& w, const float* x, int n, float* y) {
  using S = MxShape<N>;
  const int groups = cols / 32;
  const int row_blocks = S::blocks(rows);
  const int resident_smem = N * groups * kMxGroupStride * 4;
  const bool resident = S::kMayReside && resident_smem <= 48 * 1024;
  const int chunks = (groups + 32 * S::T - 1) / (32 * S::T);
  const int smem = resident ? resident_smem : N * 32 * S::T * kMxGroupStride * 4;
  auto go = [&](auto res) {
    constexpr bool kRes = decltype(res)::value;
    if (count > 0) {
      constexpr auto kernel = mxfp4_grouped_kernel<N, S::R, S::T, kRes>;
      // Resident rows or a single chunk: fewer blocks, each looping over row blocks, so a block
      // stages its activations once for many rows.
      const int gx =
          (kRes || chunks == 1) ? grouped_blocks<kernel>(smem, row_blocks, count) : row_blocks;
      launch<kernel>(smem, dim3(gx, count), stream, tasks, rows, cols);
    } else {
      launch<mxfp4_kernel<N, S::R, S::T, kRes>>(smem, dim3(row_blocks), stream, w.packed, w.scales,
                                                rows, cols, x, n, y);
    }
  };
  if constexpr (S::kMayReside) {
    if (resident) return go(std::true_type{});
  }
  go(std::false_type{});
}

// The instantiation for n rows: any N >= n computes the same bits for rows < n, so n is rounded
// up to a power of two to keep the number of compiled variants small.
template <typename F>
void dispatch(int64_t n, F&& f) {
  with_constant<1, 2, 4, 8, 16>(kernel_batch(n), f);
}

}  // namespace

void matmul(const DeviceMxfp4& w, const float* x, int64_t n, float* y, cudaStream_t stream) {
  check_shape("cuda::matmul(MXFP4)", w.rows, w.cols, n, 32, w.packed, x, y);
  if (w.scales == nullptr) throw std::invalid_argument("cuda::matmul(MXFP4): scales is null");
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  for (int64_t i0 = 0; i0 < n; i0 += kGpuMaxBatch) {
    const int nb = static_cast<int>(n - i0 < kGpuMaxBatch ? n - i0 : kGpuMaxBatch);
    const float* xb = x + i0 * w.cols;
    float* yb = y + i0 * w.rows;
    if (nb == 1 && detail::mxfp4_pairs_single(w, xb, yb, stream)) continue;
    dispatch(nb, [&](auto tag) {
      constexpr int N = decltype(tag)::value;
      launch_mxfp4<N>(rows, cols, 0, stream, nullptr, w, xb, nb, yb);
    });
  }
  check_launch("cuda::matmul(MXFP4)");
}

void matmul_grouped(const DeviceMxfp4Task* tasks, int64_t count, int64_t rows, int64_t cols,
                    int64_t max_n, cudaStream_t stream) {
  const char* what = "cuda::matmul_grouped(MXFP4)";
  check_grouped(what, tasks, count, rows, cols, max_n);
  if (count == 0 || max_n == 0) return;
  if (max_n == 1 &&
      detail::mxfp4_pairs_grouped(tasks, static_cast<int>(count), static_cast<int>(rows),
                                  static_cast<int>(cols), stream)) {
    check_launch(what);
    return;
  }
  dispatch(max_n, [&](auto tag) {
    constexpr int N = decltype(tag)::value;
    launch_mxfp4<N>(static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(count), stream,
                    tasks, DeviceMxfp4{}, nullptr, 0, nullptr);
  });
  check_launch(what);
}

// The BF16 kernel shapes compiled for N activation rows, each coded K·10000 + R·1000 + W·100 +
// U·10 + S (weight tiles in the ring, weight rows a warp, warps a block, chunks a lane per tile,
// ring buffers; Bf16Shape): the chooser's candidates and the bench's variants; the first is the
// default where bf16_choose has no rule. At 4-16 rows, the 8-warp shapes with a ring share each
// staged tile among 32 (16) rows, halving the activations read from L2 per weight; at 8 rows the
// shapes the chooser no longer picks (weights in registers at 1 chunk, the register-staged 4-warp
// block) stay for the bench to compare, and at 16 rows the 2-row shape the 4-row ones replaced.
template <int N>
struct Bf16Compiled;
template <>
struct Bf16Compiled<1> {
  using Codes = std::integer_sequence<int, 2420, 1440>;
};
template <>
struct Bf16Compiled<2> {
  using Codes = std::integer_sequence<int, 2420>;
};
template <>
struct Bf16Compiled<4> {
  using Codes = std::integer_sequence<int, 4420>;
};
template <>
struct Bf16Compiled<8> {
  using Codes = std::integer_sequence<int, 14813, 4823, 4813, 4420, 14814, 3823, 3423, 13423, 13424,
                                      13823, 13824>;
};
template <>
struct Bf16Compiled<16> {
  using Codes = std::integer_sequence<int, 14813, 14413, 2813>;
};

// A shape code's digits (Bf16Compiled).
template <int kCode>
constexpr detail::Bf16Shape shape_of() {
  return {kCode / 1000 % 10, kCode / 100 % 10, kCode / 10 % 10, kCode % 10, kCode / 10000};
}

template <int N, int kCode>
struct Bf16Variant {
  static constexpr detail::Bf16Shape kShape = shape_of<kCode>();
  static constexpr int R = kShape.rows_per_warp, W = kShape.warps, U = kShape.chunks,
                       S = kShape.stages, K = kShape.weight_ring;
  static constexpr int kThreads = 32 * W;
  static constexpr int kSmem = bf16_smem_bytes<N, R, W, U, S, K>();
  static constexpr auto kKernel = bf16_kernel<N, R, W, U, S, K>;
  static constexpr auto kSiblings = bf16_siblings_kernel<N, R, W, U, S, K>;
  static bool is(const detail::Bf16Shape& s) {
    return s.rows_per_warp == R && s.warps == W && s.chunks == U && s.stages == S &&
           s.weight_ring == K;
  }
  static int blocks(int64_t rows, int block_rows = W * R) {
    return static_cast<int>((rows + block_rows - 1) / block_rows);
  }
};

template <int... kCodes>
std::vector<detail::Bf16Shape> shapes_of(std::integer_sequence<int, kCodes...>) {
  return {shape_of<kCodes>()...};
}
// The first of a list: the default shape, found without building the list on every launch.
template <int kFirst, int... kRest>
constexpr detail::Bf16Shape first_shape(std::integer_sequence<int, kFirst, kRest...>) {
  return shape_of<kFirst>();
}

// Calls f(Bf16Variant<N, code>{}) for the compiled variant of `shape`; false if there is none.
template <int N, typename F, int... kCodes>
bool with_bf16_variant(const detail::Bf16Shape& shape, std::integer_sequence<int, kCodes...>,
                       F&& f) {
  return ((Bf16Variant<N, kCodes>::is(shape) ? (f(Bf16Variant<N, kCodes>{}), true) : false) || ...);
}

// The bench's forced shapes per batch size (detail::set_bf16_shape); {} lets bf16_choose pick.
detail::Bf16Shape g_bf16_forced[5];
// The tests' forced rows a block (detail::set_bf16_block_rows); 0 lets bf16_rows_a_block pick.
int g_bf16_block_rows_forced = 0;
// The bench's switch to balanced rows a block (detail::set_bf16_balanced); off by default.
bool g_bf16_balanced = false;
int batch_slot(int n) {
  return n == 1 ? 0 : n == 2 ? 1 : n == 4 ? 2 : n == 8 ? 3 : n == 16 ? 4 : -1;
}

// How fully `blocks` keep `sms` SMs busy at `per_sm` blocks an SM: the share of the block slots
// they fill over whole waves, except that a grid smaller than the SMs counts the SMs it occupies
// (one block of 8 warps keeps an SM reading; a second would add to few of them).
double active_fill(int64_t blocks, int per_sm, int sms) {
  if (blocks <= sms) return static_cast<double>(blocks) / sms;
  const int64_t slots = static_cast<int64_t>(per_sm > 0 ? per_sm : 1) * sms;
  const int64_t waves = (blocks + slots - 1) / slots;
  return static_cast<double>(blocks) / static_cast<double>(waves * slots);
}

// Blocks of a compiled 8-row variant an SM of this device holds.
template <int kCode>
int per_sm_8() {
  using V = Bf16Variant<8, kCode>;
  return blocks_per_sm<V::kKernel>(V::kThreads, V::kSmem);
}

// The shape for N activation rows over `count` matrices of rows[0..count) rows of `cols` in one
// launch. The rules count the blocks that work: a sibling shorter than the longest gets only its
// own blocks, the rest of its grid row exiting at once (MLA's q_a and kv_a beside g_proj: 600
// 24-row blocks, not 1536: 4/8/1/3+w, 1.14x the 3/8/2/3 that the longest row count alone chose;
// the router beside the MoE's latent projection: 3/8/2/3, 1.26x 4/8/1/3+w; H100, 2026-12-07).
// - 1 row: 1 row a warp with 4 chunks a lane per 1024-column tile (twice the blocks, twice the
//   bytes a lane has in flight) where a row fills that tile: 1.24x on q_a's 1536x7168 and 1.09x
//   on 3072x7168, equal on 7168x7168, but 0.71x on f_b's 128 columns, which keep 2 rows and 2
//   chunks (matmul gives rows of up to 128 columns to the narrow kernel unless a shape is forced).
// - 8 rows, a matrix so short that its 24-row blocks leave SMs idle (q_a's 1536 rows: 64
//   blocks): 3 rows and 2 chunks in 4-warp blocks (12-row blocks, one for nearly every SM) where
//   their fill beats 1.06 times the 24-row grid's, with the weight tiles in the ring (13423: two
//   tiles of loads in flight where the registers held one). Where the 24-row grid fills the SMs
//   the 4-warp block loses, so it goes no further.
// - 8 rows otherwise: 8 warps with a 3-tile ring, of three kinds: 4 rows a warp and 1 chunk a
//   lane per tile with the weight tiles in the ring too (14813: 122 registers, 2 blocks an SM), 4
//   rows and 2 chunks with the weights in registers (4823: 156, 1 block), and 3 rows and 2 chunks
//   (3823: 128, 2 blocks; 24-row blocks, so 3072 rows make 128 blocks, one for nearly every SM,
//   where 32 rows make 96). Each is judged by its active fill (active_fill). 3 rows where
//   that is at least the 2-chunk shape's and beats 1.06 times the 1-chunk shape's: 3072 rows (128
//   of 132 SMs against 96) and 12288 (1.94 waves of 2 an SM, 97% full, against 1.45 waves, 73%),
//   1.09x the 2-chunk shape on both. Else 2 chunks where the 32-row grid is no larger than the
//   SMs (its 2 chunks keep more bytes in flight a warp: 1.10x the 1-chunk shape on 3072 rows) or
//   its fill beats 1.06 times the 1-chunk shape's, else 1 chunk (1 is faster a block). That
//   picks the fastest of these on all six K3 shapes (H100, 2026-12-06). Where the 3-row grid is
//   one block an SM or less (3072 rows), its weight tiles go in a 4-tile ring (13824: 196 KB, so
//   1 block an SM, which is all such a grid uses, with three tiles of loads in flight); with more
//   blocks the 2 blocks an SM of 3823 win.
// - 8 rows on a card past kFastDramGbpsPerSm (an H200): 3 rows by the same test against the
//   4-tile ring (3072, 6144 and 12288 rows: 1.13x, 1.27x and 1.01x the ring or 2-chunk shape
//   there, 0.69, 0.79 and 0.77 of the read); else the 4-tile ring (115 KB, still 2 blocks an
//   SM) once the matrix gives every SM a block, 1.01-1.04x the 3-tile ring and 1.05-1.12x the
//   2-chunk shape on 7168-33792 rows; below that the 2-chunk shape (H200, 2026-12-06). The
//   ring shapes of the rules above (13423 for q_a, 13824 for 3072 rows) apply there too; they
//   are not yet timed on an H200.
// - 16 rows: 4 rows a warp with the weight tiles in the ring, so each activation read from
//   shared memory feeds 4 rows' FMAs instead of 2 (2 rows and 16 activations took twice the
//   shared-memory bandwidth of their FMAs' issue): in 8-warp blocks (14813, 2 blocks an SM)
//   where the 32-row grid gives at least half the SMs a block and a row fills a 1024-column
//   tile, else in 4-warp blocks (14413: 16-row blocks, twice as many). 1.35-1.40x the 2-row
//   shape (2813) on K3's seven large spine shapes (3072 rows, 96 blocks, included: 1.07x the
//   4-warp shape there), 1.18x on q_a's 1536 rows (48 blocks: the 4-warp shape, 1.48x the
//   8-warp one) and 1.02x on f_b's 128 columns (H100, 2026-12-07, docs/PERFORMANCE.md).
// - Otherwise the first compiled shape.
// Measured on an H100 (docs/PERFORMANCE.md, 2026-12-05). Every shape gives the same bits (a
// lane's chunks are taken in the same order, and a row's sums do not depend on its neighbours).
template <int N>
detail::Bf16Shape bf16_choose(const int64_t* rows, int count, int64_t cols) {
  const detail::Bf16Shape forced = g_bf16_forced[batch_slot(N)];
  if (forced.rows_per_warp != 0) return forced;
  if constexpr (N == 1) {
    if (cols >= 1024) return shape_of<1440>();
  }
  if constexpr (N == 8) {  // the rules above, a function of the occupancy (tested on the host)
    return detail::bf16_pick_8(
        rows, count,
        {device_sms(), device_dram_gbps_per_sm() > kFastDramGbpsPerSm, per_sm_8<14813>(),
         per_sm_8<14814>(), per_sm_8<4823>(), per_sm_8<3823>(), per_sm_8<13423>()});
  }
  if constexpr (N == 16) return detail::bf16_pick_16(rows, count, cols, device_sms());
  return first_shape(typename Bf16Compiled<N>::Codes{});
}

// Rows a block of variant V takes for a pass of N rows over matrices of rows[0..count) rows, at
// most V's W · R: fewer (detail::bf16_block_rows) only where balancing is on, at 8 rows, on a
// card past kFastDramGbpsPerSm, where the SMs, not DRAM, bind, so the busiest SM's rows set the
// time.
template <int N, typename V>
int bf16_rows_a_block(const int64_t* rows, int count) {
  const int full = V::W * V::R;
  if (g_bf16_block_rows_forced > 0) return std::min(g_bf16_block_rows_forced, full);
  if (!g_bf16_balanced || N != 8 || device_dram_gbps_per_sm() <= kFastDramGbpsPerSm) return full;
  return detail::bf16_block_rows(rows, count, V::R, full, device_sms());
}

// Blocks of variant V that matrices of rows[0..count) rows need in one launch.
template <typename V>
int64_t launch_blocks(const int64_t* rows, int count) {
  int64_t blocks = 0;
  for (int t = 0; t < count; ++t) blocks += V::blocks(rows[t]);
  return blocks;
}

namespace detail {

Bf16Shape bf16_pick_8(const int64_t* rows, int count, const Bf16Occupancy8& occ) {
  // Both ring shapes and the 2-chunk one have 32-row blocks, so one count serves the three.
  static_assert(Bf16Variant<8, 14813>::R * Bf16Variant<8, 14813>::W == 32 &&
                Bf16Variant<8, 14814>::R * Bf16Variant<8, 14814>::W == 32 &&
                Bf16Variant<8, 4823>::R * Bf16Variant<8, 4823>::W == 32);
  const int64_t b32 = launch_blocks<Bf16Variant<8, 4823>>(rows, count);
  const int64_t b24 = launch_blocks<Bf16Variant<8, 3823>>(rows, count);
  const int64_t b12 = launch_blocks<Bf16Variant<8, 13423>>(rows, count);
  // The card's ring shape (1 chunk, weight tiles in the ring): 4 tiles past the threshold.
  const double ring = active_fill(b32, occ.fast ? occ.ring4 : occ.ring3, occ.sms);
  const double two = active_fill(b32, occ.two_chunks, occ.sms);
  const double three = active_fill(b24, occ.three_rows, occ.sms);
  if (b24 < occ.sms && active_fill(b12, occ.twelve_rows, occ.sms) > 1.06 * three)
    return shape_of<13423>();
  if (three >= two && three > 1.06 * ring) {
    const int64_t ring_grid = launch_blocks<Bf16Variant<8, 13824>>(rows, count);
    return ring_grid <= occ.sms ? shape_of<13824>() : shape_of<3823>();
  }
  if (occ.fast) return b32 < occ.sms ? shape_of<4823>() : shape_of<14814>();
  if (b32 <= occ.sms) return shape_of<4823>();
  return two > 1.06 * ring ? shape_of<4823>() : shape_of<14813>();
}

int bf16_block_rows(const int64_t* rows, int count, int rows_per_warp, int full, int sms) {
  // Blocks spread evenly: the busiest SM holds ceil(blocks / sms) of them. Candidates down to 3/4
  // of a full block (each block stages the activations again: smaller ones pay that more often).
  auto busiest = [&](int block_rows) {
    int64_t blocks = 0;
    for (int t = 0; t < count; ++t) blocks += (rows[t] + block_rows - 1) / block_rows;
    return (blocks + sms - 1) / sms * block_rows;
  };
  int best = full;
  int64_t best_rows = busiest(full);
  for (int b = full - rows_per_warp; 4 * b >= 3 * full; b -= rows_per_warp) {
    const int64_t b_rows = busiest(b);
    if (b_rows < best_rows) best = b, best_rows = b_rows;
  }
  return best;
}

Bf16Shape bf16_pick_16(const int64_t* rows, int count, int64_t cols, int sms) {
  const int64_t b32 = launch_blocks<Bf16Variant<16, 14813>>(rows, count);
  return 2 * b32 >= sms && cols >= 1024 ? shape_of<14813>() : shape_of<14413>();
}

}  // namespace detail

void matmul_siblings(const DeviceBf16Out* outs, int count, const float* x, int64_t n,
                     cudaStream_t stream) {
  const char* what = "cuda::matmul_siblings(BF16)";
  if (count < 1 || count > kMaxBf16Siblings)
    throw std::invalid_argument(std::string(what) + ": count is " + std::to_string(count) +
                                ", expected 1.." + std::to_string(kMaxBf16Siblings));
  const int64_t cols = outs[0].w.cols;
  Bf16Siblings s{};
  int64_t max_rows = 0, all_rows[kMaxBf16Siblings];
  for (int t = 0; t < count; ++t) {
    if (outs[t].w.cols != cols)
      throw std::invalid_argument(std::string(what) + ": matrix " + std::to_string(t) + " has " +
                                  std::to_string(outs[t].w.cols) + " columns, the first " +
                                  std::to_string(cols));
    check_shape(what, outs[t].w.rows, cols, n, 8, outs[t].w.data, x, outs[t].y);
    s.w[t] = outs[t].w.data;
    s.rows[t] = static_cast<int>(outs[t].w.rows);
    all_rows[t] = outs[t].w.rows;
    max_rows = std::max(max_rows, outs[t].w.rows);
  }
  for (int64_t i0 = 0; i0 < n; i0 += kGpuMaxBatch) {
    const int nb = static_cast<int>(n - i0 < kGpuMaxBatch ? n - i0 : kGpuMaxBatch);
    Bf16Siblings pass = s;
    for (int t = 0; t < count; ++t) pass.y[t] = outs[t].y + i0 * outs[t].w.rows;
    dispatch(nb, [&](auto tag) {
      constexpr int N = decltype(tag)::value;
      with_bf16_variant<N>(
          bf16_choose<N>(all_rows, count, cols), typename Bf16Compiled<N>::Codes{}, [&](auto v) {
            using V = decltype(v);
            const int block_rows = bf16_rows_a_block<N, V>(all_rows, count);
            launch_threads<V::kSiblings>(V::kThreads, V::kSmem,
                                         dim3(V::blocks(max_rows, block_rows), count), stream, pass,
                                         static_cast<int>(cols), x + i0 * cols, nb, block_rows);
          });
    });
  }
  check_launch(what);
}

void matmul(const DeviceBf16& w, const float* x, int64_t n, float* y, cudaStream_t stream) {
  check_shape("cuda::matmul(BF16)", w.rows, w.cols, n, 8, w.data, x, y);
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols);
  for (int64_t i0 = 0; i0 < n; i0 += kGpuMaxBatch) {
    const int nb = static_cast<int>(n - i0 < kGpuMaxBatch ? n - i0 : kGpuMaxBatch);
    const float* xb = x + i0 * w.cols;
    float* yb = y + i0 * w.rows;
    dispatch(nb, [&](auto tag) {
      constexpr int N = decltype(tag)::value;
      // Rows of at most 128 columns leave half a tiled kernel's lanes idle (a shape the bench
      // forces still runs).
      if (g_bf16_forced[batch_slot(N)].rows_per_warp == 0 &&
          detail::bf16_narrow(w, xb, nb, yb, stream))
        return;
      with_bf16_variant<N>(
          bf16_choose<N>(&w.rows, 1, cols), typename Bf16Compiled<N>::Codes{}, [&](auto v) {
            using V = decltype(v);
            const int block_rows = bf16_rows_a_block<N, V>(&w.rows, 1);
            launch_threads<V::kKernel>(V::kThreads, V::kSmem, dim3(V::blocks(rows, block_rows)),
                                       stream, w.data, rows, cols, xb, nb, yb, block_rows);
          });
    });
  }
  check_launch("cuda::matmul(BF16)");
}

namespace detail {
void set_bf16_shape(int n, Bf16Shape shape) {
  const int slot = batch_slot(n);
  if (slot < 0)
    throw std::invalid_argument("set_bf16_shape: n is " + std::to_string(n) +
                                ", expected 1, 2, 4, 8 or 16");
  if (shape.rows_per_warp != 0) {
    bool compiled = false;
    dispatch(n, [&](auto tag) {
      constexpr int N = decltype(tag)::value;
      compiled = with_bf16_variant<N>(shape, typename Bf16Compiled<N>::Codes{}, [](auto) {});
    });
    if (!compiled)
      throw std::invalid_argument(
          "set_bf16_shape: " + bf16_shape_name(shape) +
          " (rows a warp/warps/chunks/stages) is not compiled for n = " + std::to_string(n));
  }
  g_bf16_forced[slot] = shape;
}

void set_bf16_block_rows(int block_rows) {
  if (block_rows < 0)
    throw std::invalid_argument("set_bf16_block_rows: " + std::to_string(block_rows) +
                                " rows, expected 0 (the launcher's choice) or more");
  g_bf16_block_rows_forced = block_rows;
}

void set_bf16_balanced(bool on) { g_bf16_balanced = on; }

std::string bf16_shape_name(const Bf16Shape& s) {
  return std::to_string(s.rows_per_warp) + "/" + std::to_string(s.warps) + "/" +
         std::to_string(s.chunks) + "/" + std::to_string(s.stages) + (s.weight_ring ? "+w" : "");
}

std::vector<Bf16Shape> bf16_shapes(int n) {
  std::vector<Bf16Shape> out;
  dispatch(n, [&](auto tag) {
    constexpr int N = decltype(tag)::value;
    out = shapes_of(typename Bf16Compiled<N>::Codes{});
  });
  return out;
}
}  // namespace detail

}  // namespace deltafin::cuda
