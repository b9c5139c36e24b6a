// Tests for the element-wise kernels against float64 formulas: the dot product's fixed tree over
// every tail length, the sigmoid gate, softplus's threshold, per-row l2norm and the residual add.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/test_random.h"

namespace deltafin::kernels {
namespace {

TEST(Elementwise, DotWithinRoundingOfFloat64) {
  std::mt19937 rng(1);
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 64, 129, 7168}) {
    const std::vector<float> a = normal(rng, n, 1.0f), b = normal(rng, n, 1.0f);
    double want = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      want += static_cast<double>(a[i]) * b[i];
      mag += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    // Each of the (n/8 + 8) additions on a path rounds once: |error| <= (n/8 + 9)·u·Σ|a·b|.
    const double tol = (static_cast<double>(n) / 8 + 9) * std::ldexp(mag, -24);
    EXPECT_LE(std::fabs(dot(a.data(), b.data(), n) - want), tol) << "n=" << n;
  }
}

TEST(Elementwise, DotSumsLanesInTheFixedTree) {
  // Lane sums 1e8, 1, -1e8, 1 ... : the tree ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7))
  // gives 4 where a left-to-right sum loses the ones to rounding.
  std::vector<float> a = {1e8f, 1.0f, -1e8f, 1.0f, -1e8f, 1.0f, 1e8f, 1.0f}, b(8, 1.0f);
  EXPECT_EQ(dot(a.data(), b.data(), 8), 4.0f);
}

TEST(Elementwise, SigmoidGateAndAdd) {
  std::mt19937 rng(2);
  const int64_t n = 1001;
  const std::vector<float> gate = normal(rng, n, 8.0f), x = normal(rng, n, 1.0f);
  std::vector<float> y = normal(rng, n, 1.0f), y0 = y;
  mul_sigmoid(gate.data(), n, y.data());
  for (int64_t i = 0; i < n; ++i) {
    const double want = y0[i] / (1.0 + std::exp(-static_cast<double>(gate[i])));
    ASSERT_NEAR(y[i], want, std::ldexp(std::fabs(want), -21) + 1e-37) << "gate " << gate[i];
  }
  std::vector<float> sum = y;
  add(x.data(), n, sum.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], y[i] + x[i]);
}

TEST(Elementwise, SoftplusThreshold) {
  EXPECT_EQ(softplus(20.5f), 20.5f);
  EXPECT_EQ(softplus(100.0f), 100.0f);
  EXPECT_NEAR(softplus(0.0f), std::log(2.0), 1e-7);
  EXPECT_NEAR(softplus(-30.0f), std::exp(-30.0), 1e-19);
  EXPECT_NEAR(silu(2.0f), 2.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

TEST(Elementwise, L2normRowsEachRowOnItsOwn) {
  std::mt19937 rng(3);
  const int64_t rows = 5, dim = 19;
  const float scale = 0.25f;
  std::vector<float> x = normal(rng, rows * dim, 3.0f), x0 = x;
  x[2 * dim + 3] = 0.0f;
  x0[2 * dim + 3] = 0.0f;
  std::fill(x.begin() + 4 * dim, x.end(), 0.0f);  // a zero row stays zero (the 1e-6 guard)
  std::fill(x0.begin() + 4 * dim, x0.end(), 0.0f);
  l2norm_rows(x.data(), rows, dim, scale);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x0[r * dim + i]) * x0[r * dim + i];
    for (int64_t i = 0; i < dim; ++i) {
      const double want = x0[r * dim + i] / std::sqrt(ss + 1e-6) * scale;
      ASSERT_NEAR(x[r * dim + i], want, 1e-6 * scale + std::ldexp(std::fabs(want), -21));
    }
  }
}

}  // namespace
}  // namespace deltafin::kernels
