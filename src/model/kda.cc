// KDA forward: projections and gates for all rows at once, then the delta rule per head in
// parallel (each head's state is independent), then the gated per-head norm and o_proj.
#include "model/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/kda.h"
#include "kernels/short_conv.h"

namespace deltafin::model {

void KdaState::reset(const KdaShape& shape) {
  s.assign(shape.n_heads * shape.head_dim * shape.head_dim, 0.0f);
  conv.assign(3 * (shape.conv_kernel - 1) * shape.width(), 0.0f);
  tentative.rows = 0;
}

uint64_t kda_tentative_bytes_per_row(const KdaShape& shape) {
  return static_cast<uint64_t>(7 * shape.width() + shape.n_heads) * sizeof(float);
}

namespace {

void log_rows(std::vector<float>& log, const float* rows, int64_t count) {
  log.assign(rows, rows + count);
}

}  // namespace

void kda_forward(const KdaShape& shape, const KdaWeights& w, const float* x, int64_t n,
                 KdaState& state, KdaMode mode, KdaWorkspace& ws, float* out, bool tentative) {
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
  // A tentative pass convolves over a copy of the history; its inputs are logged for the commit.
  float* conv = state.conv.data();
  if (tentative) {
    conv = ws.conv.get(3 * hist);
    std::copy(state.conv.begin(), state.conv.end(), conv);
    KdaTentative& t = state.tentative;
    log_rows(t.q_in, q_in, n * p);
    log_rows(t.k_in, k_in, n * p);
    log_rows(t.v_in, v_in, n * p);
  }
  kernels::short_conv_silu(q_in, n, p, kernel, w.q_conv.data(), conv, q);
  kernels::short_conv_silu(k_in, n, p, kernel, w.k_conv.data(), conv + hist, k);
  kernels::short_conv_silu(v_in, n, p, kernel, w.v_conv.data(), conv + 2 * hist, v);
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
  DF_ASSERT(!(tentative && chunked));  // tentative rows take the decode form
  if (tentative) {
    KdaTentative& t = state.tentative;
    log_rows(t.q, q, n * p);
    log_rows(t.k, k, n * p);
    log_rows(t.v, v, n * p);
    log_rows(t.g, g, n * p);
    log_rows(t.beta, beta, n * nh);
    t.rows = n;
  }
  // A tentative pass runs each head on a copy of its state, placed after the kernel's scratch.
  const int64_t per_head =
      (chunked ? kernels::kda_chunked_scratch_floats(dim, kernels::kKdaChunkTokens)
               : kernels::kda_recurrent_scratch_floats(dim)) +
      (tentative ? dim * dim : 0);
  float* heads = ws.heads.get(nh * per_head);
  float* o = ws.o.get(n * p);
  base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
    for (int64_t h = static_cast<int64_t>(hb); h < static_cast<int64_t>(he); ++h) {
      const int64_t off = h * dim;
      float* s = state.s.data() + h * dim * dim;
      if (tentative) {
        float* copy = heads + (h + 1) * per_head - dim * dim;
        std::memcpy(copy, s, dim * dim * sizeof(float));
        s = copy;
      }
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

void kda_commit(const KdaShape& shape, KdaState& state, int64_t keep, KdaWorkspace& ws) {
  KdaTentative& t = state.tentative;
  DF_ASSERT(keep >= 0 && keep <= t.rows);
  const int64_t p = shape.width(), nh = shape.n_heads, dim = shape.head_dim;
  if (keep > 0) {
    // The same serial kernel over the same rows as decode steps: the same state, bit for bit.
    const int64_t per_head = kernels::kda_recurrent_scratch_floats(dim);
    float* heads = ws.heads.get(nh * per_head);
    float* o = ws.o.get(keep * p);  // the rows' outputs were taken in the pass
    base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
      for (int64_t h = static_cast<int64_t>(hb); h < static_cast<int64_t>(he); ++h) {
        const int64_t off = h * dim;
        kernels::kda_recurrent(t.q.data() + off, t.k.data() + off, t.v.data() + off,
                               t.g.data() + off, t.beta.data() + h, keep, dim, p, nh,
                               state.s.data() + h * dim * dim, o + off, heads + h * per_head);
      }
    });
    const int64_t kernel = shape.conv_kernel, hist = (kernel - 1) * p;
    kernels::short_conv_push(t.q_in.data(), keep, p, kernel, state.conv.data());
    kernels::short_conv_push(t.k_in.data(), keep, p, kernel, state.conv.data() + hist);
    kernels::short_conv_push(t.v_in.data(), keep, p, kernel, state.conv.data() + 2 * hist);
  }
  t.rows = 0;  // the vectors keep their capacity for the next pass
}

}  // namespace deltafin::model
