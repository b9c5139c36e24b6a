// Gated MLA's absorbed attention at decode on the GPU (decode_ops.h: mla_absorbed): q̂ from the
// heads' W_UK, the scores over the latent cache, the softmax, the mix of latents in fixed chunks
// and the heads' W_UV outputs. Each reduction's shape does not depend on the number of rows;
// decode_order_ref.cc performs the same operations on the CPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/decode_ops.h"
#include "cuda/decode_ops_common.cuh"
#include "cuda/gemv_common.cuh"
#include "cuda/gemv_launch.cuh"
#include "cuda/portable_math.h"

namespace deltafin::cuda {
namespace {

using decode_detail::aligned16;
using decode_detail::bad;
using decode_detail::check_launch;
using decode_detail::fma4;
using decode_detail::kNegInf;
using gemv::kFullMask;
using gemv::scatter_sums;
using gemv::warp_sum;

// Runtime dims (MlaGpuShape): rank % 8 == 0 and <= 512, rope even and <= 64, v % 8 == 0. With K3's
// (512, 128, 64, 128) every lane and thread below is busy; smaller models leave the tail idle
// (zeros that add nothing), so the order of each sum is the same generalized one.
struct MlaDims {
  int rank, nope, rope, v;
};
constexpr int kMlaMaxRank = 512;

// Block (head h, row r), rank/2 threads: thread t owns latent columns 2t, 2t+1 of q̂ and walks the
// head's nope W_UK rows in order: q̂_c = fma(q_nope_i, W_UK[i, c], q̂_c). The loads of 16 rows are
// issued before their FMAs. (With 4 columns a thread and the loads one at a time, the 96 heads'
// 4 warps an SM waited on each load.)
__global__ void __launch_bounds__(kMlaMaxRank / 2)
    mla_qhat(const uint16_t* kv_b, const float* q, int nh, MlaDims d, float* qhat) {
  const int h = blockIdx.x, r = blockIdx.y, t = threadIdx.x;
  const float* qh = q + (static_cast<int64_t>(r) * nh + h) * (d.nope + d.rope);
  const uint16_t* w = kv_b + static_cast<int64_t>(h) * (d.nope + d.v) * d.rank + 2 * t;
  float a0 = 0.f, a1 = 0.f;
  constexpr int kAhead = 16;  // rows whose loads are in flight together
  for (int i0 = 0; i0 < d.nope; i0 += kAhead) {
    uint32_t wb[kAhead];
    float qi[kAhead];
#pragma unroll
    for (int k = 0; k < kAhead; ++k)
      if (i0 + k < d.nope) {
        wb[k] = __ldg(reinterpret_cast<const uint32_t*>(w + static_cast<int64_t>(i0 + k) * d.rank));
        qi[k] = qh[i0 + k];
      }
#pragma unroll
    for (int k = 0; k < kAhead; ++k)
      if (i0 + k < d.nope) {
        a0 = __fmaf_rn(qi[k], __uint_as_float(wb[k] << 16), a0);
        a1 = __fmaf_rn(qi[k], __uint_as_float(wb[k] & 0xffff0000u), a1);
      }
  }
  reinterpret_cast<float2*>(qhat + (static_cast<int64_t>(r) * nh + h) * d.rank)[t] =
      make_float2(a0, a1);
}

// Scores: for each (position s, head h, row r), lane l takes the latent float4s l + 32m for m =
// 0..3 that exist (one fma4 chain) and the k_pe elements 2l, 2l+1 that exist (a second chain);
// both are summed over the warp by the xor butterfly of warp_sum; score = (nope + pe) · scale.
// Block (16 heads, 32 positions, row r), 8 warps: the positions' latents and k_pe are staged in
// shared memory once for the 16 heads; the head groups of one position tile are adjacent blocks,
// so the tile is read from HBM about once per row. A warp takes 2 heads (q̂ and q_pe in
// registers) and 8 positions at a time, so each latent read from shared memory serves both heads,
// and sums the 16 chains of each kind by a reduce-scatter (scatter_sums), whose additions are the
// butterfly's: 16 + 1 shuffles for 16 sums instead of 80. (One warp a position and head, with a
// butterfly each, stalled on its shuffles and shared loads.)
constexpr int kScorePositions = 32;
constexpr int kScoreHeads = 16;
constexpr int kScoreBatch = 8;  // positions a warp sums at once

int score_smem_bytes(const MlaDims& d) { return kScorePositions * (d.rank + d.rope) * 4; }

__global__ void __launch_bounds__(256)
    mla_scores(const float* qhat, const float* q, const float* latent, const float* k_pe, int nh,
               MlaDims d, int64_t n_positions, int n, float scale, float* scores) {
  extern __shared__ float4 sm4[];
  const int r4 = d.rank / 4;
  float4* lat = sm4;                                                  // [32][rank/4] float4
  float* kpe = reinterpret_cast<float*>(sm4 + kScorePositions * r4);  // [32][rope]
  const int r = blockIdx.z, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t len = n_positions - n + r + 1;
  const int64_t s0 = blockIdx.y * int64_t{kScorePositions};
  if (s0 >= len) return;  // the whole block
  const int cnt = len - s0 < kScorePositions ? static_cast<int>(len - s0) : kScorePositions;
  const float4* src = reinterpret_cast<const float4*>(latent + s0 * d.rank);
  for (int k = threadIdx.x; k < cnt * r4; k += 256) lat[k] = __ldg(src + k);
  for (int k = threadIdx.x; k < cnt * d.rope; k += 256) kpe[k] = __ldg(k_pe + s0 * d.rope + k);
  __syncthreads();
  const int h_end = (blockIdx.x + 1) * kScoreHeads < nh ? (blockIdx.x + 1) * kScoreHeads : nh;
  const int h0 = blockIdx.x * kScoreHeads + 2 * warp;  // this warp's heads: h0 and h0 + 1
  if (h0 >= h_end) return;                             // the whole warp
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  const bool pe_lane = 2 * lane < d.rope;
  float4 qa[2][kMlaMaxRank / 128];
  float qp[2][2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const bool real = h0 + hh < h_end;  // a second head of zeros computes sums nobody stores
    const int64_t rh = static_cast<int64_t>(r) * nh + h0 + hh;
    const float4* qh4 = reinterpret_cast<const float4*>(qhat + rh * d.rank);
#pragma unroll
    for (int m = 0; m < kMlaMaxRank / 128; ++m)
      qa[hh][m] = real && lane + 32 * m < r4 ? qh4[lane + 32 * m] : zero;
    const float* qpe = q + rh * (d.nope + d.rope) + d.nope;
    qp[hh][0] = real && pe_lane ? qpe[2 * lane] : 0.0f;
    qp[hh][1] = real && pe_lane ? qpe[2 * lane + 1] : 0.0f;
  }
  for (int b = 0; b < cnt; b += kScoreBatch) {
    float p[2 * kScoreBatch], pe[2 * kScoreBatch];  // [head][position of the batch]
#pragma unroll
    for (int j = 0; j < kScoreBatch; ++j) {
      p[j] = p[kScoreBatch + j] = pe[j] = pe[kScoreBatch + j] = 0.0f;
      if (b + j >= cnt) continue;  // the same for the whole warp; its sums are not stored
      const int pos = b + j;
#pragma unroll
      for (int m = 0; m < kMlaMaxRank / 128; ++m)
        if (lane + 32 * m < r4) {
          const float4 a = lat[pos * r4 + lane + 32 * m];
          p[j] = fma4(qa[0][m], a, p[j]);
          p[kScoreBatch + j] = fma4(qa[1][m], a, p[kScoreBatch + j]);
        }
      if (pe_lane) {
        const float2 k2 = reinterpret_cast<const float2*>(kpe + pos * d.rope)[lane];
        pe[j] = __fmaf_rn(qp[0][1], k2.y, __fmaf_rn(qp[0][0], k2.x, 0.0f));
        pe[kScoreBatch + j] = __fmaf_rn(qp[1][1], k2.y, __fmaf_rn(qp[1][0], k2.x, 0.0f));
      }
    }
    const float nope_sum = scatter_sums<32>(p, lane), pe_sum = scatter_sums<32>(pe, lane);
    const int hh = lane / 16, j = (lane / 2) % kScoreBatch;  // the sum this lane holds
    if (lane % 2 == 0 && b + j < cnt && h0 + hh < h_end)
      scores[(static_cast<int64_t>(r) * nh + h0 + hh) * n_positions + s0 + b + j] =
          __fmul_rn(__fadd_rn(nope_sum, pe_sum), scale);
  }
}

// Block (head h, row r), 1024 threads: the softmax over the row's positions, in place. The max
// (its value does not depend on the order of the comparisons: of two zeros either sign gives the
// same e^(s−max)) and e^(s−max) elementwise use every thread; the sum keeps its fixed shape, thread
// t < kSoftmaxSumThreads adding positions t, t+128, ... in order, warp_sum, the four warp totals in
// order; then each weight is divided by that sum. (With 128 threads doing all of it, 96 heads
// kept four warps an SM waiting on their loads.)
constexpr int kSoftmaxThreads = 1024;
constexpr int kSoftmaxSumThreads = 128;

__global__ void __launch_bounds__(kSoftmaxThreads)
    mla_softmax(int nh, int64_t n_positions, int n, float* scores) {
  __shared__ float red[kSoftmaxThreads / 32];
  __shared__ float total;
  const int h = blockIdx.x, r = blockIdx.y, t = threadIdx.x, warp = t / 32;
  const int64_t len = n_positions - n + r + 1;
  float* p = scores + (static_cast<int64_t>(r) * nh + h) * n_positions;
  float m = kNegInf;
  for (int64_t s = t; s < len; s += kSoftmaxThreads) m = p[s] > m ? p[s] : m;
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, off));
  if (t % 32 == 0) red[warp] = m;
  __syncthreads();
  m = red[0];
  for (int w = 1; w < kSoftmaxThreads / 32; ++w) m = fmaxf(m, red[w]);
  for (int64_t s = t; s < len; s += kSoftmaxThreads) p[s] = pm::exp_f32(__fsub_rn(p[s], m));
  __syncthreads();  // every e is stored, and everyone has read red[] for the max
  if (t < kSoftmaxSumThreads) {
    float sum = 0.0f;
#pragma unroll 8
    for (int64_t s = t; s < len; s += kSoftmaxSumThreads) sum = __fadd_rn(sum, p[s]);
    sum = warp_sum(sum);
    if (t % 32 == 0) red[warp] = sum;
  }
  __syncthreads();
  if (t == 0) total = __fadd_rn(__fadd_rn(__fadd_rn(red[0], red[1]), red[2]), red[3]);
  __syncthreads();
  for (int64_t s = t; s < len; s += kSoftmaxThreads) p[s] = __fdiv_rn(p[s], total);
}

// ō in chunks of kMlaChunk positions (absolute: chunk c holds positions [c·256, c·256 + 256), so
// the split never depends on n), the chunk sums added in chunk order by mla_mix_combine. Block
// (chunk, group of H heads, row r), rank/4 threads: thread t owns latent columns 4t..4t+3 of each
// of the group's heads and adds fma(p_s, latent_s, part) over the chunk's positions in order, so a
// position's latent is read once for H heads (a block a head read a long cache once per head:
// half of a 32K-position call's time). The group's weights of the chunk are staged in shared
// memory ([position][H]). Every output's chain is the same whatever H is.
constexpr int kMlaChunk = 256;

template <int H>
__global__ void __launch_bounds__(128)
    mla_mix_partial(const float* latent, int nh, int rank, int64_t n_positions, int n,
                    const float* scores, int64_t chunks, float* parts) {
  __shared__ __align__(16) float ws[kMlaChunk * H];
  const int h0 = blockIdx.y * H, r = blockIdx.z, t = threadIdx.x;
  const int64_t len = n_positions - n + r + 1;
  const int64_t s0 = blockIdx.x * int64_t{kMlaChunk};
  if (s0 >= len) return;  // the whole block
  const int cnt = len - s0 < kMlaChunk ? static_cast<int>(len - s0) : kMlaChunk;
  // Consecutive threads read consecutive positions of one head's scores.
  for (int k = t; k < cnt * H; k += static_cast<int>(blockDim.x)) {
    const int hh = k / cnt, j = k % cnt;
    const int h = h0 + hh;
    ws[j * H + hh] =
        h < nh ? scores[(static_cast<int64_t>(r) * nh + h) * n_positions + s0 + j] : 0.0f;
  }
  __syncthreads();
  float4 o[H];
#pragma unroll
  for (int hh = 0; hh < H; ++hh) o[hh] = make_float4(0.f, 0.f, 0.f, 0.f);
  const float4* src = reinterpret_cast<const float4*>(latent + s0 * rank) + t;
  const int r4 = rank / 4;
#pragma unroll 2
  for (int j = 0; j < cnt; ++j) {
    const float4 a = __ldg(src + static_cast<int64_t>(j) * r4);
#pragma unroll
    for (int hh = 0; hh < H; ++hh) {
      const float w = ws[j * H + hh];
      o[hh].x = __fmaf_rn(w, a.x, o[hh].x);
      o[hh].y = __fmaf_rn(w, a.y, o[hh].y);
      o[hh].z = __fmaf_rn(w, a.z, o[hh].z);
      o[hh].w = __fmaf_rn(w, a.w, o[hh].w);
    }
  }
#pragma unroll
  for (int hh = 0; hh < H; ++hh) {
    if (h0 + hh >= nh) break;
    reinterpret_cast<float4*>(
        parts + ((static_cast<int64_t>(r) * nh + h0 + hh) * chunks + blockIdx.x) * rank)[t] = o[hh];
  }
}

// Heads a mix block takes: the most of 8, 4, 2 whose grid still gives every SM two blocks, else 1
// (short contexts: few chunks, so the heads supply the blocks). It picked the fastest at 1K, 8K
// and 32K positions on an H200 and an H100, where 16 heads (94 registers) and a thread a column
// with 8-32 heads were slower (docs/PERFORMANCE.md). The test and the bench may force it
// (detail::set_mla_mix_heads).
int g_forced_mix_heads = 0;

int mix_heads(int64_t chunks, int64_t nh, int64_t n) {
  if (g_forced_mix_heads != 0) return g_forced_mix_heads;
  for (int h = 8; h > 1; h /= 2)
    if (chunks * ((nh + h - 1) / h) * n >= 2 * int64_t{gemv::device_sms()}) return h;
  return 1;
}

template <typename F>
void with_mix_heads(int h, F&& f) {
  gemv::with_constant<8, 4, 2, 1>(h, f);
}

// Block (head h, row r), rank/4 threads: ō = the row's chunk sums added in chunk order.
__global__ void __launch_bounds__(128)
    mla_mix_combine(int nh, int rank, int64_t n_positions, int n, int64_t chunks,
                    const float* parts, float* obar) {
  const int h = blockIdx.x, r = blockIdx.y, t = threadIdx.x;
  const int64_t len = n_positions - n + r + 1;
  const int64_t used = (len + kMlaChunk - 1) / kMlaChunk;
  const float4* part =
      reinterpret_cast<const float4*>(parts + (static_cast<int64_t>(r) * nh + h) * chunks * rank) +
      t;
  float4 o = part[0];
#pragma unroll 8
  for (int64_t c = 1; c < used; ++c) {
    const float4 a = part[c * (rank / 4)];
    o.x = __fadd_rn(o.x, a.x);
    o.y = __fadd_rn(o.y, a.y);
    o.z = __fadd_rn(o.z, a.z);
    o.w = __fadd_rn(o.w, a.w);
  }
  reinterpret_cast<float4*>(obar + (static_cast<int64_t>(r) * nh + h) * rank)[t] = o;
}

// One warp per (output channel c of head h, row r): the BF16 GEMV order of gemv.h (lane l takes
// the 8-value chunks l, l + 32, ... of the W_UV row, one fma chain, then warp_sum).
__global__ void __launch_bounds__(256)
    mla_out(const uint16_t* kv_b, const float* obar, int nh, MlaDims d, float* o) {
  const int h = blockIdx.y, r = blockIdx.z, lane = threadIdx.x % 32;
  const int c = blockIdx.x * 8 + threadIdx.x / 32;
  const uint16_t* w =
      kv_b + (static_cast<int64_t>(h) * (d.nope + d.v) + d.nope + c) * static_cast<int64_t>(d.rank);
  const float* x = obar + (static_cast<int64_t>(r) * nh + h) * d.rank;
  float acc = 0.0f;
  for (int chunk = lane; chunk < d.rank / 8; chunk += 32) {
    const uint4 wb = __ldg(reinterpret_cast<const uint4*>(w + chunk * 8));
    const float4 a = reinterpret_cast<const float4*>(x + chunk * 8)[0];
    const float4 b = reinterpret_cast<const float4*>(x + chunk * 8)[1];
    acc = __fmaf_rn(__uint_as_float(wb.x << 16), a.x, acc);
    acc = __fmaf_rn(__uint_as_float(wb.x & 0xffff0000u), a.y, acc);
    acc = __fmaf_rn(__uint_as_float(wb.y << 16), a.z, acc);
    acc = __fmaf_rn(__uint_as_float(wb.y & 0xffff0000u), a.w, acc);
    acc = __fmaf_rn(__uint_as_float(wb.z << 16), b.x, acc);
    acc = __fmaf_rn(__uint_as_float(wb.z & 0xffff0000u), b.y, acc);
    acc = __fmaf_rn(__uint_as_float(wb.w << 16), b.z, acc);
    acc = __fmaf_rn(__uint_as_float(wb.w & 0xffff0000u), b.w, acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) o[(static_cast<int64_t>(r) * nh + h) * d.v + c] = acc;
}

}  // namespace

int64_t mla_absorbed_gpu_scratch_floats(const MlaGpuShape& sh, int64_t n, int64_t n_positions) {
  const int64_t chunks = (n_positions + kMlaChunk - 1) / kMlaChunk;
  return n * sh.n_heads * (2 * sh.rank + n_positions + chunks * sh.rank) + 4;
}

void mla_absorbed(const MlaGpuShape& sh, const uint16_t* kv_b, const float* latent,
                  const float* k_pe, int64_t n_positions, const float* q, int64_t n, float* scratch,
                  float* o, cudaStream_t stream) {
  const char* what = "cuda::mla_absorbed";
  if (sh.n_heads < 1 || sh.n_heads > 65535) bad(what, "n_heads", sh.n_heads, "1..65535");
  if (sh.rank < 8 || sh.rank > kMlaMaxRank || sh.rank % 8 != 0)
    bad(what, "rank", sh.rank, "a multiple of 8 up to 512");
  if (sh.nope < 1 || sh.nope > 4096) bad(what, "nope", sh.nope, "1..4096");
  if (sh.rope < 0 || sh.rope > 64 || sh.rope % 2 != 0)
    bad(what, "rope", sh.rope, "an even number up to 64");
  if (sh.v < 8 || sh.v % 8 != 0 || sh.v > 8 * 65535) bad(what, "v", sh.v, "a multiple of 8");
  if (n < 0 || n > 65535) bad(what, "n", n, "0..65535");
  if (n_positions < n || n_positions > INT32_MAX)
    bad(what, "n_positions", n_positions, "n..2^31-1");
  if (!aligned16(kv_b) || !aligned16(latent) || !aligned16(q) || !aligned16(scratch))
    throw std::invalid_argument(std::string(what) +
                                ": kv_b, latent, q and scratch must be 16-byte aligned");
  if (n == 0) return;
  const MlaDims d{static_cast<int>(sh.rank), static_cast<int>(sh.nope), static_cast<int>(sh.rope),
                  static_cast<int>(sh.v)};
  const auto nh = static_cast<unsigned>(sh.n_heads), nr = static_cast<unsigned>(n);
  const auto threads = static_cast<unsigned>(d.rank / 4);
  float* qhat = scratch;
  float* obar = qhat + n * sh.n_heads * sh.rank;
  float* scores = obar + n * sh.n_heads * sh.rank;
  const int64_t chunks = (n_positions + kMlaChunk - 1) / kMlaChunk;
  float* parts = scores + n * sh.n_heads * n_positions;
  // parts must be 16-byte aligned: pad the scores to a multiple of 4 floats in the offset.
  parts += (4 - (n * sh.n_heads * n_positions) % 4) % 4;
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.nope + sh.rope));
  mla_qhat<<<dim3(nh, nr), static_cast<unsigned>(d.rank / 2), 0, stream>>>(
      kv_b, q, static_cast<int>(nh), d, qhat);
  // Above 48 KB of dynamic shared memory a kernel must opt in; once (for the largest) suffices.
  static const cudaError_t attr =
      cudaFuncSetAttribute(mla_scores, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           score_smem_bytes(MlaDims{kMlaMaxRank, 0, 64, 0}));
  if (attr != cudaSuccess)
    throw std::runtime_error(std::string(what) +
                             ": shared memory refused: " + cudaGetErrorString(attr));
  mla_scores<<<dim3((nh + kScoreHeads - 1) / kScoreHeads,
                    static_cast<unsigned>((n_positions + kScorePositions - 1) / kScorePositions),
                    nr),
               256, score_smem_bytes(d), stream>>>(qhat, q, latent, k_pe, static_cast<int>(nh), d,
                                                   n_positions, static_cast<int>(n), scale, scores);
  mla_softmax<<<dim3(nh, nr), kSoftmaxThreads, 0, stream>>>(static_cast<int>(nh), n_positions,
                                                            static_cast<int>(n), scores);
  with_mix_heads(mix_heads(chunks, sh.n_heads, n), [&](auto tag) {
    constexpr int H = decltype(tag)::value;
    const auto groups = static_cast<unsigned>((sh.n_heads + H - 1) / H);
    mla_mix_partial<H><<<dim3(static_cast<unsigned>(chunks), groups, nr), threads, 0, stream>>>(
        latent, static_cast<int>(nh), d.rank, n_positions, static_cast<int>(n), scores, chunks,
        parts);
  });
  mla_mix_combine<<<dim3(nh, nr), threads, 0, stream>>>(static_cast<int>(nh), d.rank, n_positions,
                                                        static_cast<int>(n), chunks, parts, obar);
  mla_out<<<dim3(static_cast<unsigned>(d.v / 8), nh, nr), 256, 0, stream>>>(
      kv_b, obar, static_cast<int>(nh), d, o);
  check_launch(what, 6);
}

namespace detail {
void set_mla_mix_heads(int heads) {
  if (heads != 0 && heads != 1 && heads != 2 && heads != 4 && heads != 8)
    throw std::invalid_argument("set_mla_mix_heads: heads is " + std::to_string(heads) +
                                ", expected 0 (the choice by grid size), 1, 2, 4 or 8");
  g_forced_mix_heads = heads;
}
}  // namespace detail

}  // namespace deltafin::cuda
