// KDA forward: projections and gates for all rows at once, then the delta rule per head in
// parallel (each head's state is independent), then the gated per-head norm and o_proj.
#include "model/kda.h"

#include <cmath>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/kda.h"
#include "kernels/short_conv.h"

namespace deltafin::model {

void KdaState::reset(const KdaShape& shape) {
  s.assign(shape.n_heads * shape.head_dim * shape.head_dim, 0.0f);
  conv.assign(3 * (shape.conv_kernel - 1) * shape.width(), 0.0f);
}

void kda_forward(const KdaShape& shape, const KdaWeights& w, const float* x, int64_t n,
                 KdaState& state, KdaMode mode, KdaWorkspace& ws, float* out) {
  const int64_t p = shape.width(), nh = shape.n_heads, dim = shape.head_dim;
  float *q_in = ws.q_in.get(n * p), *k_in = ws.k_in.get(n * p), *v_in = ws.v_in.get(n * p);
  float *q = ws.q.get(n * p), *k = ws.k.get(n * p), *v = ws.v.get(n * p);
  float *g = ws.g.get(n * p), *gate = ws.gate.get(n * p), *beta = ws.beta.get(n * nh);
  float* low = ws.low.get(n * dim);
  kernels::matmul(w.q_proj, x, n, q_in);
  kernels::matmul(w.k_proj, x, n, k_in);
  kernels::matmul(w.v_proj, x, n, v_in);
  kernels::matmul(w.f_a, x, n, low);
  kernels::matmul(w.f_b, low, n, g);
  kernels::matmul(w.b_proj, x, n, beta);
  if (!w.g_proj.empty()) {
    kernels::matmul(w.g_proj, x, n, gate);
  } else {
    kernels::matmul(w.g_a, x, n, low);
    kernels::matmul(w.g_b, low, n, gate);
  }

  const int64_t kernel = shape.conv_kernel, hist = (kernel - 1) * p;
  kernels::short_conv_silu(q_in, n, p, kernel, w.q_conv.data(), state.conv.data(), q);
  kernels::short_conv_silu(k_in, n, p, kernel, w.k_conv.data(), state.conv.data() + hist, k);
  kernels::short_conv_silu(v_in, n, p, kernel, w.v_conv.data(), state.conv.data() + 2 * hist, v);
  kernels::l2norm_rows(q, n * nh, dim, 1.0f / std::sqrt(static_cast<float>(dim)));
  kernels::l2norm_rows(k, n * nh, dim, 1.0f);
  if (shape.gate == KdaGate::kLowerBound) {
    kernels::kda_decay_lower_bound(g, n, nh, dim, w.a_log.data(), w.dt_bias.data(),
                                   shape.gate_lower_bound);
  } else {
    kernels::kda_decay_softplus(g, n, nh, dim, w.a_log.data(), w.dt_bias.data());
  }
  kernels::apply_sigmoid(beta, n * nh);

  const bool chunked = mode == KdaMode::kChunked || (mode == KdaMode::kAuto && n > 1);
  const int64_t per_head = chunked
                               ? kernels::kda_chunked_scratch_floats(dim, kernels::kKdaChunkTokens)
                               : kernels::kda_recurrent_scratch_floats(dim);
  float* heads = ws.heads.get(nh * per_head);
  float* o = ws.o.get(n * p);
  base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
    for (int64_t h = static_cast<int64_t>(hb); h < static_cast<int64_t>(he); ++h) {
      const int64_t off = h * dim;
      float* s = state.s.data() + h * dim * dim;
      if (chunked) {
        kernels::kda_chunked(q + off, k + off, v + off, g + off, beta + h, n, dim, p, nh,
                             kernels::kKdaChunkTokens, s, o + off, heads + h * per_head);
      } else {
        kernels::kda_recurrent(q + off, k + off, v + off, g + off, beta + h, n, dim, p, nh, s,
                               o + off, heads + h * per_head);
      }
    }
  });

  // Per-head RMSNorm, then the sigmoid output gate (norm first, as FusedRMSNormGated does).
  kernels::rmsnorm_rows(o, w.o_norm.data(), n * nh, dim, shape.norm_eps, o);
  kernels::mul_sigmoid(gate, n * p, o);
  kernels::matmul(w.o_proj, o, n, out);
}

}  // namespace deltafin::model
