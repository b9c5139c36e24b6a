// Tests for the MLA attention kernels: the expanded form against a float64 evaluation of causal
// softmax attention, and the absorbed form against the expanded one, for prefill and decode rows.
#include "kernels/mla_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/test_random.h"

namespace deltafin::kernels {
namespace {

struct Case {
  MlaDims dims{3, 16, 8, 4, 6};
  std::vector<float> kv_b, latent, k_pe, q;
  WeightMatrix kv_b_view() const {
    return {WeightDType::kF32, reinterpret_cast<const uint8_t*>(kv_b.data()), nullptr,
            dims.n_heads * dims.kv_width(), dims.kv_lora_rank};
  }
};

Case make_case(std::mt19937& rng, int64_t total, int64_t n) {
  Case c;
  const MlaDims& d = c.dims;
  c.kv_b = normal(rng, d.n_heads * d.kv_width() * d.kv_lora_rank, 0.3f);
  c.latent = normal(rng, total * d.kv_lora_rank, 1.0f);
  c.k_pe = normal(rng, total * d.rope_dim, 1.0f);
  c.q = normal(rng, n * d.n_heads * d.qk_dim(), 1.0f);
  return c;
}

TEST(MlaAttention, ExpandedMatchesFloat64Attention) {
  std::mt19937 rng(1);
  const int64_t total = 7, n = 3;
  const Case c = make_case(rng, total, n);
  const MlaDims& d = c.dims;
  std::vector<float> scratch(mla_expanded_scratch_floats(d, total)), o(n * d.n_heads * d.v_dim);
  mla_attend_expanded(d, c.kv_b_view(), {c.latent.data(), c.k_pe.data(), total}, c.q.data(), n,
                      scratch.data(), o.data());
  for (int64_t h = 0; h < d.n_heads; ++h) {
    // k_nope and v of every position for this head, in float64.
    auto expand = [&](int64_t s, int64_t row) {
      double acc = 0.0;
      for (int64_t c2 = 0; c2 < d.kv_lora_rank; ++c2)
        acc += static_cast<double>(c.kv_b[(h * d.kv_width() + row) * d.kv_lora_rank + c2]) *
               c.latent[s * d.kv_lora_rank + c2];
      return acc;
    };
    for (int64_t r = 0; r < n; ++r) {
      const float* qh = c.q.data() + (r * d.n_heads + h) * d.qk_dim();
      const int64_t len = total - n + r + 1;
      std::vector<double> p(len);
      double mx = -1e300, sum = 0.0;
      for (int64_t s = 0; s < len; ++s) {
        double dot = 0.0;
        for (int64_t i = 0; i < d.nope_dim; ++i) dot += qh[i] * expand(s, i);
        for (int64_t i = 0; i < d.rope_dim; ++i)
          dot += static_cast<double>(qh[d.nope_dim + i]) * c.k_pe[s * d.rope_dim + i];
        p[s] = dot / std::sqrt(static_cast<double>(d.qk_dim()));
        mx = std::max(mx, p[s]);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < d.v_dim; ++j) {
        double want = 0.0;
        for (int64_t s = 0; s < len; ++s) want += p[s] / sum * expand(s, d.nope_dim + j);
        EXPECT_NEAR(o[(r * d.n_heads + h) * d.v_dim + j], want, 1e-5 * (1.0 + std::fabs(want)));
      }
    }
  }
}

TEST(MlaAttention, AbsorbedMatchesExpanded) {
  std::mt19937 rng(2);
  for (int64_t n : {1, 4}) {
    for (int64_t total : {n, n + 9}) {
      const Case c = make_case(rng, total, n);
      const MlaDims& d = c.dims;
      const LatentCache cache{c.latent.data(), c.k_pe.data(), total};
      std::vector<float> se(mla_expanded_scratch_floats(d, total));
      std::vector<float> sa(mla_absorbed_scratch_floats(d, n, total), NAN);  // read only after set
      std::vector<float> oe(n * d.n_heads * d.v_dim), oa(oe.size());
      mla_attend_expanded(d, c.kv_b_view(), cache, c.q.data(), n, se.data(), oe.data());
      mla_attend_absorbed(d, c.kv_b_view(), cache, c.q.data(), n, sa.data(), oa.data());
      double worst = 0.0, mag = 0.0;
      for (size_t i = 0; i < oe.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(oa[i]) - oe[i]));
        mag = std::max(mag, std::fabs(static_cast<double>(oe[i])));
      }
      EXPECT_LT(worst / mag, 1e-5) << "n=" << n << " total=" << total;
    }
  }
}

}  // namespace
}  // namespace deltafin::kernels
