// Tests for the short convolution against its definition over the concatenated history, and the
// history carried across calls of every split.
#include "kernels/short_conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/test_random.h"

namespace deltafin::kernels {
namespace {

TEST(ShortConv, MatchesTheDefinitionOverTheHistory) {
  std::mt19937 rng(1);
  const int64_t p = 11, kernel = 4, h = kernel - 1;
  for (int64_t n : {1, 2, 3, 4, 9}) {
    const std::vector<float> w = normal(rng, p * kernel), x = normal(rng, n * p);
    std::vector<float> hist = normal(rng, h * p), in = hist, y(n * p);
    in.insert(in.end(), x.begin(), x.end());
    short_conv_silu(x.data(), n, p, kernel, w.data(), hist.data(), y.data());
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < p; ++c) {
        double acc = 0.0;
        for (int64_t i = 0; i < kernel; ++i) acc += w[c * kernel + i] * in[(t + i) * p + c];
        const double want = acc / (1.0 + std::exp(-acc));
        ASSERT_NEAR(y[t * p + c], want, 1e-5 * (1.0 + std::fabs(want))) << "n=" << n;
      }
    }
    EXPECT_EQ(hist, std::vector<float>(in.end() - h * p, in.end())) << "n=" << n;
  }
}

TEST(ShortConv, SplitCallsEqualOneCall) {
  std::mt19937 rng(2);
  const int64_t p = 5, kernel = 4, h = kernel - 1, n = 10;
  const std::vector<float> w = normal(rng, p * kernel), x = normal(rng, n * p);
  const std::vector<float> hist0 = normal(rng, h * p);
  std::vector<float> whole_hist = hist0, whole(n * p);
  short_conv_silu(x.data(), n, p, kernel, w.data(), whole_hist.data(), whole.data());
  for (int64_t step : {1, 2, 3, 7}) {
    std::vector<float> hist = hist0, out(n * p);
    for (int64_t t = 0; t < n; t += step) {
      const int64_t m = std::min(step, n - t);
      short_conv_silu(x.data() + t * p, m, p, kernel, w.data(), hist.data(), out.data() + t * p);
    }
    EXPECT_EQ(out, whole) << "step=" << step;
    EXPECT_EQ(hist, whole_hist) << "step=" << step;
  }
}

}  // namespace
}  // namespace deltafin::kernels
