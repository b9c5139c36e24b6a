// The block math of one K3 decode layer on the GPU, beside the GEMVs (gemv.h) and RMSNorm
// (norm.h): SiTU, the AttnRes mix, the router's selection, the KDA recurrent step and absorbed
// MLA attention. fp32 activations and fp32 arithmetic in an order that is specified per op
// (docs/CUDA.md "Exactness") and emulated on the CPU by decode_order_ref.h, so the GPU tests
// compare bit for bit; exp/tanh/sigmoid are portable_math.h's, not CUDA's. A row's result never
// depends on how many rows the call holds. Host-callable; every pointer is a device pointer.
// Bad shapes throw std::invalid_argument naming the field; a failed launch std::runtime_error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/gemv.h"

namespace deltafin::cuda {

// y[i] = SiTU(g[i], u[i]) = [beta·tanh(g/beta)·sigmoid(g)] · [linear_beta·tanh(u/linear_beta)]
// for i < n (pm::situ_f32). y may alias g or u.
void situ_glu(const float* g, const float* u, int64_t n, float beta, float linear_beta, float* y,
              cudaStream_t stream = 0);

// The AttnRes mix (kernels/attn_res.h, same arguments): out[r] = Σ_i softmax_i(s)·V_i[r] over
// V = blocks ++ [prefix], s_i = (V_i·key) / sqrt(mean(V_i²) + eps). hidden % 4 == 0 and every
// row 16-byte aligned; n_blocks <= 63. scratch: attn_res_scratch_floats(n, hidden) floats.
void attn_res_mix(const float* key, const float* blocks, int64_t n_blocks, int64_t block_stride,
                  const float* prefix, int64_t n, int64_t hidden, float eps, float* scratch,
                  float* out, cudaStream_t stream = 0);
int64_t attn_res_scratch_floats(int64_t n, int64_t hidden);

// model::RouterConfig's fields.
struct RouterShape {
  int n_experts = 0;  // <= 1024
  int top_k = 0;      // <= n_experts
  int n_groups = 1;
  int topk_groups = 1;
  bool renormalize = true;
  float scaling = 1.0f;
};
// For each of n rows of router logits [n, n_experts] (fp32, e.g. cuda::matmul of the BF16 gate)
// and the correction bias [n_experts]: the rule of model::route. score = sigmoid(logit), choice =
// score + bias; groups (when n_groups > topk_groups) ranked by the sum of their two best choices;
// the top_k experts by (choice descending, id ascending) in rank order; weights = score of each,
// divided by (their sum in rank order + 1e-20) if renormalize, times scaling. experts [n, top_k],
// weights [n, top_k]. Logits must be finite.
void route(const RouterShape& shape, const float* logits, const float* bias, int64_t n,
           int32_t* experts, float* weights, cudaStream_t stream = 0);

// The KDA recurrence (kernels::kda_recurrent) for n consecutive tokens of all n_heads heads, in
// the CPU kernel's layout: q, k, v, g, o [n, n_heads, dim] (q l2-normalized and pre-scaled, k
// l2-normalized, g the log decay per key channel), beta [n, n_heads], state [n_heads, dim (value),
// dim (key)] (Sᵀ per head, read and updated). Per token: S = diag(exp g) S; S += k ⊗ β(v − Sᵀk);
// o = Sᵀq. dim a multiple of 16 up to 128 (K3: 128). n tokens in one call give the same bits as
// n calls of one token.
void kda_decode(const float* q, const float* k, const float* v, const float* g, const float* beta,
                int64_t n, int64_t n_heads, int64_t dim, float* state, float* o,
                cudaStream_t stream = 0);

// The KDA layer's glue around kda_decode, each the CPU kernel of the same name on device memory:
// short_conv_silu (kernels/short_conv.h: y[t, c] = silu(Σ_i w[c, i]·in[t + i, c]) over
// in = [hist; x], hist [kernel − 1, p] advanced; kernel <= 8; n rows in one call == n calls),
// l2norm_rows (x ← x / sqrt(Σx² + 1e-6) · scale per row; dim a multiple of 4 up to 128), kda_gates
// (g ← lower_bound·sigmoid(e^{a_log[h]}·(g + dt_bias[h·dim + j])) on g [n, n_heads, dim] and
// beta ← sigmoid(beta) on beta [n, n_heads]) and mul_sigmoid (y ← y·sigmoid(gate)).
void short_conv_silu(const float* x, int64_t n, int64_t p, int64_t kernel, const float* w,
                     float* hist, float* y, cudaStream_t stream = 0);
void l2norm_rows(float* x, int64_t rows, int64_t dim, float scale, cudaStream_t stream = 0);
void kda_gates(float* g, float* beta, int64_t n, int64_t n_heads, int64_t dim, const float* a_log,
               const float* dt_bias, float lower_bound, cudaStream_t stream = 0);
void mul_sigmoid(const float* gate, int64_t n, float* y, cudaStream_t stream = 0);

// The residual and MoE sums, in the CPU's exact order (so bit-identical to it): add (y ← y + x,
// kernels::add), moe_combine (sum[r] = Σ_rank w[r, rank]·contrib[r, rank] in rank order from 0,
// each term a multiply then an add, as model/moe.cc's loop; contrib [n, k, width], weights [n, k],
// sum [n, width]) and embed_rows (out[r] = the BF16 row ids[r] of table [vocab, width] as fp32,
// exact; ids must be < vocab).
void add(const float* x, int64_t n, float* y, cudaStream_t stream = 0);
void moe_combine(const float* contrib, const float* weights, int64_t n, int64_t k, int64_t width,
                 float* sum, cudaStream_t stream = 0);
// The MoE's grouped products (gpu_blocks.cc) read their inputs gathered expert by expert and
// leave their outputs in that order: gather_rows copies dst[p] = src[rows[p]] (width floats a
// row, p < m), and moe_combine_rows is moe_combine reading slot (r, rank) at row rows[r·k + rank]
// of contrib, the same arithmetic, so bit-identical to moe_combine over the rows in slot order.
void gather_rows(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst,
                 cudaStream_t stream = 0);
// Its inverse: dst[rows[p]] = src[p] for p < m (an expert cache's grouped hits move their outputs
// to their (row, rank) slots this way).
void scatter_rows(const float* src, const int32_t* rows, int64_t m, int64_t width, float* dst,
                  cudaStream_t stream = 0);
void moe_combine_rows(const float* contrib, const int32_t* rows, const float* weights, int64_t n,
                      int64_t k, int64_t width, float* sum, cudaStream_t stream = 0);
void embed_rows(const uint16_t* table, int64_t width, const int32_t* ids, int64_t n, float* out,
                cudaStream_t stream = 0);

// One row's grouped expert products, decided on the device (no route copied back to the host):
// for rank i < k with expert e = route[i] (table: n_experts × {gate, up, down} of resident MXFP4
// experts, their x, y and n unset), tasks[2i] = gate(e) of x into g + i·inter, tasks[2i + 1] =
// up(e) of x into u + i·inter, tasks[2k + i] = down(e) of g + i·inter into ey + i·width, each n =
// 1. An id outside [0, n_experts) (a route from non-finite logits) gets no products and its ey
// row is set to NaN, so the result shows it. k <= 1024.
void expert_tasks_one_row(const DeviceMxfp4Task* table, int64_t n_experts, const int32_t* route,
                          int64_t k, const float* x, float* g, float* u, int64_t inter, float* ey,
                          int64_t width, DeviceMxfp4Task* tasks, cudaStream_t stream = 0);

// Absorbed MLA attention (kernels::mla_attend_absorbed): per head, q̂ = W_UKᵀ q_nope, scores
// (q̂·latent_s + q_pe·k_pe_s)/sqrt(nope + rope), softmax, ō = Σ p_s latent_s (in chunks of 256
// positions, summed in order), o = W_UV ō.
// kv_b: BF16 [n_heads · (nope + v), rank] (per head nope k_nope rows, then v rows), 16-byte
// aligned. latent [n_positions, rank], k_pe [n_positions, rope]: the cache, whose last n positions
// are the n query rows; q [n, n_heads, nope + rope], o [n, n_heads, v]. Query row r sees positions
// [0, n_positions − n + r]. scratch: mla_absorbed_gpu_scratch_floats(...) floats. Dims: rank a
// multiple of 8 up to 512, rope even up to 64, v a multiple of 8 (K3's are the defaults).
struct MlaGpuShape {
  static constexpr int kRank = 512, kNope = 128, kRope = 64, kV = 128;  // K3
  int64_t n_heads = 0;
  int64_t rank = kRank, nope = kNope, rope = kRope, v = kV;
};
void mla_absorbed(const MlaGpuShape& shape, const uint16_t* kv_b, const float* latent,
                  const float* k_pe, int64_t n_positions, const float* q, int64_t n, float* scratch,
                  float* o, cudaStream_t stream = 0);
int64_t mla_absorbed_gpu_scratch_floats(const MlaGpuShape& shape, int64_t n, int64_t n_positions);
namespace detail {
// Forces the heads one block of mla_absorbed's weighted sum takes (1, 2, 4 or 8; 0 restores the
// choice by grid size), so the test and the bench can run each; every choice gives the same bits.
// Throws std::invalid_argument for another count. Not thread-safe; the model never calls it.
void set_mla_mix_heads(int heads);
}  // namespace detail

// The greedy pick over logits [n, cols] (the lm_head's BF16 GEMV is cuda::matmul): per row the
// index of the largest value, the lowest index among equal values, NaNs never chosen (-1 for a row
// of NaNs), and that value. ids [n], values [n]; values may be null.
void argmax_rows(const float* x, int64_t n, int64_t cols, int32_t* ids, float* values,
                 cudaStream_t stream = 0);

}  // namespace deltafin::cuda
