// The KDA recurrence a chunk at a time. Within a chunk with incoming state S0 and cumulative log
// decay G_r = Σ_{i≤r} g_i, the state after row r is  S_r = e^{G_r} S0 + Σ_{s≤r} (e^{G_r−G_s} ⊙ k_s)
// u_sᵀ,  where the new values u solve
//   u_r + β_r Σ_{s<r} [k_r · (e^{G_r−G_s} ⊙ k_s)] u_s = β_r (v_r − S0ᵀ(e^{G_r} ⊙ k_r)),
// and o_r = S0ᵀ(e^{G_r} ⊙ q_r) + Σ_{s≤r} [q_r · (e^{G_r−G_s} ⊙ k_s)] u_s. The two products with
// S0 and the state update are matrix products (the shared f32 matmul); the rest is O(chunk²·dim).
#include <algorithm>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "kernels/elementwise.h"
#include "kernels/flush_subnormals.h"
#include "kernels/kda.h"
#include "kernels/matmul.h"

namespace deltafin::kernels {
namespace {

// The chunked form's buffers, carved from one scratch block in this order.
struct ChunkScratch {
  float *decay, *cum, *ks, *u;  // [chunk, dim] each
  float *a_kk, *a_qk;           // [chunk, chunk] each
  float* cur;                   // [dim]
  float *xs, *ys;               // [2 · chunk, dim] each
  float *ut, *kst;              // [dim, chunk] each
  float* upd;                   // [dim, dim]

  ChunkScratch(float* p, int64_t dim, int64_t chunk) {
    auto take = [&p](int64_t n) { return std::exchange(p, p + n); };
    decay = take(chunk * dim);
    cum = take(chunk * dim);
    ks = take(chunk * dim);
    u = take(chunk * dim);
    a_kk = take(chunk * chunk);
    a_qk = take(chunk * chunk);
    cur = take(dim);
    xs = take(2 * chunk * dim);
    ys = take(2 * chunk * dim);
    ut = take(dim * chunk);
    kst = take(dim * chunk);
    upd = take(dim * dim);
  }
  static int64_t floats(int64_t dim, int64_t chunk) {
    return 4 * chunk * dim + 2 * chunk * chunk + dim + 4 * chunk * dim + 2 * dim * chunk +
           dim * dim;
  }
};

}  // namespace

int64_t kda_chunked_scratch_floats(int64_t dim, int64_t chunk) {
  return ChunkScratch::floats(dim, chunk);
}

void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t n, int64_t dim, int64_t stride, int64_t beta_stride, int64_t chunk,
                 float* state, float* o, float* scratch) {
  DF_ASSERT(chunk > 0);
  const detail::FlushSubnormals ftz;
  const ChunkScratch b(scratch, dim, chunk);
  const F32Matrix s_mat{state, dim, dim};  // [value, key]
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t m = std::min(chunk, n - t0);
    auto row = [&](const float* base, int64_t r) { return base + (t0 + r) * stride; };
    for (int64_t r = 0; r < m; ++r) {
      const float* gr = row(g, r);
      for (int64_t j = 0; j < dim; ++j) {
        b.decay[r * dim + j] = std::exp(gr[j]);
        b.cum[r * dim + j] = (r == 0 ? 1.0f : b.cum[(r - 1) * dim + j]) * b.decay[r * dim + j];
      }
    }
    // Pair coefficients: carry k_s ⊙ e^{G_r−G_s} forward one row at a time (no positive exponent
    // ever appears, whatever the decay).
    for (int64_t s = 0; s < m; ++s) {
      std::copy(row(k, s), row(k, s) + dim, b.cur);
      b.a_qk[s * chunk + s] = dot(row(q, s), b.cur, dim);
      for (int64_t r = s + 1; r < m; ++r) {
        const float* dr = b.decay + r * dim;
        for (int64_t j = 0; j < dim; ++j) b.cur[j] *= dr[j];
        b.a_kk[r * chunk + s] = beta[(t0 + r) * beta_stride] * dot(row(k, r), b.cur, dim);
        b.a_qk[r * chunk + s] = dot(row(q, r), b.cur, dim);
      }
      std::copy(b.cur, b.cur + dim, b.ks + s * dim);  // e^{G_last−G_s} ⊙ k_s
    }
    // S0ᵀ(e^{G_r} ⊙ k_r) and S0ᵀ(e^{G_r} ⊙ q_r) for every row in one product.
    for (int64_t r = 0; r < m; ++r) {
      const float *kr = row(k, r), *qr = row(q, r), *cr = b.cum + r * dim;
      for (int64_t j = 0; j < dim; ++j) {
        b.xs[r * dim + j] = cr[j] * kr[j];
        b.xs[(m + r) * dim + j] = cr[j] * qr[j];
      }
    }
    matmul_rows(s_mat, b.xs, 2 * m, b.ys, 0, dim);
    // Forward substitution for u, then the outputs.
    for (int64_t r = 0; r < m; ++r) {
      const float* vr = row(v, r);
      const float br = beta[(t0 + r) * beta_stride];
      float* ur = b.u + r * dim;
      for (int64_t c = 0; c < dim; ++c) ur[c] = br * (vr[c] - b.ys[r * dim + c]);
      for (int64_t s = 0; s < r; ++s) {
        const float a = b.a_kk[r * chunk + s];
        const float* us = b.u + s * dim;
        for (int64_t c = 0; c < dim; ++c) ur[c] -= a * us[c];
      }
      float* orow = o + (t0 + r) * stride;
      std::copy(b.ys + (m + r) * dim, b.ys + (m + r + 1) * dim, orow);
      for (int64_t s = 0; s <= r; ++s) {
        const float a = b.a_qk[r * chunk + s];
        const float* us = b.u + s * dim;
        for (int64_t c = 0; c < dim; ++c) orow[c] += a * us[c];
      }
    }
    // S ← S0 · diag(e^{G_last}) + Uᵀ·KS in the [value, key] layout, the sum as one product.
    for (int64_t s = 0; s < m; ++s) {
      for (int64_t c = 0; c < dim; ++c) {
        b.ut[c * m + s] = b.u[s * dim + c];
        b.kst[c * m + s] = b.ks[s * dim + c];
      }
    }
    matmul_rows(F32Matrix{b.kst, dim, m}, b.ut, dim, b.upd, 0, dim);
    const float* clast = b.cum + (m - 1) * dim;
    for (int64_t c = 0; c < dim; ++c) {
      float* srow = state + c * dim;
      for (int64_t j = 0; j < dim; ++j) srow[j] = srow[j] * clast[j] + b.upd[c * dim + j];
    }
  }
}

}  // namespace deltafin::kernels
