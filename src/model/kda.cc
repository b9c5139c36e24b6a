// KDA forward: projections and gates for all rows at once, then the delta rule per head in
// parallel (each head's state is independent), then the gated per-head norm and o_proj.
#include "model/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "model/ops.h"

namespace deltafin::model {
namespace {

// Causal depthwise conv (kernel K) + SiLU over n rows of width p, in place on `x`; `hist` holds
// the K-1 previous inputs [K-1, p], oldest first, and is advanced to the last K-1 inputs.
void short_conv_silu(float* x, int64_t n, int64_t p, int64_t kernel, const float* w, float* hist) {
  const int64_t h = kernel - 1;
  std::vector<float> in((h + n) * p);  // [history; new rows]
  std::memcpy(in.data(), hist, h * p * sizeof(float));
  std::memcpy(in.data() + h * p, x, n * p * sizeof(float));
  for (int64_t t = 0; t < n; ++t) {
    float* y = x + t * p;
    for (int64_t c = 0; c < p; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < kernel; ++i) acc += w[c * kernel + i] * in[(t + i) * p + c];
      y[c] = silu(acc);
    }
  }
  std::memcpy(hist, in.data() + n * p, h * p * sizeof(float));
}

// x_h ← x_h / sqrt(Σ x_h² + 1e-6) · scale for every head of every row.
void l2norm_heads(float* x, int64_t n, int64_t n_heads, int64_t dim, float scale) {
  for (int64_t r = 0; r < n * n_heads; ++r) {
    float* v = x + r * dim;
    const float ss = dot(v, v, dim);
    const float inv = 1.0f / std::sqrt(ss + 1e-6f);
    for (int64_t i = 0; i < dim; ++i) v[i] = v[i] * inv * scale;
  }
}

}  // namespace

void KdaState::reset(const KdaShape& shape) {
  s.assign(shape.n_heads * shape.head_dim * shape.head_dim, 0.0f);
  conv.assign(3 * (shape.conv_kernel - 1) * shape.width(), 0.0f);
}

void kda_recurrent(const float* q, const float* k, const float* v, const float* g,
                   const float* beta, int64_t n, int64_t dim, int64_t stride, int64_t beta_stride,
                   float* state, float* o) {
  const FlushSubnormals ftz;
  std::vector<float> decay(dim);
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

// Within a chunk with incoming state S0 and cumulative log decay G_r = Σ_{i≤r} g_i, the state after
// row r is  S_r = e^{G_r} S0 + Σ_{s≤r} (e^{G_r−G_s} ⊙ k_s) u_sᵀ,  where the new values u solve
//   u_r + β_r Σ_{s<r} [k_r · (e^{G_r−G_s} ⊙ k_s)] u_s = β_r (v_r − S0ᵀ(e^{G_r} ⊙ k_r)),
// and o_r = S0ᵀ(e^{G_r} ⊙ q_r) + Σ_{s≤r} [q_r · (e^{G_r−G_s} ⊙ k_s)] u_s. The two products with
// S0 and the state update are matrix products (the shared f32 matmul); the rest is O(chunk²·dim).
void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t n, int64_t dim, int64_t stride, int64_t beta_stride, int64_t chunk,
                 float* state, float* o) {
  DF_ASSERT(chunk > 0);
  const FlushSubnormals ftz;
  std::vector<float> decay(chunk * dim), cum(chunk * dim), ks(chunk * dim), u(chunk * dim);
  std::vector<float> a_kk(chunk * chunk), a_qk(chunk * chunk), cur(dim);
  std::vector<float> xs(2 * chunk * dim), ys(2 * chunk * dim), ut(dim * chunk), kst(dim * chunk),
      upd(dim * dim);
  const kernels::F32Matrix s_mat{state, dim, dim};  // [value, key]
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t m = std::min(chunk, n - t0);
    auto row = [&](const float* base, int64_t r) { return base + (t0 + r) * stride; };
    for (int64_t r = 0; r < m; ++r) {
      const float* gr = row(g, r);
      for (int64_t j = 0; j < dim; ++j) {
        decay[r * dim + j] = std::exp(gr[j]);
        cum[r * dim + j] = (r == 0 ? 1.0f : cum[(r - 1) * dim + j]) * decay[r * dim + j];
      }
    }
    // Pair coefficients: carry k_s ⊙ e^{G_r−G_s} forward one row at a time (no positive exponent
    // ever appears, whatever the decay).
    for (int64_t s = 0; s < m; ++s) {
      std::copy(row(k, s), row(k, s) + dim, cur.begin());
      a_qk[s * chunk + s] = dot(row(q, s), cur.data(), dim);
      for (int64_t r = s + 1; r < m; ++r) {
        const float* dr = decay.data() + r * dim;
        for (int64_t j = 0; j < dim; ++j) cur[j] *= dr[j];
        a_kk[r * chunk + s] = beta[(t0 + r) * beta_stride] * dot(row(k, r), cur.data(), dim);
        a_qk[r * chunk + s] = dot(row(q, r), cur.data(), dim);
      }
      std::copy(cur.begin(), cur.end(), ks.begin() + s * dim);  // e^{G_last−G_s} ⊙ k_s
    }
    // S0ᵀ(e^{G_r} ⊙ k_r) and S0ᵀ(e^{G_r} ⊙ q_r) for every row in one product.
    for (int64_t r = 0; r < m; ++r) {
      const float *kr = row(k, r), *qr = row(q, r), *cr = cum.data() + r * dim;
      for (int64_t j = 0; j < dim; ++j) {
        xs[r * dim + j] = cr[j] * kr[j];
        xs[(m + r) * dim + j] = cr[j] * qr[j];
      }
    }
    kernels::matmul_rows(s_mat, xs.data(), 2 * m, ys.data(), 0, dim);
    // Forward substitution for u, then the outputs.
    for (int64_t r = 0; r < m; ++r) {
      const float* vr = row(v, r);
      const float b = beta[(t0 + r) * beta_stride];
      float* ur = u.data() + r * dim;
      for (int64_t c = 0; c < dim; ++c) ur[c] = b * (vr[c] - ys[r * dim + c]);
      for (int64_t s = 0; s < r; ++s) {
        const float a = a_kk[r * chunk + s];
        const float* us = u.data() + s * dim;
        for (int64_t c = 0; c < dim; ++c) ur[c] -= a * us[c];
      }
      float* orow = o + (t0 + r) * stride;
      std::copy(ys.begin() + (m + r) * dim, ys.begin() + (m + r + 1) * dim, orow);
      for (int64_t s = 0; s <= r; ++s) {
        const float a = a_qk[r * chunk + s];
        const float* us = u.data() + s * dim;
        for (int64_t c = 0; c < dim; ++c) orow[c] += a * us[c];
      }
    }
    // S ← S0 · diag(e^{G_last}) + Uᵀ·KS in the [value, key] layout, the sum as one product.
    for (int64_t s = 0; s < m; ++s) {
      for (int64_t c = 0; c < dim; ++c) {
        ut[c * m + s] = u[s * dim + c];
        kst[c * m + s] = ks[s * dim + c];
      }
    }
    kernels::matmul_rows(kernels::F32Matrix{kst.data(), dim, m}, ut.data(), dim, upd.data(), 0,
                         dim);
    const float* clast = cum.data() + (m - 1) * dim;
    for (int64_t c = 0; c < dim; ++c) {
      float* srow = state + c * dim;
      for (int64_t j = 0; j < dim; ++j) srow[j] = srow[j] * clast[j] + upd[c * dim + j];
    }
  }
}

void kda_forward(const KdaShape& shape, const KdaWeights& w, const float* x, int64_t n,
                 KdaState& state, KdaMode mode, float* out) {
  const int64_t p = shape.width(), nh = shape.n_heads, dim = shape.head_dim;
  std::vector<float> q(n * p), k(n * p), v(n * p), g(n * p), gate(n * p), beta(n * nh);
  std::vector<float> low(n * dim);
  kernels::matmul(w.q_proj, x, n, q.data());
  kernels::matmul(w.k_proj, x, n, k.data());
  kernels::matmul(w.v_proj, x, n, v.data());
  kernels::matmul(w.f_a, x, n, low.data());
  kernels::matmul(w.f_b, low.data(), n, g.data());
  kernels::matmul(w.b_proj, x, n, beta.data());
  if (!w.g_proj.empty()) {
    kernels::matmul(w.g_proj, x, n, gate.data());
  } else {
    kernels::matmul(w.g_a, x, n, low.data());
    kernels::matmul(w.g_b, low.data(), n, gate.data());
  }

  const int64_t hist = (shape.conv_kernel - 1) * p;
  short_conv_silu(q.data(), n, p, shape.conv_kernel, w.q_conv.data(), state.conv.data());
  short_conv_silu(k.data(), n, p, shape.conv_kernel, w.k_conv.data(), state.conv.data() + hist);
  short_conv_silu(v.data(), n, p, shape.conv_kernel, w.v_conv.data(), state.conv.data() + 2 * hist);
  l2norm_heads(q.data(), n, nh, dim, 1.0f / std::sqrt(static_cast<float>(dim)));
  l2norm_heads(k.data(), n, nh, dim, 1.0f);

  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      const float a = std::exp(w.a_log[h]);
      float* gh = g.data() + t * p + h * dim;
      const float* bias = w.dt_bias.data() + h * dim;
      for (int64_t j = 0; j < dim; ++j) {
        const float f = gh[j] + bias[j];
        gh[j] = shape.gate == KdaGate::kLowerBound ? shape.gate_lower_bound * sigmoid(a * f)
                                                   : -a * softplus(f);
      }
      beta[t * nh + h] = sigmoid(beta[t * nh + h]);
    }
  }

  std::vector<float> o(n * p);
  base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
    for (size_t h = hb; h < he; ++h) {
      const int64_t off = static_cast<int64_t>(h) * dim;
      float* s = state.s.data() + h * dim * dim;
      if (mode == KdaMode::kChunked) {
        kda_chunked(q.data() + off, k.data() + off, v.data() + off, g.data() + off, beta.data() + h,
                    n, dim, p, nh, 64, s, o.data() + off);
      } else {
        kda_recurrent(q.data() + off, k.data() + off, v.data() + off, g.data() + off,
                      beta.data() + h, n, dim, p, nh, s, o.data() + off);
      }
    }
  });

  // Per-head RMSNorm, then the sigmoid output gate (norm first, as FusedRMSNormGated does).
  rmsnorm_rows(o.data(), w.o_norm.data(), n * nh, dim, shape.norm_eps, o.data());
  for (int64_t i = 0; i < n * p; ++i) o[i] *= sigmoid(gate[i]);
  kernels::matmul(w.o_proj, o.data(), n, out);
}

}  // namespace deltafin::model
