// Tests for the AttnRes mix against a float64 evaluation of its formula, with strided blocks and
// no blocks at all (the mix of the partial sum alone is the partial sum).
#include "kernels/attn_res.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/test_random.h"

namespace deltafin::kernels {
namespace {

TEST(AttnRes, MatchesFloat64Formula) {
  std::mt19937 rng(1);
  const int64_t hidden = 37, n = 3, n_blocks = 4, stride = 5 * hidden;  // blocks of 5 rows, 3 used
  const float eps = 1e-6f;
  const std::vector<float> key = normal(rng, hidden, 0.3f);
  const std::vector<float> blocks = normal(rng, n_blocks * stride, 2.0f);
  const std::vector<float> prefix = normal(rng, n * hidden, 1.0f);
  std::vector<float> out(n * hidden);
  attn_res_mix(key.data(), blocks.data(), n_blocks, stride, prefix.data(), n, hidden, eps,
               out.data());
  for (int64_t r = 0; r < n; ++r) {
    std::vector<const float*> src;
    for (int64_t i = 0; i < n_blocks; ++i) src.push_back(blocks.data() + i * stride + r * hidden);
    src.push_back(prefix.data() + r * hidden);
    std::vector<double> s;
    double mx = -1e300, sum = 0.0;
    for (const float* v : src) {
      double dk = 0.0, ss = 0.0;
      for (int64_t j = 0; j < hidden; ++j) {
        dk += static_cast<double>(v[j]) * key[j];
        ss += static_cast<double>(v[j]) * v[j];
      }
      s.push_back(dk / std::sqrt(ss / hidden + eps));
      mx = std::max(mx, s.back());
    }
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int64_t j = 0; j < hidden; ++j) {
      double want = 0.0, mag = 0.0;
      for (size_t i = 0; i < src.size(); ++i) {
        want += s[i] / sum * src[i][j];
        mag += std::fabs(s[i] / sum * src[i][j]);
      }
      ASSERT_NEAR(out[r * hidden + j], want, 1e-5 * mag + 1e-30) << "r=" << r << " j=" << j;
    }
  }
}

TEST(AttnRes, NoBlocksReturnsThePrefix) {
  std::mt19937 rng(2);
  const int64_t hidden = 16, n = 2;
  const std::vector<float> key = normal(rng, hidden, 1.0f), prefix = normal(rng, n * hidden, 1.0f);
  std::vector<float> out(n * hidden);
  attn_res_mix(key.data(), nullptr, 0, 0, prefix.data(), n, hidden, 1e-6f, out.data());
  EXPECT_EQ(out, prefix);  // softmax of one score is exactly 1
}

}  // namespace
}  // namespace deltafin::kernels
