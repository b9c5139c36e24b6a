// KDA: the chunked (WY) delta rule against the token recurrence, the full block prefill against
// token-by-token decode, and conv/state carry-over across calls.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/kda.h"
#include "model/test_weights.h"

namespace deltafin::model {
namespace {

using testing::rel_diff;

struct HeadInputs {
  int64_t n, dim;
  std::vector<float> q, k, v, g, beta;
};

// l2-normalized q (pre-scaled) and k, log decays in (lo, 0), beta in (0, 1).
HeadInputs make_inputs(std::mt19937& rng, int64_t n, int64_t dim, float decay_lo) {
  HeadInputs in{n, dim, {}, {}, {}, {}, {}};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  auto unit = [&](float scale) {
    std::vector<float> x(n * dim);
    for (int64_t t = 0; t < n; ++t) {
      float ss = 0.0f;
      for (int64_t j = 0; j < dim; ++j) ss += (x[t * dim + j] = nd(rng)) * x[t * dim + j];
      for (int64_t j = 0; j < dim; ++j) x[t * dim + j] *= scale / std::sqrt(ss);
    }
    return x;
  };
  in.q = unit(1.0f / std::sqrt(static_cast<float>(dim)));
  in.k = unit(1.0f);
  in.v.resize(n * dim);
  in.g.resize(n * dim);
  in.beta.resize(n);
  for (float& x : in.v) x = nd(rng);
  for (float& x : in.g) x = decay_lo * ud(rng);
  for (float& x : in.beta) x = ud(rng);
  return in;
}

TEST(KdaChunked, MatchesRecurrence) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 5, 63, 64, 130}) {
    for (int64_t chunk : {1, 7, 64}) {
      for (float lo : {-5.0f, -60.0f}) {  // K3's bound, and a steep softplus-style decay
        const int64_t dim = 16;
        HeadInputs in = make_inputs(rng, n, dim, lo);
        std::vector<float> s_rec = testing::random_vector(rng, dim * dim, 0.0f, 0.5f);
        std::vector<float> s_chk = s_rec, o_rec(n * dim), o_chk(n * dim);
        kda_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, dim,
                      dim, 1, s_rec.data(), o_rec.data());
        kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, dim, dim,
                    1, chunk, s_chk.data(), o_chk.data());
        EXPECT_LT(rel_diff(o_chk, o_rec), 2e-6) << "n=" << n << " chunk=" << chunk << " lo=" << lo;
        EXPECT_LT(rel_diff(s_chk, s_rec), 2e-6) << "n=" << n << " chunk=" << chunk << " lo=" << lo;
        for (float x : o_chk) ASSERT_TRUE(std::isfinite(x));
      }
    }
  }
}

TEST(KdaChunked, StridedHeadsMatchRecurrence) {
  // Two heads interleaved in rows of width 2·dim, as kda_forward lays them out.
  std::mt19937 rng(2);
  const int64_t n = 40, dim = 8, nh = 2, p = nh * dim;
  HeadInputs a = make_inputs(rng, n * nh, dim, -5.0f);
  for (int64_t h = 0; h < nh; ++h) {
    std::vector<float> s1(dim * dim, 0.0f), s2(dim * dim, 0.0f), o1(n * p), o2(n * p);
    const int64_t off = h * dim;
    kda_recurrent(a.q.data() + off, a.k.data() + off, a.v.data() + off, a.g.data() + off,
                  a.beta.data() + h, n, dim, p, nh, s1.data(), o1.data() + off);
    kda_chunked(a.q.data() + off, a.k.data() + off, a.v.data() + off, a.g.data() + off,
                a.beta.data() + h, n, dim, p, nh, 16, s2.data(), o2.data() + off);
    EXPECT_LT(rel_diff(s2, s1), 2e-6);
    EXPECT_LT(rel_diff(o2, o1), 2e-6);
  }
}

struct KdaFixture {
  KdaShape shape;
  testing::OwnedMatrix q, k, v, fa, fb, b, g, ga, gb, o;
  KdaWeights w;
};

KdaFixture make_kda(std::mt19937& rng, KdaGate gate, bool full_rank) {
  KdaFixture f;
  f.shape = {24, 3, 8, 4, gate, -5.0f, 1e-5f};
  const int64_t d = 24, p = 24, hd = 8;
  f.q = testing::random_bf16(rng, p, d, 0.3f);
  f.k = testing::random_bf16(rng, p, d, 0.3f);
  f.v = testing::random_bf16(rng, p, d, 0.3f);
  f.fa = testing::random_bf16(rng, hd, d, 0.3f);
  f.fb = testing::random_bf16(rng, p, hd, 0.3f);
  f.b = testing::random_bf16(rng, 3, d, 0.3f);
  f.o = testing::random_bf16(rng, d, p, 0.3f);
  f.w.q_proj = f.q.view;
  f.w.k_proj = f.k.view;
  f.w.v_proj = f.v.view;
  f.w.f_a = f.fa.view;
  f.w.f_b = f.fb.view;
  f.w.b_proj = f.b.view;
  f.w.o_proj = f.o.view;
  if (full_rank) {
    f.g = testing::random_bf16(rng, p, d, 0.3f);
    f.w.g_proj = f.g.view;
  } else {
    f.ga = testing::random_bf16(rng, hd, d, 0.3f);
    f.gb = testing::random_bf16(rng, p, hd, 0.3f);
    f.w.g_a = f.ga.view;
    f.w.g_b = f.gb.view;
  }
  f.w.q_conv = testing::random_vector(rng, p * 4, 0.0f, 0.5f);
  f.w.k_conv = testing::random_vector(rng, p * 4, 0.0f, 0.5f);
  f.w.v_conv = testing::random_vector(rng, p * 4, 0.0f, 0.5f);
  f.w.a_log = testing::random_vector(rng, 3, 0.5f, 0.5f);
  f.w.dt_bias = testing::random_vector(rng, p, 0.0f, 1.0f);
  f.w.o_norm = testing::random_vector(rng, hd, 1.0f, 0.1f);
  return f;
}

TEST(KdaForward, PrefillMatchesTokenByToken) {
  for (KdaGate gate : {KdaGate::kLowerBound, KdaGate::kSoftplus}) {
    std::mt19937 rng(3);
    KdaFixture f = make_kda(rng, gate, gate == KdaGate::kLowerBound);
    const int64_t n = 19, d = f.shape.hidden;
    const std::vector<float> x = testing::random_vector(rng, n * d, 0.0f, 1.0f);
    KdaState whole, split, steps;
    whole.reset(f.shape);
    split.reset(f.shape);
    steps.reset(f.shape);
    std::vector<float> out_whole(n * d), out_split(n * d), out_steps(n * d);
    kda_forward(f.shape, f.w, x.data(), n, whole, KdaMode::kChunked, out_whole.data());
    // Two chunked calls carry conv and recurrent state across the boundary.
    kda_forward(f.shape, f.w, x.data(), 7, split, KdaMode::kChunked, out_split.data());
    kda_forward(f.shape, f.w, x.data() + 7 * d, n - 7, split, KdaMode::kChunked,
                out_split.data() + 7 * d);
    for (int64_t t = 0; t < n; ++t)
      kda_forward(f.shape, f.w, x.data() + t * d, 1, steps, KdaMode::kRecurrent,
                  out_steps.data() + t * d);
    EXPECT_LT(rel_diff(out_whole, out_steps), 1e-5);
    EXPECT_LT(rel_diff(out_split, out_steps), 1e-5);
    EXPECT_LT(rel_diff(whole.s, steps.s), 1e-5);
    EXPECT_EQ(whole.conv, steps.conv);  // the last inputs, copied, identical
  }
}

}  // namespace
}  // namespace deltafin::model
