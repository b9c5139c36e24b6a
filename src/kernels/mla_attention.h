// Multi-head latent attention over a cache of normalized latents and shared key parts (no
// positional rotation): expanded (every cached position's keys and values through kv_b_proj, the
// definition, mla_attention_ref.cc) or absorbed (kv_b_proj folded into the query and the output,
// scores and mixing in latent space, mla_attention_absorbed.cc). Scratch comes from the caller.
#pragma once

#include <cstdint>

#include "kernels/weight_matrix.h"

namespace deltafin::kernels {

struct MlaDims {
  int64_t n_heads = 0;
  int64_t kv_lora_rank = 0;
  int64_t nope_dim = 0;  // per-head key part from the latent
  int64_t rope_dim = 0;  // key part shared by all heads, stored per position
  int64_t v_dim = 0;
  int64_t qk_dim() const { return nope_dim + rope_dim; }
  int64_t kv_width() const { return nope_dim + v_dim; }  // kv_b rows per head: k_nope, then v
};

// Positions [0, n_positions) of one layer's cache: latent [n, kv_lora_rank], k_pe [n, rope_dim].
struct LatentCache {
  const float* latent = nullptr;
  const float* k_pe = nullptr;
  int64_t n_positions = 0;
};

// o[n, n_heads, v_dim] = softmax(q·kᵀ / sqrt(qk_dim)) · v per head for queries q[n, n_heads,
// qk_dim] at the cache's last n positions: query row r sees positions [0, n_positions - n + r].
// kv_b: [n_heads · kv_width, kv_lora_rank]. Parallel over heads on the default pool.
// scratch: mla_expanded_scratch_floats(dims, n_positions) floats.
void mla_attend_expanded(const MlaDims& dims, const WeightMatrix& kv_b, const LatentCache& cache,
                         const float* q, int64_t n, float* scratch, float* o);
int64_t mla_expanded_scratch_floats(const MlaDims& dims, int64_t n_positions);

// The same attention with kv_b absorbed: q̂ = W_UKᵀ q_nope, scores against the latents,
// ō = Σ p·latent, o = W_UV ō. Equal to the expanded form up to rounding.
// scratch: mla_absorbed_scratch_floats(dims, n, n_positions) floats.
void mla_attend_absorbed(const MlaDims& dims, const WeightMatrix& kv_b, const LatentCache& cache,
                         const float* q, int64_t n, float* scratch, float* o);
int64_t mla_absorbed_scratch_floats(const MlaDims& dims, int64_t n, int64_t n_positions);

}  // namespace deltafin::kernels
