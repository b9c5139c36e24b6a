// The MXFP4 and BF16 GEMV/small-batch kernels and their launchers. A block of 4 warps owns 8
// weight rows (2 per warp) and walks the columns in tiles: the tile's activations are staged once
// in padded shared memory (conflict-free float4 reads), each lane loads one 16-byte piece of each
// of its rows, and the next tile's weights are loaded before this tile's math so HBM stays busy.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/gemv.h"
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

// Warps per block; a macro only so the benchmark can compare block shapes in one run.
#ifndef DELTAFIN_CUDA_GEMV_WARPS
#define DELTAFIN_CUDA_GEMV_WARPS 4
#endif
constexpr int kWarps = DELTAFIN_CUDA_GEMV_WARPS;
constexpr int kThreads = kWarps * 32;
// Two weight rows per warp: each activation read from shared memory serves both.
template <int N>
__host__ __device__ constexpr int rows_per_warp() {
  return 2;
}
template <int N>
__host__ __device__ constexpr int rows_per_block() {
  return kWarps * rows_per_warp<N>();
}
constexpr unsigned kFullMask = 0xffffffffu;

// MXFP4 tile: one 32-value group per lane = 1024 columns; a group's 32 floats sit 36 apart in
// shared memory (the 4-float pad makes the 8 lanes of a float4 phase hit distinct banks).
constexpr int kMxTileGroups = 32;
constexpr int kMxGroupStride = 36;
// BF16 tile: two 8-value (16-byte) chunks per lane = 512 columns; a chunk's 8 floats sit 12 apart.
constexpr int kBfChunksPerLane = 2;
constexpr int kBfTileChunks = 32 * kBfChunksPerLane;
constexpr int kBfChunkStride = 12;

// E2M1 code (low 4 bits of `nibble`) to its value without a table (a shared-memory lookup per
// weight was the MXFP4 kernel's bottleneck): the 3 magnitude bits placed at float bits 22-24 read
// as 2^-126 times the value (0.5 is the subnormal 2^-127), so one exact multiply by 2^126 fixes it.
__device__ __forceinline__ float e2m1_to_f32(uint32_t nibble) {
  const uint32_t bits = ((nibble & 7u) << 22) | ((nibble & 8u) << 28);
  return __fmul_rn(__uint_as_float(bits), 0x1p126f);
}

__device__ __forceinline__ float e8m0_to_f32(uint32_t s) {
  // 2^(s-127): the exponent field for s >= 1, the subnormal 2^-127 for s = 0, NaN for 255.
  if (s == 255u) return __uint_as_float(0x7fc00000u);
  return s == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(s << 23);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

// v + w[0]·a.x + ... + w[7]·b.w, one fused multiply-add at a time in this order: the order the
// CPU emulation (gemv_order_ref.cc) reproduces, shared by the MXFP4 and BF16 kernels.
__device__ __forceinline__ float fma8(const float (&w)[8], float4 a, float4 b, float v) {
  v = __fmaf_rn(w[0], a.x, v);
  v = __fmaf_rn(w[1], a.y, v);
  v = __fmaf_rn(w[2], a.z, v);
  v = __fmaf_rn(w[3], a.w, v);
  v = __fmaf_rn(w[4], b.x, v);
  v = __fmaf_rn(w[5], b.y, v);
  v = __fmaf_rn(w[6], b.z, v);
  return __fmaf_rn(w[7], b.w, v);
}

// Each lane's partial sums reduced across the warp; lane 0 stores the rows and activations that
// exist (y is [n, rows], activation-major).
template <int N, int kRowsPerWarp>
__device__ __forceinline__ void store_rows(const float (&acc)[kRowsPerWarp][N], int lane, int n,
                                           int rows, int row0, float* y) {
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float v = warp_sum(acc[r][i]);
      if (lane == 0 && i < n && row0 + r < rows) y[static_cast<int64_t>(i) * rows + row0 + r] = v;
    }
  }
}

__device__ __forceinline__ uint4 load_stream(const void* p) {
  // Weights are read once per pass: don't let them evict the activations from L1.
  return __ldcs(reinterpret_cast<const uint4*>(p));
}

template <int N>
__global__ void __launch_bounds__(kThreads)
    mxfp4_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales, int rows,
                 int cols, const float* __restrict__ x, int n, float* __restrict__ y) {
  constexpr int kRowsPerWarp = rows_per_warp<N>();
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);  // [N][kMxTileGroups][kMxGroupStride]

  const int lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * rows_per_block<N>() + (threadIdx.x / 32) * kRowsPerWarp;
  const int groups = cols / 32;
  const int tiles = (groups + kMxTileGroups - 1) / kMxTileGroups;
  const int64_t row_bytes = cols / 2;

  uint4 w[kRowsPerWarp];
  uint32_t s[kRowsPerWarp];
  auto load = [&](int tile) {
    const int g = tile * kMxTileGroups + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = row0 + r;
      if (row < rows && g < groups) {
        w[r] = load_stream(packed + row * row_bytes + g * 16);
        s[r] = scales[static_cast<int64_t>(row) * groups + g];
      } else {
        w[r] = make_uint4(0, 0, 0, 0);
        s[r] = 127;
      }
    }
  };

  float acc[kRowsPerWarp][N];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[r][i] = 0.0f;

  load(0);
  for (int t = 0; t < tiles; ++t) {
    __syncthreads();  // the previous tile's activations are no longer read
    for (int q = threadIdx.x; q < N * kMxTileGroups * 8; q += kThreads) {
      const int i = q / (kMxTileGroups * 8), g = (q / 8) % kMxTileGroups, part = q % 8;
      const int gg = t * kMxTileGroups + g;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < n && gg < groups)
        v = __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(i) * cols + gg * 32) +
                  part);
      reinterpret_cast<float4*>(xs + (i * kMxTileGroups + g) * kMxGroupStride)[part] = v;
    }
    __syncthreads();
    uint4 wc[kRowsPerWarp];
    uint32_t sc[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) wc[r] = w[r], sc[r] = s[r];
    if (t + 1 < tiles) load(t + 1);
    if (t * kMxTileGroups + lane >= groups) continue;  // past the row's end: adds nothing

    float p[kRowsPerWarp][N];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int i = 0; i < N; ++i) p[r][i] = 0.0f;
#pragma unroll 1
    for (int k = 0; k < 4; ++k) {
      float wv[kRowsPerWarp][8];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const uint32_t word = k == 0 ? wc[r].x : k == 1 ? wc[r].y : k == 2 ? wc[r].z : wc[r].w;
#pragma unroll
        for (int j = 0; j < 8; ++j) wv[r][j] = e2m1_to_f32(word >> (4 * j));
      }
      // Each activation float4 pair is read from shared memory once for all of the warp's rows.
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float4* xg =
            reinterpret_cast<const float4*>(xs + (i * kMxTileGroups + lane) * kMxGroupStride);
        const float4 a = xg[2 * k], b = xg[2 * k + 1];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) p[r][i] = fma8(wv[r], a, b, p[r][i]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float scale = e8m0_to_f32(sc[r]);
#pragma unroll
      for (int i = 0; i < N; ++i) acc[r][i] = __fmaf_rn(p[r][i], scale, acc[r][i]);
    }
  }

  store_rows<N, kRowsPerWarp>(acc, lane, n, rows, row0, y);
}

template <int N>
__global__ void __launch_bounds__(kThreads)
    bf16_kernel(const uint16_t* __restrict__ wbits, int rows, int cols, const float* __restrict__ x,
                int n, float* __restrict__ y) {
  constexpr int kRowsPerWarp = rows_per_warp<N>();
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);  // [N][kBfTileChunks][kBfChunkStride]

  const int lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * rows_per_block<N>() + (threadIdx.x / 32) * kRowsPerWarp;
  const int chunks = cols / 8;
  const int tiles = (chunks + kBfTileChunks - 1) / kBfTileChunks;

  uint4 w[kRowsPerWarp][kBfChunksPerLane];
  auto load = [&](int tile) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int u = 0; u < kBfChunksPerLane; ++u) {
        const int c = tile * kBfTileChunks + u * 32 + lane;
        const int row = row0 + r;
        w[r][u] = (row < rows && c < chunks)
                      ? load_stream(wbits + static_cast<int64_t>(row) * cols + c * 8)
                      : make_uint4(0, 0, 0, 0);
      }
    }
  };

  float acc[kRowsPerWarp][N];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[r][i] = 0.0f;

  load(0);
  for (int t = 0; t < tiles; ++t) {
    __syncthreads();
    for (int q = threadIdx.x; q < N * kBfTileChunks * 2; q += kThreads) {
      const int i = q / (kBfTileChunks * 2), c = (q / 2) % kBfTileChunks, part = q % 2;
      const int cc = t * kBfTileChunks + c;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < n && cc < chunks)
        v = __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(i) * cols + cc * 8) +
                  part);
      reinterpret_cast<float4*>(xs + (i * kBfTileChunks + c) * kBfChunkStride)[part] = v;
    }
    __syncthreads();
    uint4 wc[kRowsPerWarp][kBfChunksPerLane];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int u = 0; u < kBfChunksPerLane; ++u) wc[r][u] = w[r][u];
    if (t + 1 < tiles) load(t + 1);

#pragma unroll
    for (int u = 0; u < kBfChunksPerLane; ++u) {
      if (t * kBfTileChunks + u * 32 + lane >= chunks) break;  // chunks are taken in order
      float wv[kRowsPerWarp][8];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const uint32_t words[4] = {wc[r][u].x, wc[r][u].y, wc[r][u].z, wc[r][u].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          wv[r][2 * k] = __uint_as_float(words[k] << 16);
          wv[r][2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
        }
      }
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float4* xc = reinterpret_cast<const float4*>(
            xs + (i * kBfTileChunks + u * 32 + lane) * kBfChunkStride);
        const float4 a = xc[0], b = xc[1];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[r][i] = fma8(wv[r], a, b, acc[r][i]);
      }
    }
  }

  store_rows<N, kRowsPerWarp>(acc, lane, n, rows, row0, y);
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) +
                             ": CUDA launch failed: " + cudaGetErrorString(err));
}

void check_shape(const char* what, int64_t rows, int64_t cols, int64_t n, int64_t col_multiple,
                 const void* weights, const float* x, const float* y) {
  const std::string w(what);
  if (rows <= 0 || rows > INT32_MAX)
    throw std::invalid_argument(w + ": rows is " + std::to_string(rows) + ", expected 1..2^31-1");
  if (cols <= 0 || cols > INT32_MAX || cols % col_multiple != 0)
    throw std::invalid_argument(w + ": cols is " + std::to_string(cols) +
                                ", expected a positive multiple of " +
                                std::to_string(col_multiple));
  if (n < 0) throw std::invalid_argument(w + ": n is " + std::to_string(n) + ", expected >= 0");
  if (reinterpret_cast<uintptr_t>(weights) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    throw std::invalid_argument(w + ": weights and x must be 16-byte aligned device pointers");
  if (weights == nullptr || x == nullptr || y == nullptr)
    throw std::invalid_argument(w + ": null device pointer");
}

template <int N, typename Kernel, typename... Args>
void launch(Kernel kernel, int smem_per_row_bytes, int64_t rows, cudaStream_t stream,
            Args... args) {
  const int smem = N * smem_per_row_bytes;
  // Above 48 KB of dynamic shared memory a kernel must opt in; once per instantiation suffices.
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    throw std::runtime_error(std::string("cuda::matmul: shared memory of ") + std::to_string(smem) +
                             " bytes refused: " + cudaGetErrorString(attr));
  const int blocks = static_cast<int>((rows + rows_per_block<N>() - 1) / rows_per_block<N>());
  kernel<<<blocks, kThreads, smem, stream>>>(args...);
  count_launches(1);
}

// The instantiation for n rows: any N >= n computes the same bits for rows < n, so n is rounded
// up to a power of two to keep the number of compiled variants small.
template <typename F>
void dispatch(int64_t n, F&& f) {
  if (n <= 1)
    f(std::integral_constant<int, 1>{});
  else if (n <= 2)
    f(std::integral_constant<int, 2>{});
  else if (n <= 4)
    f(std::integral_constant<int, 4>{});
  else if (n <= 8)
    f(std::integral_constant<int, 8>{});
  else
    f(std::integral_constant<int, 16>{});
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
    dispatch(nb, [&](auto tag) {
      constexpr int N = decltype(tag)::value;
      launch<N>(mxfp4_kernel<N>, kMxTileGroups * kMxGroupStride * 4, w.rows, stream, w.packed,
                w.scales, rows, cols, xb, nb, yb);
    });
  }
  check_launch("cuda::matmul(MXFP4)");
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
      launch<N>(bf16_kernel<N>, kBfTileChunks * kBfChunkStride * 4, w.rows, stream, w.data, rows,
                cols, xb, nb, yb);
    });
  }
  check_launch("cuda::matmul(BF16)");
}

}  // namespace deltafin::cuda
