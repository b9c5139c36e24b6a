// Grouped-query attention with RoPE (Qwen3), the block: q/k/v projections, per-head q/k RMSNorm
// over head_dim, NeoX RoPE, causal softmax attention over a per-position fp32 key/value cache (a
// query head reads key/value head h / (heads / kv_heads)), o_proj.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weight_matrix.h"
#include "model/scratch.h"

namespace deltafin::model {

using kernels::WeightMatrix;

struct GqaShape {
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // may differ from hidden / n_heads (Qwen3-0.6B: 128 against 64)
  double rope_theta = 0.0;
  float norm_eps = 0.0f;  // q_norm and k_norm (the model's rms_norm_eps)
  int64_t kv_width() const { return n_kv_heads * head_dim; }
};

struct GqaWeights {
  WeightMatrix q_proj;        // [n_heads · head_dim, hidden]
  WeightMatrix k_proj;        // [n_kv_heads · head_dim, hidden]
  WeightMatrix v_proj;        // [n_kv_heads · head_dim, hidden]
  WeightMatrix o_proj;        // [hidden, n_heads · head_dim]
  std::vector<float> q_norm;  // [head_dim]
  std::vector<float> k_norm;  // [head_dim]
};

// One sequence's cache for one GQA layer: the rotated keys and the values of every position, fp32.
// Reserved for the planned context up front like MlaCache; a copy (a snapshot) reserves again
// when it next grows.
struct GqaCache {
  std::vector<float> k;  // [n_positions, n_kv_heads, head_dim]: normalized and rotated
  std::vector<float> v;  // [n_positions, n_kv_heads, head_dim]
  int64_t n_positions = 0;
  int64_t max_positions = 0;  // the planned context (0: none planned, grow as needed)
  // Empties the cache, keeping its storage; reserves for max_positions.
  void reset(const GqaShape& shape, int64_t max_positions);
  // Positions [n_positions, n_positions + n) become addressable (n_positions is not advanced).
  void extend(const GqaShape& shape, int64_t n);
  // Keeps positions [0, n) (n <= n_positions), keeping the storage: a verify pass's rejected rows.
  void truncate(const GqaShape& shape, int64_t n);
};

// The block's intermediates, reused from pass to pass (see scratch.h).
struct GqaWorkspace {
  Scratch<float> q;  // [n, n_heads, head_dim]
  Scratch<float> o;  // [n, n_heads, head_dim]
};

// out[n, hidden] = GQA(x[n, hidden]) for n consecutive tokens appended after the cache's
// positions. Every row attends on its own over the positions up to and including its own, with
// the same arithmetic whatever n is: a row of a prefill or verify pass equals, bit for bit, a
// one-row decode pass at that position.
void gqa_forward(const GqaShape& shape, const GqaWeights& w, const float* x, int64_t n,
                 GqaCache& cache, GqaWorkspace& ws, float* out);

// Bytes one cached position takes in one layer's GqaCache.
uint64_t gqa_cache_bytes_per_position(const GqaShape& shape);

}  // namespace deltafin::model
