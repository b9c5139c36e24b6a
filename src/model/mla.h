// Multi-head latent attention without positional encoding (K3 gated MLA and Kimi-Linear MLA), the
// block: projections, the cache of normalized latents and shared key parts per position, the
// attention kernels (kernels/mla_attention.h, expanded or absorbed), output gate and o_proj.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weight_matrix.h"
#include "model/scratch.h"

namespace deltafin::model {

using kernels::WeightMatrix;

struct MlaShape {
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t q_lora_rank = 0;  // 0: q_proj straight from the input (Kimi-Linear)
  int64_t kv_lora_rank = 0;
  int64_t nope_dim = 0;  // qk_nope_head_dim
  int64_t rope_dim = 0;  // qk_rope_head_dim: a key part shared by all heads, never rotated
  int64_t v_dim = 0;
  bool output_gate = false;
  float latent_norm_eps = 0.0f;  // q_a_layernorm and kv_a_layernorm
  int64_t qk_dim() const { return nope_dim + rope_dim; }
};

struct MlaWeights {
  WeightMatrix q_a;              // [q_lora, hidden]          (q low rank)
  std::vector<float> q_a_norm;   // [q_lora]
  WeightMatrix q_b;              // [n_heads · qk_dim, q_lora]
  WeightMatrix q_proj;           // [n_heads · qk_dim, hidden] (no q low rank)
  WeightMatrix kv_a;             // [kv_lora + rope, hidden]
  std::vector<float> kv_a_norm;  // [kv_lora]
  WeightMatrix kv_b;    // [n_heads · (nope + v), kv_lora]: per head k_nope rows, then v rows
  WeightMatrix g_proj;  // [n_heads · v, hidden]: sigmoid output gate, or empty
  WeightMatrix o_proj;  // [hidden, n_heads · v]
};

// One sequence's cache for one MLA layer: 576 values per position in K3. Storage for the planned
// context is reserved (not touched) up front, so appending a position never reallocates; pages are
// committed as positions fill. A copy (a snapshot) reserves again when it next grows.
struct MlaCache {
  std::vector<float> latent;  // [n_positions, kv_lora]: after kv_a_layernorm
  std::vector<float> k_pe;    // [n_positions, rope]
  int64_t n_positions = 0;
  int64_t max_positions = 0;  // the planned context (0: none planned, grow as needed)
  // Empties the cache, keeping its storage; reserves for max_positions.
  void reset(const MlaShape& shape, int64_t max_positions);
  // Positions [n_positions, n_positions + n) become addressable (n_positions is not advanced).
  void extend(const MlaShape& shape, int64_t n);
  // Keeps positions [0, n) (n <= n_positions), keeping the storage: a verify pass's rejected rows.
  void truncate(const MlaShape& shape, int64_t n);
};

// How attention runs over the cache.
enum class MlaMode {
  kAuto,      // whichever costs fewer multiplies for this (rows, cached positions)
  kExpanded,  // expand every cached position's keys and values through kv_b_proj (the definition)
  kAbsorbed,  // scores and mixing in latent space (the decode form)
  // Each row attends on its own, as a one-row decode step at its position would under kAuto
  // (verify passes: row i equals the i-th of as many decode steps, bit for bit).
  kDecodeRows,
};

// The block's intermediates, reused from pass to pass (see scratch.h).
struct MlaWorkspace {
  Scratch<float> q;       // [n, n_heads, qk_dim]
  Scratch<float> qa;      // [n, q_lora]
  Scratch<float> ckv;     // [n, kv_lora + rope]
  Scratch<float> o;       // [n, n_heads, v_dim]
  Scratch<float> gate;    // [n, n_heads, v_dim]
  Scratch<float> attend;  // the attention kernel's scratch
};

// out[n, hidden] = MLA(x[n, hidden]) for n consecutive tokens appended after the cache's positions.
void mla_forward(const MlaShape& shape, const MlaWeights& w, const float* x, int64_t n,
                 MlaCache& cache, MlaMode mode, MlaWorkspace& ws, float* out);

// Bytes one cached position takes in one layer's MlaCache.
uint64_t mla_cache_bytes_per_position(const MlaShape& shape);
// The largest expanded keys and values kAuto materializes in MlaWorkspace::attend for passes of up
// to `rows` rows over a cache of up to `max_positions`, when it picks that form (short caches, or
// chunks so long that expanding every position is cheaper than absorbing every row); the scores
// beside them take n_heads floats per position.
uint64_t mla_auto_scratch_bytes(const MlaShape& shape, int64_t rows, int64_t max_positions);

}  // namespace deltafin::model
