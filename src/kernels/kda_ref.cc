// The KDA recurrence token by token (the definition the chunked form is tested against, and the
// decode path) and the forget gates.
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/flush_subnormals.h"
#include "kernels/kda.h"

namespace deltafin::kernels {

void kda_decay_lower_bound(float* g, int64_t n, int64_t n_heads, int64_t dim, const float* a_log,
                           const float* dt_bias, float lower_bound) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const float a = std::exp(a_log[h]);
      float* gh = g + (t * n_heads + h) * dim;
      const float* bias = dt_bias + h * dim;
      for (int64_t j = 0; j < dim; ++j) gh[j] = lower_bound * sigmoid(a * (gh[j] + bias[j]));
    }
  }
}

void kda_decay_softplus(float* g, int64_t n, int64_t n_heads, int64_t dim, const float* a_log,
                        const float* dt_bias) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const float a = std::exp(a_log[h]);
      float* gh = g + (t * n_heads + h) * dim;
      const float* bias = dt_bias + h * dim;
      for (int64_t j = 0; j < dim; ++j) gh[j] = -a * softplus(gh[j] + bias[j]);
    }
  }
}

int64_t kda_recurrent_scratch_floats(int64_t dim) { return dim; }

void kda_recurrent(const float* q, const float* k, const float* v, const float* g,
                   const float* beta, int64_t n, int64_t dim, int64_t stride, int64_t beta_stride,
                   float* state, float* o, float* scratch) {
  const detail::FlushSubnormals ftz;
  float* decay = scratch;  // [dim]
  for (int64_t t = 0; t < n; ++t) {
    const float* qt = q + t * stride;
    const float* kt = k + t * stride;
    const float* vt = v + t * stride;
    const float* gt = g + t * stride;
    float* ot = o + t * stride;
    const float b = beta[t * beta_stride];
    for (int64_t j = 0; j < dim; ++j) decay[j] = std::exp(gt[j]);
    // Row c of the state holds value channel c over all key channels: decay it, read (Sᵀk)[c],
    // apply the rank-one update and read (Sᵀq)[c] in one pass over the row.
    for (int64_t c = 0; c < dim; ++c) {
      float* row = state + c * dim;
      for (int64_t j = 0; j < dim; ++j) row[j] *= decay[j];
      const float w = b * (vt[c] - dot(row, kt, dim));
      for (int64_t j = 0; j < dim; ++j) row[j] += w * kt[j];
      ot[c] = dot(row, qt, dim);
    }
  }
}

}  // namespace deltafin::kernels
