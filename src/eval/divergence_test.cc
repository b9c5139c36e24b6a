// The harness's figures against values worked out by hand on constructed distributions.
#include "eval/divergence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace deltafin::eval {
namespace {

// Logits whose softmax is exactly `probs` (log p is a valid logit vector).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

TEST(LogSoftmax, IsStableForHugeLogits) {
  // Shifting by 1e30 would overflow exp() without the max subtracted first.
  const std::vector<double> lp = log_softmax(std::vector<float>{1e30f, 1e30f});
  EXPECT_DOUBLE_EQ(lp[0], -std::log(2.0));
  EXPECT_DOUBLE_EQ(lp[1], -std::log(2.0));
  const std::vector<double> lq = log_softmax(std::vector<float>{0.0f, -1e30f});
  EXPECT_EQ(lq[0], 0.0);
  EXPECT_TRUE(std::isinf(lq[1]) || lq[1] < -1e29);
}

TEST(Kl, EqualDistributionsGiveExactlyZero) {
  const std::vector<float> x{1.5f, -2.0f, 0.25f, 3.0f, -7.0f, 0.0f};
  PositionFigures f = compare_position(x, x, 3);
  EXPECT_EQ(f.kl, 0.0);  // bit-exact, not "near"
  EXPECT_EQ(f.nll_exact, f.nll_variant);
  EXPECT_TRUE(f.top1_agrees());
  EXPECT_EQ(f.top5_overlap, 1.0);
  // A constant shift of every logit leaves the distribution as it is.
  std::vector<float> shifted = x;
  for (float& v : shifted) v += 4.0f;  // exact in float for these values
  EXPECT_NEAR(compare_position(x, shifted, 0).kl, 0.0, 1e-15);
}

TEST(Kl, TwoPointDistributionsByHand) {
  // P = (1/2, 1/2), Q = (1/4, 3/4): KL(P||Q) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3).
  const std::vector<float> p{0.0f, 0.0f};
  const std::vector<float> q = logits_of({0.25, 0.75});
  const PositionFigures f = compare_position(p, q, 1);
  EXPECT_NEAR(f.kl, 0.5 * std::log(4.0 / 3.0), 1e-7);  // 0.143841...
  EXPECT_NEAR(f.nll_exact, std::log(2.0), 1e-12);      // -ln 1/2
  EXPECT_NEAR(f.nll_variant, -std::log(0.75), 1e-7);   // 0.287682...
  EXPECT_EQ(f.top1_exact, 0);                          // a tie goes to the lower id
  EXPECT_EQ(f.top1_variant, 1);
  EXPECT_FALSE(f.top1_agrees());
  EXPECT_EQ(f.top5_overlap, 1.0);  // two ids: both sets hold both
}

TEST(Kl, IsNotSymmetricAndMatchesTheFormula) {
  // P = (0.7, 0.2, 0.1), Q = (0.1, 0.2, 0.7):
  // KL(P||Q) = 0.7 ln 7 + 0.2 ln 1 + 0.1 ln(1/7) = 0.6 ln 7 = 1.167546...
  const std::vector<double> lp{std::log(0.7), std::log(0.2), std::log(0.1)};
  const std::vector<double> lq{std::log(0.1), std::log(0.2), std::log(0.7)};
  EXPECT_NEAR(kl_divergence(lp, lq), 0.6 * std::log(7.0), 1e-12);
  // P = (0.9, 0.1), Q = (0.5, 0.5): 0.9 ln 1.8 + 0.1 ln 0.2 = 0.368064...;
  // the other way: 0.5 ln(0.5/0.9) + 0.5 ln 5 = 0.510826...
  const std::vector<double> a{std::log(0.9), std::log(0.1)};
  const std::vector<double> b{std::log(0.5), std::log(0.5)};
  EXPECT_NEAR(kl_divergence(a, b), 0.9 * std::log(1.8) + 0.1 * std::log(0.2), 1e-12);
  EXPECT_NEAR(kl_divergence(b, a), 0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(5.0), 1e-12);
  EXPECT_NEAR(kl_divergence(a, b), 0.368064, 1e-6);
  EXPECT_NEAR(kl_divergence(b, a), 0.510826, 1e-6);
}

TEST(Kl, ZeroProbabilityTermsAddNothing) {
  const double inf = INFINITY;
  // P = (1, 0), Q = (1/2, 1/2): KL = ln 2; the p = 0 term must not give 0 * -inf = NaN.
  const std::vector<double> lp{0.0, -inf};
  const std::vector<double> lq{std::log(0.5), std::log(0.5)};
  EXPECT_NEAR(kl_divergence(lp, lq), std::log(2.0), 1e-15);
}

TEST(Kl, FromLogitsAgreesWithTheFormula) {
  const std::vector<double> probs{0.4, 0.3, 0.2, 0.05, 0.05};
  const std::vector<double> other{0.2, 0.2, 0.2, 0.2, 0.2};
  double want = 0;
  for (size_t i = 0; i < probs.size(); ++i) want += probs[i] * std::log(probs[i] / other[i]);
  const PositionFigures f = compare_position(logits_of(probs), logits_of(other), 2);
  EXPECT_NEAR(f.kl, want, 1e-7);  // logits are float: ~1e-7 relative
  EXPECT_GT(f.kl, 0.0);
  EXPECT_NEAR(f.nll_exact, -std::log(0.2), 1e-7);
  EXPECT_NEAR(f.nll_variant, std::log(5.0), 1e-7);
}

TEST(TopK, OverlapCountsCommonIdsOverFive) {
  // Exact's top 5: 9,8,7,6,5; the variant swaps 5 out for 0 and reorders: overlap 4/5.
  std::vector<float> exact(10), variant(10);
  for (int i = 0; i < 10; ++i) exact[i] = static_cast<float>(i);
  variant = exact;
  variant[0] = 20.0f;  // now the variant's top 1
  variant[5] = -1.0f;
  EXPECT_EQ(top_ids(exact, 5), (std::vector<int32_t>{9, 8, 7, 6, 5}));
  EXPECT_EQ(top_ids(variant, 5), (std::vector<int32_t>{0, 9, 8, 7, 6}));
  const PositionFigures f = compare_position(exact, variant, 9);
  EXPECT_DOUBLE_EQ(f.top5_overlap, 0.8);
  EXPECT_FALSE(f.top1_agrees());
  EXPECT_GT(f.kl, 0.0);
  EXPECT_EQ(top_ids(std::vector<float>{1, 3, 3, 2}, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(overlap(std::vector<int32_t>{1, 2, 3, 4, 5}, std::vector<int32_t>{6, 7, 8, 9, 10}),
            0.0);
}

TEST(Percentile, NearestRank) {
  EXPECT_EQ(percentile({1, 2}, 50), 1);
  EXPECT_EQ(percentile({3, 1, 2}, 50), 2);
  EXPECT_EQ(percentile({5}, 99), 5);
  EXPECT_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_EQ(percentile({4, 1, 3, 2}, 100), 4);
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  EXPECT_EQ(percentile(hundred, 99), 99);
  EXPECT_EQ(percentile(hundred, 50), 50);
  hundred.push_back(1000);  // 101 values: ceil(0.99 * 101) = 100th smallest
  EXPECT_EQ(percentile(hundred, 99), 100);
}

TEST(Tally, TotalsByHand) {
  Tally t;
  PositionFigures a, b, c;
  a.kl = 0.0, a.nll_exact = 1.0, a.nll_variant = 1.5, a.top1_exact = a.top1_variant = 3;
  a.top5_overlap = 1.0;
  b.kl = 0.3, b.nll_exact = 2.0, b.nll_variant = 2.5, b.top1_exact = 1, b.top1_variant = 2;
  b.top5_overlap = 0.6;
  c.kl = 0.1, c.nll_exact = 3.0, c.nll_variant = 2.0, c.top1_exact = c.top1_variant = 0;
  c.top5_overlap = 0.8;
  t.add(10, a);
  t.add(11, b);
  t.add(12, c);
  const Summary s = t.summary();
  EXPECT_EQ(s.positions, 3);
  EXPECT_NEAR(s.kl.mean, 0.4 / 3, 1e-15);
  EXPECT_EQ(s.kl.p50, 0.1);
  EXPECT_EQ(s.kl.p99, 0.3);
  EXPECT_EQ(s.kl.max, 0.3);
  EXPECT_EQ(t.positions()[s.kl.max_index], 11);
  EXPECT_DOUBLE_EQ(s.nll_exact, 2.0);
  EXPECT_DOUBLE_EQ(s.nll_variant, 2.0);
  EXPECT_EQ(s.top1_agreements, 2);
  EXPECT_DOUBLE_EQ(s.top1_agreement(), 2.0 / 3);
  EXPECT_NEAR(s.top5_overlap, 0.8, 1e-15);
  EXPECT_EQ(Tally().summary().positions, 0);
}

TEST(Greedy, FirstDifference) {
  const std::vector<int32_t> a{1, 2, 3, 4};
  EXPECT_EQ(first_difference(a, a), std::nullopt);
  EXPECT_EQ(first_difference(a, std::vector<int32_t>{1, 2, 9, 4}), 2);
  EXPECT_EQ(first_difference(a, std::vector<int32_t>{1, 2}), 2);
  EXPECT_EQ(first_difference(a, std::vector<int32_t>{7}), 0);
}

TEST(NonFinite, FindsTheFirst) {
  EXPECT_EQ(first_non_finite(std::vector<float>{1, 2, 3}), std::nullopt);
  EXPECT_EQ(first_non_finite(std::vector<float>{1, NAN, INFINITY}), 1);
}

}  // namespace
}  // namespace deltafin::eval
