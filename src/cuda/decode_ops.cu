// The decode layer's block math (decode_ops.h) but MLA's (decode_ops_mla.cu). Every reduction has a
// fixed shape that does not depend on the number of rows: a lane's sequential fused multiply-add
// chain, the xor butterfly across the warp, then warp totals added in warp order by one thread.
// decode_order_ref.cc performs the same operations on the CPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/decode_ops.h"
#include "cuda/decode_ops_common.cuh"
#include "cuda/gemv_common.cuh"
#include "cuda/gemv_launch.cuh"
#include "cuda/op_count.h"
#include "cuda/portable_math.h"

namespace deltafin::cuda {
namespace {

using decode_detail::aligned16;
using decode_detail::bad;
using decode_detail::check_launch;
using decode_detail::fma4;
using decode_detail::kNegInf;
using gemv::kFullMask;
using gemv::warp_sum;

constexpr int kMaxSources = 64;  // kernels::kAttnResMaxBlocks + 1

// ---- SiTU -------------------------------------------------------------------------------------

__global__ void situ_kernel(const float* g, const float* u, int64_t n, float beta,
                            float linear_beta, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = pm::situ_f32(g[i], u[i], beta, linear_beta);
}

// ---- AttnRes ----------------------------------------------------------------------------------

constexpr int kResThreads = 256;

// The scores in chunks of 1024 columns (256 float4s): block (chunk q, source i, row r), thread t
// takes the float4 q·256 + t (one fma4 chain each for v·key and v·v), warp_sum, warp totals in
// warp order; the chunk totals land in scratch [r][i][q][2]. Many small blocks: at decode (n = 1)
// the 9 x 7168 sources of K3's output mix are 63 blocks reading everything in one round trip.
constexpr int kResChunk = 4 * kResThreads;  // columns per chunk

__global__ void __launch_bounds__(kResThreads)
    attn_res_scores(const float* key, const float* blocks, int n_blocks, int64_t block_stride,
                    const float* prefix, int64_t hidden, float* parts) {
  __shared__ float part_dk[kResThreads / 32], part_ss[kResThreads / 32];
  const int q = blockIdx.x, i = blockIdx.y, r = blockIdx.z;
  const int64_t chunks = gridDim.x;
  const float* v = (i < n_blocks ? blocks + i * block_stride : prefix) + r * hidden;
  const int64_t c = q * int64_t{kResThreads} + threadIdx.x;
  float dk = 0.0f, ss = 0.0f;
  if (c < hidden / 4) {
    const float4 a = reinterpret_cast<const float4*>(v)[c];
    const float4 b = __ldg(reinterpret_cast<const float4*>(key) + c);
    dk = fma4(a, b, 0.0f);
    ss = fma4(a, a, 0.0f);
  }
  dk = warp_sum(dk);
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) part_dk[threadIdx.x / 32] = dk, part_ss[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float tdk = part_dk[0], tss = part_ss[0];
    for (int w = 1; w < kResThreads / 32; ++w) tdk = __fadd_rn(tdk, part_dk[w]);
    for (int w = 1; w < kResThreads / 32; ++w) tss = __fadd_rn(tss, part_ss[w]);
    float* out = parts + ((static_cast<int64_t>(r) * kMaxSources + i) * chunks + q) * 2;
    out[0] = tdk;
    out[1] = tss;
  }
}

// Block (column chunk, row r): thread 0 adds each source's chunk totals in chunk order, forms
// s_i = dk / sqrt(ss/hidden + eps), then the softmax weights (max, e^(s−max), the sum in source
// order, division); then each thread mixes its float4 over the sources in order.
__global__ void __launch_bounds__(kResThreads)
    attn_res_combine(const float* blocks, int n_blocks, int64_t block_stride, const float* prefix,
                     int64_t hidden, float eps, const float* parts, float* out) {
  __shared__ float p[kMaxSources];
  const int r = blockIdx.y, ns = n_blocks + 1;
  if (threadIdx.x == 0) {
    const int64_t chunks = (hidden + kResChunk - 1) / kResChunk;
    for (int i = 0; i < ns; ++i) {
      const float* part = parts + (static_cast<int64_t>(r) * kMaxSources + i) * chunks * 2;
      float tdk = part[0], tss = part[1];
      for (int64_t q = 1; q < chunks; ++q) {
        tdk = __fadd_rn(tdk, part[2 * q]);
        tss = __fadd_rn(tss, part[2 * q + 1]);
      }
      const float rms = __fsqrt_rn(__fadd_rn(__fdiv_rn(tss, static_cast<float>(hidden)), eps));
      p[i] = __fdiv_rn(tdk, rms);
    }
    float m = p[0];
    for (int i = 1; i < ns; ++i) m = p[i] > m ? p[i] : m;
    float sum = 0.0f;
    for (int i = 0; i < ns; ++i) {
      p[i] = pm::exp_f32(__fsub_rn(p[i], m));
      sum = __fadd_rn(sum, p[i]);
    }
    for (int i = 0; i < ns; ++i) p[i] = __fdiv_rn(p[i], sum);
  }
  __syncthreads();
  const int64_t c = blockIdx.x * int64_t{kResThreads} + threadIdx.x;
  if (c >= hidden / 4) return;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int i = 0; i < ns; ++i) {
    const float* v = (i < n_blocks ? blocks + i * block_stride : prefix) + r * hidden;
    const float4 a = reinterpret_cast<const float4*>(v)[c];
    const float w = p[i];
    o.x = __fmaf_rn(w, a.x, o.x);
    o.y = __fmaf_rn(w, a.y, o.y);
    o.z = __fmaf_rn(w, a.z, o.z);
    o.w = __fmaf_rn(w, a.w, o.w);
  }
  reinterpret_cast<float4*>(out + r * hidden)[c] = o;
}

// ---- Router -----------------------------------------------------------------------------------

// (value, id) ordered by value descending, then id ascending: a total order, so every lane of the
// butterfly ends with the same winner.
__device__ __forceinline__ bool better(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

__device__ __forceinline__ void warp_best(float& v, int& id) {
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_xor_sync(kFullMask, v, off);
    const int oi = __shfl_xor_sync(kFullMask, id, off);
    if (better(ov, oi, v, id)) v = ov, id = oi;
  }
}

// One warp per row. Shared: score[ne], choice[ne], gscore[ng], keep[ng], chosen[k].
__global__ void __launch_bounds__(32)
    route_kernel(const float* logits, const float* bias, int ne, int k, int ng, int tkg,
                 bool renormalize, float scaling, int32_t* experts, float* weights) {
  extern __shared__ float rsm[];
  float* score = rsm;
  float* choice = score + ne;
  float* gscore = choice + ne;
  int* keep = reinterpret_cast<int*>(gscore + ng);
  int* chosen = keep + ng;
  const int r = blockIdx.x, lane = threadIdx.x;
  for (int e = lane; e < ne; e += 32) {
    const float s = pm::sigmoid_f32(logits[static_cast<int64_t>(r) * ne + e]);
    score[e] = s;
    choice[e] = __fadd_rn(s, bias[e]);
  }
  __syncwarp();
  if (ng > 1 && ng > tkg) {
    const int per = ne / ng;
    for (int gi = lane; gi < ng; gi += 32) {
      float v0 = kNegInf, v1 = kNegInf;
      int i0 = INT32_MAX, i1 = INT32_MAX;
      for (int e = gi * per; e < (gi + 1) * per; ++e) {
        const float c = choice[e];
        if (better(c, e, v0, i0)) {
          v1 = v0, i1 = i0, v0 = c, i0 = e;
        } else if (better(c, e, v1, i1)) {
          v1 = c, i1 = e;
        }
      }
      gscore[gi] = __fadd_rn(v0, per > 1 ? v1 : 0.0f);
      keep[gi] = 0;
    }
    __syncwarp();
    for (int round = 0; round < tkg; ++round) {
      float v = kNegInf;
      int id = INT32_MAX;
      for (int gi = lane; gi < ng; gi += 32)
        if (!keep[gi] && better(gscore[gi], gi, v, id)) v = gscore[gi], id = gi;
      warp_best(v, id);
      if (lane == 0) keep[id] = 1;
      __syncwarp();
    }
    for (int e = lane; e < ne; e += 32)
      if (!keep[e / per]) choice[e] = kNegInf;
    __syncwarp();
  }
  for (int round = 0; round < k; ++round) {
    float v = kNegInf;
    int id = INT32_MAX;
    for (int e = lane; e < ne; e += 32)
      if (better(choice[e], e, v, id)) v = choice[e], id = e;
    warp_best(v, id);
    if (lane == 0) {
      chosen[round] = id;
      choice[id] = kNegInf;  // taken; a finite choice always beats it
    }
    __syncwarp();
  }
  if (lane == 0) {
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum = __fadd_rn(sum, score[chosen[i]]);
    for (int i = 0; i < k; ++i) {
      float w = score[chosen[i]];
      if (renormalize) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
      experts[static_cast<int64_t>(r) * k + i] = chosen[i];
      weights[static_cast<int64_t>(r) * k + i] = __fmul_rn(w, scaling);
    }
  }
}

// ---- KDA --------------------------------------------------------------------------------------

constexpr int kKdaMaxDim = 128;
constexpr int kKdaRowsPerWarp = 4;
constexpr int kKdaWarps = 4;
constexpr int kKdaRowsPerBlock = kKdaRowsPerWarp * kKdaWarps;

// Block (row group, head h): each warp owns 4 value rows of the head's Sᵀ, lane l the key channels
// 4l..4l+3 of each (one float4; lanes from dim/4 on hold zeros, which add nothing). The rows stay
// in registers for all n tokens. Per token and row: decay (one multiply per element), Sᵀk as fma4
// + warp_sum, w = β·(v − Sᵀk), row = fma(w, k, row), o = fma4(row, q) + warp_sum.
__global__ void __launch_bounds__(kKdaWarps * 32)
    kda_kernel(const float* q, const float* k, const float* v, const float* g, const float* beta,
               int n, int nh, int dim, float* state, float* o) {
  const int h = blockIdx.y, lane = threadIdx.x % 32;
  const bool active = lane < dim / 4;
  const int c0 = blockIdx.x * kKdaRowsPerBlock + (threadIdx.x / 32) * kKdaRowsPerWarp;
  float4* srow =
      reinterpret_cast<float4*>(state + (static_cast<int64_t>(h) * dim + c0) * dim) + lane;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 s[kKdaRowsPerWarp];
#pragma unroll
  for (int j = 0; j < kKdaRowsPerWarp; ++j) s[j] = active ? srow[j * (dim / 4)] : zero;
  for (int t = 0; t < n; ++t) {
    const int64_t base = (static_cast<int64_t>(t) * nh + h) * dim;
    const float4 k4 = active ? reinterpret_cast<const float4*>(k + base)[lane] : zero;
    const float4 q4 = active ? reinterpret_cast<const float4*>(q + base)[lane] : zero;
    const float4 g4 = active ? reinterpret_cast<const float4*>(g + base)[lane] : zero;
    const float4 d =
        make_float4(pm::exp_f32(g4.x), pm::exp_f32(g4.y), pm::exp_f32(g4.z), pm::exp_f32(g4.w));
    const float b = beta[static_cast<int64_t>(t) * nh + h];
    float kd[kKdaRowsPerWarp];
#pragma unroll
    for (int j = 0; j < kKdaRowsPerWarp; ++j) {
      s[j].x = __fmul_rn(s[j].x, d.x);
      s[j].y = __fmul_rn(s[j].y, d.y);
      s[j].z = __fmul_rn(s[j].z, d.z);
      s[j].w = __fmul_rn(s[j].w, d.w);
      kd[j] = fma4(s[j], k4, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kKdaRowsPerWarp; ++j) kd[j] = warp_sum(kd[j]);
    float od[kKdaRowsPerWarp];
#pragma unroll
    for (int j = 0; j < kKdaRowsPerWarp; ++j) {
      const float w = __fmul_rn(b, __fsub_rn(v[base + c0 + j], kd[j]));
      s[j].x = __fmaf_rn(w, k4.x, s[j].x);
      s[j].y = __fmaf_rn(w, k4.y, s[j].y);
      s[j].z = __fmaf_rn(w, k4.z, s[j].z);
      s[j].w = __fmaf_rn(w, k4.w, s[j].w);
      od[j] = fma4(s[j], q4, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kKdaRowsPerWarp; ++j) od[j] = warp_sum(od[j]);
    if (lane < kKdaRowsPerWarp) {
      // Lane j stores row j's output (every lane holds every row's sum).
      float mine = od[0];
#pragma unroll
      for (int j = 1; j < kKdaRowsPerWarp; ++j) mine = lane == j ? od[j] : mine;
      o[base + c0 + lane] = mine;
    }
  }
  if (!active) return;
#pragma unroll
  for (int j = 0; j < kKdaRowsPerWarp; ++j) srow[j * (dim / 4)] = s[j];
}

// ---- KDA glue ---------------------------------------------------------------------------------

// Thread per channel: the window of the last K inputs in registers over the n rows; acc is a fma
// chain over the taps, oldest first.
template <int K>
__global__ void short_conv_kernel(const float* x, int n, int64_t p, const float* w, float* hist,
                                  float* y) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= p) return;
  float win[K];
  float wc[K];
#pragma unroll
  for (int i = 0; i < K; ++i) wc[i] = w[c * K + i];
#pragma unroll
  for (int i = 0; i < K - 1; ++i) win[i] = hist[i * p + c];
  for (int t = 0; t < n; ++t) {
    win[K - 1] = x[t * p + c];
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) acc = __fmaf_rn(wc[i], win[i], acc);
    y[t * p + c] = pm::silu_f32(acc);
#pragma unroll
    for (int i = 0; i < K - 1; ++i) win[i] = win[i + 1];
  }
#pragma unroll
  for (int i = 0; i < K - 1; ++i) hist[i * p + c] = win[i];
}

// Warp per row of dim <= 128: lane l owns the float4 l (lanes from dim/4 on hold zeros); Σx² as
// fma4 + warp_sum; x·inv·scale (two roundings).
__global__ void l2norm_kernel(float* x, int64_t rows, int dim, float scale) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const bool active = lane < dim / 4;
  float4* v = reinterpret_cast<float4*>(x + row * dim) + lane;
  float4 a = active ? *v : make_float4(0.f, 0.f, 0.f, 0.f);
  const float ss = warp_sum(fma4(a, a, 0.0f));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ss, 1e-6f)));
  a.x = __fmul_rn(__fmul_rn(a.x, inv), scale);
  a.y = __fmul_rn(__fmul_rn(a.y, inv), scale);
  a.z = __fmul_rn(__fmul_rn(a.z, inv), scale);
  a.w = __fmul_rn(__fmul_rn(a.w, inv), scale);
  if (active) *v = a;
}

__global__ void kda_gates_kernel(float* g, float* beta, int64_t n, int64_t nh, int64_t dim,
                                 const float* a_log, const float* dt_bias, float lower_bound) {
  const int64_t total = n * nh * dim;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t h = (e / dim) % nh, j = e % dim;
    const float a = pm::exp_f32(a_log[h]);
    g[e] = __fmul_rn(lower_bound,
                     pm::sigmoid_f32(__fmul_rn(a, __fadd_rn(g[e], dt_bias[h * dim + j]))));
    if (e < n * nh) beta[e] = pm::sigmoid_f32(beta[e]);
  }
}

__global__ void mul_sigmoid_kernel(const float* gate, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __fmul_rn(y[i], pm::sigmoid_f32(gate[i]));
}

__global__ void add_kernel(const float* x, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __fadd_rn(y[i], x[i]);
}

// rows: null for contrib in slot order, else the contrib row of each (row, rank) slot.
__global__ void moe_combine_kernel(const float* contrib, const int32_t* rows, const float* weights,
                                   int64_t n, int k, int64_t width, float* sum) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * width;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / width, j = e % width;
    float acc = 0.0f;
    for (int rank = 0; rank < k; ++rank) {
      const int64_t slot = r * k + rank;
      const int64_t row = rows == nullptr ? slot : rows[slot];
      acc = __fadd_rn(acc, __fmul_rn(weights[slot], contrib[row * width + j]));
    }
    sum[e] = acc;
  }
}

__global__ void expert_tasks_kernel(const DeviceMxfp4Task* table, int64_t n_experts,
                                    const int32_t* route, int k, const float* x, float* g, float* u,
                                    int64_t inter, float* ey, int64_t width,
                                    DeviceMxfp4Task* tasks) {
  const int i = blockIdx.x;
  const int32_t e = route[i];
  if (e < 0 || e >= n_experts) {
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x)
      ey[i * width + j] = __int_as_float(0x7fc00000);
    if (threadIdx.x == 0) tasks[2 * i] = tasks[2 * i + 1] = tasks[2 * k + i] = DeviceMxfp4Task{};
    return;
  }
  if (threadIdx.x != 0) return;
  DeviceMxfp4Task gate = table[3 * e], up = table[3 * e + 1], down = table[3 * e + 2];
  gate.x = up.x = x;
  gate.y = g + i * inter;
  up.y = u + i * inter;
  down.x = g + i * inter;
  down.y = ey + i * width;
  gate.n = up.n = down.n = 1;
  tasks[2 * i] = gate;
  tasks[2 * i + 1] = up;
  tasks[2 * k + i] = down;
}

// gather_rows (dst[p] = src[rows[p]]) and, kScatter, scatter_rows (dst[rows[p]] = src[p]).
template <bool kScatter>
__global__ void move_rows_kernel(const float* src, const int32_t* rows, int64_t m, int64_t width,
                                 float* dst) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < m * width;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t moved = rows[e / width] * width + e % width;
    dst[kScatter ? moved : e] = src[kScatter ? e : moved];
  }
}

__global__ void embed_kernel(const uint16_t* table, int64_t width, const int32_t* ids, int64_t n,
                             float* out) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * width;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / width, j = e % width;
    out[e] = __uint_as_float(static_cast<uint32_t>(table[ids[r] * width + j]) << 16);
  }
}

// ---- argmax -----------------------------------------------------------------------------------

constexpr int kArgmaxThreads = 1024;

// Block per row: per thread the best of its strided columns, warp_best, then thread 0 over the
// warps. The order (value descending, index ascending) is total, so the result is unique.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* x, int64_t cols, int32_t* ids, float* values) {
  __shared__ float wv[kArgmaxThreads / 32];
  __shared__ int wi[kArgmaxThreads / 32];
  const float* row = x + blockIdx.x * cols;
  float v = kNegInf;
  int id = INT32_MAX;
  for (int64_t c = threadIdx.x; c < cols; c += kArgmaxThreads)
    if (better(row[c], static_cast<int>(c), v, id)) v = row[c], id = static_cast<int>(c);
  warp_best(v, id);
  if (threadIdx.x % 32 == 0) wv[threadIdx.x / 32] = v, wi[threadIdx.x / 32] = id;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w)
      if (better(wv[w], wi[w], v, id)) v = wv[w], id = wi[w];
    ids[blockIdx.x] = id == INT32_MAX ? -1 : id;
    if (values != nullptr) values[blockIdx.x] = v;
  }
}

}  // namespace

void argmax_rows(const float* x, int64_t n, int64_t cols, int32_t* ids, float* values,
                 cudaStream_t stream) {
  const char* what = "cuda::argmax_rows";
  if (cols < 1 || cols >= INT32_MAX) bad(what, "cols", cols, "1..2^31-2");
  if (n < 0 || n > INT32_MAX) bad(what, "n", n, ">= 0");
  if (n == 0) return;
  argmax_kernel<<<static_cast<unsigned>(n), kArgmaxThreads, 0, stream>>>(x, cols, ids, values);
  check_launch(what);
}

void situ_glu(const float* g, const float* u, int64_t n, float beta, float linear_beta, float* y,
              cudaStream_t stream) {
  if (n < 0) bad("cuda::situ_glu", "n", n, ">= 0");
  if (n == 0) return;
  const int64_t blocks = (n + 255) / 256;
  situ_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
      g, u, n, beta, linear_beta, y);
  check_launch("cuda::situ_glu");
}

int64_t attn_res_scratch_floats(int64_t n, int64_t hidden) {
  return n * kMaxSources * ((hidden + kResChunk - 1) / kResChunk) * 2;
}

void attn_res_mix(const float* key, const float* blocks, int64_t n_blocks, int64_t block_stride,
                  const float* prefix, int64_t n, int64_t hidden, float eps, float* scratch,
                  float* out, cudaStream_t stream) {
  const char* what = "cuda::attn_res_mix";
  if (n_blocks < 0 || n_blocks >= kMaxSources) bad(what, "n_blocks", n_blocks, "0..63");
  if (hidden <= 0 || hidden % 4 != 0) bad(what, "hidden", hidden, "a positive multiple of 4");
  if (n < 0 || n > 65535) bad(what, "n", n, "0..65535");
  if (block_stride % 4 != 0) bad(what, "block_stride", block_stride, "a multiple of 4");
  if (!aligned16(key) || !aligned16(prefix) || !aligned16(out) ||
      (n_blocks > 0 && !aligned16(blocks)))
    throw std::invalid_argument(std::string(what) +
                                ": key, blocks, prefix and out must be "
                                "16-byte aligned device pointers");
  if (n == 0) return;
  const int nb = static_cast<int>(n_blocks);
  const auto chunks = static_cast<unsigned>((hidden + kResChunk - 1) / kResChunk);
  attn_res_scores<<<dim3(chunks, nb + 1, static_cast<unsigned>(n)), kResThreads, 0, stream>>>(
      key, blocks, nb, block_stride, prefix, hidden, scratch);
  attn_res_combine<<<dim3(chunks, static_cast<unsigned>(n)), kResThreads, 0, stream>>>(
      blocks, nb, block_stride, prefix, hidden, eps, scratch, out);
  check_launch(what, 2);
}

void route(const RouterShape& sh, const float* logits, const float* bias, int64_t n,
           int32_t* experts, float* weights, cudaStream_t stream) {
  const char* what = "cuda::route";
  if (sh.n_experts < 1 || sh.n_experts > 1024) bad(what, "n_experts", sh.n_experts, "1..1024");
  if (sh.n_groups < 1 || sh.n_experts % sh.n_groups != 0)
    bad(what, "n_groups", sh.n_groups, "a divisor of n_experts");
  const bool grouped = sh.n_groups > 1 && sh.n_groups > sh.topk_groups;
  if (grouped && sh.topk_groups < 1) bad(what, "topk_groups", sh.topk_groups, ">= 1");
  const int available = grouped ? sh.topk_groups * (sh.n_experts / sh.n_groups) : sh.n_experts;
  if (sh.top_k < 1 || sh.top_k > available)
    bad(what, "top_k", sh.top_k, "1.." + std::to_string(available));
  if (n < 0 || n > INT32_MAX) bad(what, "n", n, ">= 0");
  if (n == 0) return;
  const size_t smem = (2 * static_cast<size_t>(sh.n_experts) + sh.n_groups) * sizeof(float) +
                      (static_cast<size_t>(sh.n_groups) + sh.top_k) * sizeof(int);
  route_kernel<<<static_cast<unsigned>(n), 32, smem, stream>>>(
      logits, bias, sh.n_experts, sh.top_k, sh.n_groups, sh.topk_groups, sh.renormalize, sh.scaling,
      experts, weights);
  check_launch(what);
}

void kda_decode(const float* q, const float* k, const float* v, const float* g, const float* beta,
                int64_t n, int64_t n_heads, int64_t dim, float* state, float* o,
                cudaStream_t stream) {
  const char* what = "cuda::kda_decode";
  if (dim < 16 || dim > kKdaMaxDim || dim % kKdaRowsPerBlock != 0)
    bad(what, "dim", dim, "a multiple of 16 up to 128");
  if (n_heads < 1 || n_heads > 65535) bad(what, "n_heads", n_heads, "1..65535");
  if (n < 0 || n > INT32_MAX) bad(what, "n", n, ">= 0");
  if (!aligned16(q) || !aligned16(k) || !aligned16(g) || !aligned16(state))
    throw std::invalid_argument(std::string(what) +
                                ": q, k, g and state must be 16-byte aligned device pointers");
  if (n == 0) return;
  kda_kernel<<<dim3(static_cast<unsigned>(dim / kKdaRowsPerBlock), static_cast<unsigned>(n_heads)),
               kKdaWarps * 32, 0, stream>>>(q, k, v, g, beta, static_cast<int>(n),
                                            static_cast<int>(n_heads), static_cast<int>(dim), state,
                                            o);
  check_launch(what);
}

void short_conv_silu(const float* x, int64_t n, int64_t p, int64_t kernel, const float* w,
                     float* hist, float* y, cudaStream_t stream) {
  const char* what = "cuda::short_conv_silu";
  if (kernel < 1 || kernel > 8) bad(what, "kernel", kernel, "1..8");
  if (p < 1) bad(what, "p", p, ">= 1");
  if (n < 0 || n > INT32_MAX) bad(what, "n", n, ">= 0");
  if (x == y) throw std::invalid_argument(std::string(what) + ": y must not alias x");
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>((p + 255) / 256);
  const int nn = static_cast<int>(n);
  switch (kernel) {
#define DF_CONV_CASE(K)                                                     \
  case K:                                                                   \
    short_conv_kernel<K><<<blocks, 256, 0, stream>>>(x, nn, p, w, hist, y); \
    break;
    DF_CONV_CASE(1)
    DF_CONV_CASE(2)
    DF_CONV_CASE(3)
    DF_CONV_CASE(4)
    DF_CONV_CASE(5)
    DF_CONV_CASE(6)
    DF_CONV_CASE(7)
    DF_CONV_CASE(8)
#undef DF_CONV_CASE
  }
  check_launch(what);
}

void l2norm_rows(float* x, int64_t rows, int64_t dim, float scale, cudaStream_t stream) {
  const char* what = "cuda::l2norm_rows";
  if (dim < 4 || dim > 128 || dim % 4 != 0) bad(what, "dim", dim, "a multiple of 4 up to 128");
  if (rows < 0) bad(what, "rows", rows, ">= 0");
  if (!aligned16(x)) throw std::invalid_argument(std::string(what) + ": x must be 16-byte aligned");
  if (rows == 0) return;
  l2norm_kernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
      x, rows, static_cast<int>(dim), scale);
  check_launch(what);
}

void kda_gates(float* g, float* beta, int64_t n, int64_t n_heads, int64_t dim, const float* a_log,
               const float* dt_bias, float lower_bound, cudaStream_t stream) {
  const char* what = "cuda::kda_gates";
  if (n < 0 || n_heads < 1 || dim < 1) bad(what, "n", n, ">= 0 with n_heads, dim >= 1");
  if (n == 0) return;
  const int64_t blocks = (n * n_heads * dim + 255) / 256;
  kda_gates_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
      g, beta, n, n_heads, dim, a_log, dt_bias, lower_bound);
  check_launch(what);
}

void mul_sigmoid(const float* gate, int64_t n, float* y, cudaStream_t stream) {
  if (n < 0) bad("cuda::mul_sigmoid", "n", n, ">= 0");
  if (n == 0) return;
  const int64_t blocks = (n + 255) / 256;
  mul_sigmoid_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
      gate, n, y);
  check_launch("cuda::mul_sigmoid");
}

namespace {
unsigned grid_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}
}  // namespace

void add(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n < 0) bad("cuda::add", "n", n, ">= 0");
  if (n == 0) return;
  add_kernel<<<grid_for(n), 256, 0, stream>>>(x, n, y);
  check_launch("cuda::add");
}

void moe_combine(const float* contrib, const float* weights, int64_t n, int64_t k, int64_t width,
                 float* sum, cudaStream_t stream) {
  const char* what = "cuda::moe_combine";
  if (n < 0) bad(what, "n", n, ">= 0");
  if (k < 1 || k > 1024) bad(what, "k", k, "1..1024");
  if (width < 1) bad(what, "width", width, ">= 1");
  if (n == 0) return;
  moe_combine_kernel<<<grid_for(n * width), 256, 0, stream>>>(contrib, nullptr, weights, n,
                                                              static_cast<int>(k), width, sum);
  check_launch(what);
}

void moe_combine_rows(const float* contrib, const int32_t* rows, const float* weights, int64_t n,
                      int64_t k, int64_t width, float* sum, cudaStream_t stream) {
  const char* what = "cuda::moe_combine_rows";
  if (n < 0) bad(what, "n", n, ">= 0");
  if (k < 1 || k > 1024) bad(what, "k", k, "1..1024");
  if (width < 1) bad(what, "width", width, ">= 1");
  if (rows == nullptr) throw std::invalid_argument(std::string(what) + ": rows is null");
  if (n == 0) return;
  moe_combine_kernel<<<grid_for(n * width), 256, 0, stream>>>(contrib, rows, weights, n,
                                                              static_cast<int>(k), width, sum);
  check_launch(what);
}

void expert_tasks_one_row(const DeviceMxfp4Task* table, int64_t n_experts, const int32_t* route,
                          int64_t k, const float* x, float* g, float* u, int64_t inter, float* ey,
                          int64_t width, DeviceMxfp4Task* tasks, cudaStream_t stream) {
  const char* what = "cuda::expert_tasks_one_row";
  if (k < 1 || k > 1024) bad(what, "k", k, "1..1024");
  if (n_experts < 1) bad(what, "n_experts", n_experts, ">= 1");
  if (inter < 1 || width < 1) bad(what, "inter", inter, ">= 1 with width >= 1");
  expert_tasks_kernel<<<static_cast<unsigned>(k), 128, 0, stream>>>(
      table, n_experts, route, static_cast<int>(k), x, g, u, inter, ey, width, tasks);
  check_launch(what);
}

namespace {

template <bool kScatter>
void move_rows(const char* what, const float* src, const int32_t* rows, int64_t m, int64_t width,
               float* dst, cudaStream_t stream) {
  if (m < 0) bad(what, "m", m, ">= 0");
  if (width < 1) bad(what, "width", width, ">= 1");
  if (m == 0) return;
  move_rows_kernel<kScatter><<<grid_for(m * width), 256, 0, stream>>>(src, rows, m, width, dst);
  check_launch(what);
}

}  // namespace

void scatter_rows(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst,
                  cudaStream_t stream) {
  move_rows<true>("cuda::scatter_rows", src, rows, m, width, dst, stream);
}

void gather_rows(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst,
                 cudaStream_t stream) {
  move_rows<false>("cuda::gather_rows", src, rows, m, width, dst, stream);
}

void embed_rows(const uint16_t* table, int64_t width, const int32_t* ids, int64_t n, float* out,
                cudaStream_t stream) {
  if (width < 1) bad("cuda::embed_rows", "width", width, ">= 1");
  if (n < 0) bad("cuda::embed_rows", "n", n, ">= 0");
  if (n == 0) return;
  embed_kernel<<<grid_for(n * width), 256, 0, stream>>>(table, width, ids, n, out);
  check_launch("cuda::embed_rows");
}

}  // namespace deltafin::cuda
