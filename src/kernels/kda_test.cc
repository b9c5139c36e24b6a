// Tests for the KDA kernels: the chunked (WY) form against the token recurrence for every chunk
// length, steep decays, incoming state and heads interleaved in wider rows.
#include "kernels/kda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/test_random.h"

namespace deltafin::kernels {
namespace {

struct HeadInputs {
  int64_t n, dim;
  std::vector<float> q, k, v, g, beta;
};

// max |a - b| / max |b|
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / den;
}

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
    for (int64_t chunk : {int64_t{1}, int64_t{7}, kKdaChunkTokens}) {
      for (float lo : {-5.0f, -60.0f}) {  // K3's bound, and a steep softplus-style decay
        const int64_t dim = 16;
        HeadInputs in = make_inputs(rng, n, dim, lo);
        std::vector<float> s_rec = normal(rng, dim * dim, 0.5f);
        std::vector<float> s_chk = s_rec, o_rec(n * dim), o_chk(n * dim);
        // NaN-filled scratch: every value the kernels read from it they wrote first.
        std::vector<float> rec_scratch(kda_recurrent_scratch_floats(dim), NAN);
        std::vector<float> chk_scratch(kda_chunked_scratch_floats(dim, chunk), NAN);
        kda_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, dim,
                      dim, 1, s_rec.data(), o_rec.data(), rec_scratch.data());
        kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, dim, dim,
                    1, chunk, s_chk.data(), o_chk.data(), chk_scratch.data());
        EXPECT_LT(rel_diff(o_chk, o_rec), 2e-6) << "n=" << n << " chunk=" << chunk << " lo=" << lo;
        EXPECT_LT(rel_diff(s_chk, s_rec), 2e-6) << "n=" << n << " chunk=" << chunk << " lo=" << lo;
        for (float x : o_chk) ASSERT_TRUE(std::isfinite(x));
      }
    }
  }
}

TEST(KdaChunked, StridedHeadsMatchRecurrence) {
  // Two heads interleaved in rows of width 2·dim, as the KDA block lays them out.
  std::mt19937 rng(2);
  const int64_t n = 40, dim = 8, nh = 2, p = nh * dim;
  HeadInputs a = make_inputs(rng, n * nh, dim, -5.0f);
  std::vector<float> rec_scratch(kda_recurrent_scratch_floats(dim));
  std::vector<float> chk_scratch(kda_chunked_scratch_floats(dim, 16));
  for (int64_t h = 0; h < nh; ++h) {
    std::vector<float> s1(dim * dim, 0.0f), s2(dim * dim, 0.0f), o1(n * p), o2(n * p);
    const int64_t off = h * dim;
    kda_recurrent(a.q.data() + off, a.k.data() + off, a.v.data() + off, a.g.data() + off,
                  a.beta.data() + h, n, dim, p, nh, s1.data(), o1.data() + off, rec_scratch.data());
    kda_chunked(a.q.data() + off, a.k.data() + off, a.v.data() + off, a.g.data() + off,
                a.beta.data() + h, n, dim, p, nh, 16, s2.data(), o2.data() + off,
                chk_scratch.data());
    EXPECT_LT(rel_diff(s2, s1), 2e-6);
    EXPECT_LT(rel_diff(o2, o1), 2e-6);
  }
}

TEST(KdaRecurrent, OneTokenFromZeroState) {
  // From S = 0: S = β k vᵀ (as Sᵀ: row c = β v_c k), o_c = β v_c (k · q).
  const int64_t dim = 3;
  const std::vector<float> q = {0.5f, 0.0f, 0.5f}, k = {1.0f, 0.0f, 0.0f}, v = {2.0f, -1.0f, 4.0f};
  const std::vector<float> g = {-1.0f, -2.0f, -3.0f}, beta = {0.5f};
  std::vector<float> s(dim * dim, 0.0f), o(dim), scratch(kda_recurrent_scratch_floats(dim));
  kda_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), 1, dim, dim, 1, s.data(),
                o.data(), scratch.data());
  EXPECT_EQ(o, (std::vector<float>{0.5f, -0.25f, 1.0f}));
  EXPECT_EQ(s, (std::vector<float>{1.0f, 0.0f, 0.0f, -0.5f, 0.0f, 0.0f, 2.0f, 0.0f, 0.0f}));
}

}  // namespace
}  // namespace deltafin::kernels
