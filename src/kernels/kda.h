// The KDA (gated delta rule) recurrence of one head on an fp32 state: token by token (the
// definition, kda_ref.cc) or a chunk of tokens at a time in the WY form (kda_chunked.cc). Scratch
// comes from the caller, so a pass allocates nothing.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// Tokens per chunk of the chunked form in prefill (fla's chunk_kda uses 64 as well).
inline constexpr int64_t kKdaChunkTokens = 64;

// The forget gate, in place on g[n, n_heads, dim] (f_b's output): with a = exp(a_log[h]) and
// f = g + dt_bias[h · dim + j], the log decay is lower_bound · sigmoid(a · f) (K3) or
// −a · softplus(f) (Kimi-Linear).
void kda_decay_lower_bound(float* g, int64_t n, int64_t n_heads, int64_t dim, const float* a_log,
                           const float* dt_bias, float lower_bound);
void kda_decay_softplus(float* g, int64_t n, int64_t n_heads, int64_t dim, const float* a_log,
                        const float* dt_bias);

// The delta rule for one head over n tokens. Row t of q/k/v/g/o is at `+ t * stride`, beta at
// `+ t * beta_stride`; q is l2-normalized and pre-scaled, k l2-normalized, g the log decay per key
// channel. `state` holds Sᵀ, [dim (value), dim (key)], and is read and updated. Per token:
//   S = diag(exp(g)) S;  S += k ⊗ β (v − Sᵀk);  o = Sᵀq.
// scratch: kda_recurrent_scratch_floats(dim) floats.
void kda_recurrent(const float* q, const float* k, const float* v, const float* g,
                   const float* beta, int64_t n, int64_t dim, int64_t stride, int64_t beta_stride,
                   float* state, float* o, float* scratch);
int64_t kda_recurrent_scratch_floats(int64_t dim);

// The same result computed `chunk` tokens at a time (the WY form of fla's chunk_kda with the
// in-chunk decays formed as running products, so no exponent is ever positive). Equal to the
// recurrence up to rounding. scratch: kda_chunked_scratch_floats(dim, chunk) floats.
void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t n, int64_t dim, int64_t stride, int64_t beta_stride, int64_t chunk,
                 float* state, float* o, float* scratch);
int64_t kda_chunked_scratch_floats(int64_t dim, int64_t chunk);

}  // namespace deltafin::kernels
