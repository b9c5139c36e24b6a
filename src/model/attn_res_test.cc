// The residual stream's block bookkeeping: which partial sums become blocks, when the partial sum
// restarts, and that without AttnRes it is the plain running sum.
#include "model/attn_res.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace deltafin::model {
namespace {

constexpr int64_t kHidden = 3;

std::vector<float> row(float a, float b, float c) { return {a, b, c}; }

std::vector<float> mix(const ResidualStream& s, const AttnResSite& site) {
  std::vector<float> out(kHidden);
  s.mix(site, out.data());
  return out;
}

TEST(ResidualStream, BlocksAreThePartialSumsAtBoundaries) {
  ResidualStream s;
  const std::vector<float> e = row(1, 2, 3);
  std::copy(e.begin(), e.end(), s.begin(1, kHidden, 5, 2, 1e-6f));
  const AttnResSite uniform{std::vector<float>(kHidden, 0.0f)};  // equal scores: the mean
  EXPECT_EQ(mix(s, uniform), e);  // no block yet: the partial sum itself
  s.enter_layer(0);               // block 0 = e; the partial sum restarts
  const std::vector<float> a0 = row(4, 0, 2), m0 = row(0, 6, 2), a1 = row(2, 2, 2);
  s.add(a0.data());
  s.add(m0.data());
  // Sources e and a0 + m0 = (4, 6, 4), each weighted 1/2.
  EXPECT_EQ(mix(s, uniform), row(2.5f, 4, 3.5f));
  s.enter_layer(1);  // not a boundary
  s.add(a1.data());  // partial (6, 8, 6)
  s.enter_layer(2);  // block 1 = (6, 8, 6)
  s.add(a0.data());  // restarts: partial = a0
  // Sources e, (6, 8, 6), a0, each weighted by the softmax of three zero scores.
  const float p = 1.0f / 3.0f;
  std::vector<float> want(kHidden, 0.0f);
  for (const std::vector<float>& v : {e, row(6, 8, 6), a0})
    for (int64_t j = 0; j < kHidden; ++j) want[j] += p * v[j];
  EXPECT_EQ(mix(s, uniform), want);
}

TEST(ResidualStream, WithoutAttnResItIsTheRunningSum) {
  ResidualStream s;
  const std::vector<float> e = row(1, 2, 3), a = row(0.5f, 0.25f, 1);
  std::copy(e.begin(), e.end(), s.begin(1, kHidden, 4, 0, 1e-6f));
  for (int64_t l = 0; l < 4; ++l) {
    s.enter_layer(l);
    s.add(a.data());
  }
  EXPECT_EQ(mix(s, AttnResSite{}), row(3, 3, 7));
}

}  // namespace
}  // namespace deltafin::model
