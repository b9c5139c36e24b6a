// Kimi Delta Attention: projections, causal short convolution, gates, the per-head delta-rule
// recurrence on an fp32 state (token by token, or in exact chunks for prefill), gated output norm.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weight_matrix.h"

namespace deltafin::model {

using kernels::WeightMatrix;

// The forget-gate function, the one KDA difference between the families.
enum class KdaGate {
  kLowerBound,  // K3: g = lower_bound · sigmoid(exp(A_log[h]) · (f + dt_bias))
  kSoftplus,    // Kimi-Linear: g = −exp(A_log[h]) · softplus(f + dt_bias)
};

struct KdaShape {
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;  // key and value width per head
  int64_t conv_kernel = 0;
  KdaGate gate = KdaGate::kLowerBound;
  float gate_lower_bound = 0.0f;                        // kLowerBound only
  float norm_eps = 0.0f;                                // o_norm
  int64_t width() const { return n_heads * head_dim; }  // P
};

struct KdaWeights {
  WeightMatrix q_proj, k_proj, v_proj;        // [P, hidden]
  std::vector<float> q_conv, k_conv, v_conv;  // [P, kernel] (stored [P, 1, kernel]); the last
                                              // column multiplies the current token
  WeightMatrix f_a;                           // [head_dim, hidden]
  WeightMatrix f_b;                           // [P, head_dim]
  std::vector<float> a_log;                   // [n_heads]
  std::vector<float> dt_bias;                 // [P]
  WeightMatrix b_proj;                        // [n_heads, hidden]
  WeightMatrix g_proj;                        // [P, hidden]: full-rank output gate (K3), or empty
  WeightMatrix g_a;                           // [head_dim, hidden]: low-rank output gate
  WeightMatrix g_b;                           // [P, head_dim]     (Kimi-Linear)
  std::vector<float> o_norm;                  // [head_dim]
  WeightMatrix o_proj;                        // [hidden, P]
};

// One sequence's state for one KDA layer.
struct KdaState {
  std::vector<float> s;     // [n_heads, head_dim (value), head_dim (key)]: Sᵀ per head
  std::vector<float> conv;  // [3 (q, k, v), kernel - 1, P]: the last pre-conv inputs, oldest first
  void reset(const KdaShape& shape);
};

enum class KdaMode { kRecurrent, kChunked };

// out[n, hidden] = KDA(x[n, hidden]) for n consecutive tokens, advancing `state`.
void kda_forward(const KdaShape& shape, const KdaWeights& w, const float* x, int64_t n,
                 KdaState& state, KdaMode mode, float* out);

// The delta rule for one head over n tokens. Row t of q/k/v/g/o is at `+ t * stride`, beta at
// `+ t * beta_stride`; q is l2-normalized and pre-scaled, k l2-normalized, g the log decay per key
// channel. `state` holds Sᵀ, [dim (value), dim (key)], and is read and updated. Per token:
//   S = diag(exp(g)) S;  S += k ⊗ β (v − Sᵀk);  o = Sᵀq.
void kda_recurrent(const float* q, const float* k, const float* v, const float* g,
                   const float* beta, int64_t n, int64_t dim, int64_t stride, int64_t beta_stride,
                   float* state, float* o);
// The same result computed a chunk of `chunk` tokens at a time (the WY form of fla's chunk_kda with
// the in-chunk decays formed as running products, so no exponent is ever positive).
void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t n, int64_t dim, int64_t stride, int64_t beta_stride, int64_t chunk,
                 float* state, float* o);

}  // namespace deltafin::model
