// Router: the bias picks but does not weigh, ties go to the lower id, weights are renormalized
// and scaled, group masking keeps whole groups.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "model/router.h"

namespace deltafin::model {
namespace {

TEST(Router, BiasSelectsButWeightsComeFromUnbiasedScores) {
  RouterScratch scratch;  // reused by every route() below
  const RouterConfig cfg{4, 2, 1, 1, true, 2.5f};
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f}, bias = {0.0f, 0.0f, 10.0f, 0.0f};
  int32_t ids[2];
  float w[2];
  route(cfg, logits.data(), bias.data(), scratch, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 0);
  const float s2 = kernels::sigmoid(0.0f), s0 = kernels::sigmoid(2.0f);
  EXPECT_FLOAT_EQ(w[0], s2 / (s2 + s0 + 1e-20f) * 2.5f);
  EXPECT_FLOAT_EQ(w[1], s0 / (s2 + s0 + 1e-20f) * 2.5f);
}

TEST(Router, TiesGoToTheLowerId) {
  RouterScratch scratch;  // reused by every route() below
  const RouterConfig cfg{8, 3, 1, 1, true, 1.0f};
  const std::vector<float> logits(8, 0.25f), bias = {0, 0, 0, 0, 0, 0, 0, 0};
  int32_t ids[3];
  float w[3];
  route(cfg, logits.data(), bias.data(), scratch, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(ids[2], 2);
  // A tie created by the bias: experts 5 and 3 equal after bias; 3 ranks first.
  const std::vector<float> l2 = {0, 0, 0, 1.0f, 0, 0, 0, 0};
  std::vector<float> b2(8, 0.0f);
  b2[5] = kernels::sigmoid(1.0f) - kernels::sigmoid(0.0f);
  const float c3 = kernels::sigmoid(1.0f), c5 = kernels::sigmoid(0.0f) + b2[5];
  ASSERT_EQ(c3, c5);
  route(cfg, l2.data(), b2.data(), scratch, ids, w);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 5);
  EXPECT_EQ(ids[2], 0);
}

TEST(Router, RenormalizedWeightsSumToTheScale) {
  RouterScratch scratch;  // reused by every route() below
  for (bool renorm : {true, false}) {
    const RouterConfig cfg{6, 4, 1, 1, renorm, 1.5f};
    const std::vector<float> logits = {0.3f, -2.0f, 1.1f, 0.7f, -0.4f, 2.2f};
    const std::vector<float> bias(6, 0.0f);
    int32_t ids[4];
    float w[4];
    route(cfg, logits.data(), bias.data(), scratch, ids, w);
    float sum = 0.0f, raw = 0.0f;
    for (int i = 0; i < 4; ++i) {
      sum += w[i];
      raw += kernels::sigmoid(logits[ids[i]]);
    }
    EXPECT_NEAR(sum, renorm ? 1.5f : raw * 1.5f, 1e-6f);
    EXPECT_EQ(ids[0], 5);
    EXPECT_EQ(ids[3], 0);
  }
}

TEST(Router, GroupMaskingKeepsTheBestGroups) {
  RouterScratch scratch;  // reused by every route() below
  // 4 groups of 2 with top-2 sums 1.46, 1.38, 1.42, 0.95. Expert 6 is the single best but its
  // group (6, 7) is the worst, so keeping 2 groups leaves {0, 1, 4, 5}.
  const std::vector<float> logits = {1.0f, 1.0f, 0.8f, 0.8f, 0.9f, 0.9f, 3.0f, -9.0f};
  const std::vector<float> bias(8, 0.0f);
  int32_t ids[2];
  float w[2];
  route(RouterConfig{8, 2, 4, 2, true, 1.0f}, logits.data(), bias.data(), scratch, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  route(RouterConfig{8, 2, 4, 4, true, 1.0f}, logits.data(), bias.data(), scratch, ids,
        w);  // no masking
  EXPECT_EQ(ids[0], 6);
  EXPECT_EQ(ids[1], 0);
}

}  // namespace
}  // namespace deltafin::model
