// Kimi Delta Attention, the block: projections, then the kernels (kernels/short_conv.h, l2norm,
// the forget and output gates, the per-head delta rule of kernels/kda.h), gated output norm.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weight_matrix.h"
#include "model/scratch.h"

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

// The rows of a verify pass that the state does not hold yet: the delta rule's inputs and the
// short convolution's inputs per row, so that keeping a prefix of them replays exactly what decode
// steps would have done (the same serial kernel on the same values, never a re-derivation).
struct KdaTentative {
  int64_t rows = 0;
  std::vector<float> q, k, v, g;        // [rows, P]: after the convolution, norms and decay
  std::vector<float> beta;              // [rows, n_heads]
  std::vector<float> q_in, k_in, v_in;  // [rows, P]: the convolution's inputs
};

// One sequence's state for one KDA layer.
struct KdaState {
  std::vector<float> s;     // [n_heads, head_dim (value), head_dim (key)]: Sᵀ per head
  std::vector<float> conv;  // [3 (q, k, v), kernel - 1, P]: the last pre-conv inputs, oldest first
  KdaTentative tentative;   // a verify pass's rows, until kda_commit
  void reset(const KdaShape& shape);
};

// Bytes KdaTentative holds per row.
uint64_t kda_tentative_bytes_per_row(const KdaShape& shape);

// How the delta rule runs over a pass's rows.
enum class KdaMode {
  kAuto,       // chunked for several rows, recurrent for one
  kRecurrent,  // token by token (the definition)
  kChunked,    // kernels::kKdaChunkTokens rows at a time in the WY form
};

// The block's intermediates, reused from pass to pass (see scratch.h).
struct KdaWorkspace {
  Scratch<float> q_in, k_in, v_in;  // projections before the short convolution, [n, P]
  Scratch<float> q, k, v, g, gate;  // [n, P]
  Scratch<float> beta;              // [n, n_heads]
  Scratch<float> low;               // [n, head_dim]: the low-rank gates' inner products
  Scratch<float> o;                 // [n, P]
  Scratch<float> heads;             // the delta rule's per-head scratch (and state copies)
  Scratch<float> conv;              // a tentative pass's copy of the convolution history
};

// out[n, hidden] = KDA(x[n, hidden]) for n consecutive tokens, advancing `state`. tentative:
// the rows run on copies of the state (per head, in scratch) and are logged in state.tentative
// instead; the state itself is unchanged until kda_commit. Needs kRecurrent (the decode form).
void kda_forward(const KdaShape& shape, const KdaWeights& w, const float* x, int64_t n,
                 KdaState& state, KdaMode mode, KdaWorkspace& ws, float* out,
                 bool tentative = false);

// Advances `state` by the first `keep` tentative rows, as decode steps over them would have, and
// drops the log.
void kda_commit(const KdaShape& shape, KdaState& state, int64_t keep, KdaWorkspace& ws);

}  // namespace deltafin::model
