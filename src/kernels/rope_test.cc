// Tests for NeoX RoPE against its definition in double, the identity at position 0, and rows of
// one call equal to one-row calls at their positions.
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/test_random.h"

namespace deltafin::kernels {
namespace {

TEST(RopeNeox, MatchesTheDefinition) {
  std::mt19937 rng(3);
  const int64_t rows = 5, heads = 3, dim = 16, first = 30000;
  const double theta = 1e6;
  const std::vector<float> x = normal(rng, rows * heads * dim);
  std::vector<float> y = x;
  rope_neox_rows(y.data(), rows, heads, dim, first, theta);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* in = x.data() + (r * heads + h) * dim;
      const float* out = y.data() + (r * heads + h) * dim;
      for (int64_t c = 0; c < dim; ++c) {
        const int64_t i = c % (dim / 2);
        const double angle = static_cast<double>(first + r) * std::pow(theta, -2.0 * i / dim);
        // rotate_half(x) = [-x2, x1]
        const double rot = c < dim / 2 ? -static_cast<double>(in[c + dim / 2]) : in[c - dim / 2];
        const double want = in[c] * std::cos(angle) + rot * std::sin(angle);
        ASSERT_NEAR(out[c], want, 1e-6 * (1.0 + std::fabs(want))) << r << " " << h << " " << c;
      }
    }
  }
}

TEST(RopeNeox, PositionZeroIsTheIdentity) {
  std::mt19937 rng(4);
  const std::vector<float> x = normal(rng, 2 * 32);
  std::vector<float> y = x;
  rope_neox_rows(y.data(), 1, 2, 32, 0, 1e6);
  EXPECT_EQ(x, y);
}

TEST(RopeNeox, ARowOfManyEqualsOneRowAtItsPositionBitForBit) {
  std::mt19937 rng(5);
  const int64_t rows = 7, heads = 2, dim = 8, first = 11;
  const std::vector<float> x = normal(rng, rows * heads * dim);
  std::vector<float> all = x;
  rope_neox_rows(all.data(), rows, heads, dim, first, 1e4);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> one(x.begin() + r * heads * dim, x.begin() + (r + 1) * heads * dim);
    rope_neox_rows(one.data(), 1, heads, dim, first + r, 1e4);
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * heads * dim, one.size() * 4)) << r;
  }
}

}  // namespace
}  // namespace deltafin::kernels
