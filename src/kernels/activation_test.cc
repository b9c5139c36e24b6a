// Tests for the activation kernels: every ISA variant against the scalar reference and float64
// formulas, over odd lengths, unaligned pointers, the regions where exp/tanh switch algorithm or
// saturate, and aliasing of input and output.
#include "kernels/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/activation_variant.h"
#include "quant/bf16.h"

namespace deltafin::kernels {
namespace {

using base::Isa;
using detail::ActivationVariant;

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512})
    if (base::isa_supported(isa)) out.push_back(isa);
  return out;
}

const int64_t kSizes[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 7168, 7169};

// |got - want| <= k·u·|want| with u = 2^-24 the f32 unit roundoff (one correctly rounded
// operation is within 1 u), or 1e-35 absolute where the truth is that small (a sigmoid of -89
// underflows f32 exp: the result is 0, not 1e-37).
void expect_within_u(float got, double want, double k, const std::string& what) {
  const double tol = k * std::ldexp(std::fabs(want), -24) + 1e-35;
  ASSERT_LE(std::fabs(got - want), tol) << what << ": got " << got << " want " << want;
}

// Values that exercise every branch: 0, tiny, around tanh's 0.625 switch, exp saturation, large.
std::vector<float> probe_values(int64_t n, std::mt19937& rng, float spread) {
  const float fixed[] = {0.0f,  -0.0f, 1e-30f, -1e-7f, 0.6249f, 0.625f, -0.6251f, 2.5f,
                         -9.0f, 20.0f, -88.0f, 89.0f,  -104.0f, 300.0f, -1e4f,    1e-3f};
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(n + 1);
  for (int64_t i = 0; i <= n; ++i) v[i] = (i % 5 == 0) ? fixed[(i / 5) % 16] : d(rng);
  return v;
}

double situ64(double g, double u, double beta, double lbeta) {
  return beta * std::tanh(g / beta) / (1.0 + std::exp(-g)) * (lbeta * std::tanh(u / lbeta));
}

TEST(Activation, SituGluEveryVariant) {
  std::mt19937 rng(1);
  for (Isa isa : supported_isas()) {
    const ActivationVariant& v = detail::activation_variant(isa);
    for (int64_t n : kSizes) {
      for (float spread : {0.5f, 4.0f, 40.0f}) {
        std::vector<float> g = probe_values(n, rng, spread), u = probe_values(n, rng, spread * 5);
        std::vector<float> y(n + 1, 0.0f);
        v.situ_glu(g.data() + 1, u.data() + 1, n, 4.0f, 25.0f, y.data() + 1);
        for (int64_t i = 1; i <= n; ++i)
          expect_within_u(y[i], situ64(g[i], u[i], 4.0, 25.0), 8,
                          std::string(base::isa_name(isa)) + " situ g=" + std::to_string(g[i]) +
                              " u=" + std::to_string(u[i]));
        EXPECT_EQ(y[0], 0.0f);  // nothing written before the output
      }
    }
  }
}

TEST(Activation, SiluGluEveryVariantInPlace) {
  std::mt19937 rng(2);
  for (Isa isa : supported_isas()) {
    const ActivationVariant& v = detail::activation_variant(isa);
    for (int64_t n : kSizes) {
      std::vector<float> g = probe_values(n, rng, 6.0f), u = probe_values(n, rng, 3.0f);
      std::vector<float> out = g;
      v.silu_glu(out.data() + 1, u.data() + 1, n, out.data() + 1);  // y aliases g
      for (int64_t i = 1; i <= n; ++i) {
        const double gi = g[i];
        expect_within_u(out[i], gi / (1.0 + std::exp(-gi)) * u[i], 8,
                        std::string(base::isa_name(isa)) + " silu g=" + std::to_string(gi));
      }
    }
  }
}

TEST(Activation, RmsnormEveryVariant) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (Isa isa : supported_isas()) {
    const ActivationVariant& v = detail::activation_variant(isa);
    for (int64_t n : kSizes) {
      std::vector<float> x(n + 1), w(n + 1), y(n + 1), yb(n + 1);
      std::vector<uint16_t> wb(n + 1);
      for (int64_t i = 0; i <= n; ++i) {
        x[i] = d(rng);
        wb[i] = quant::f32_to_bf16(1.0f + 0.1f * d(rng));
        w[i] = quant::bf16_to_f32(wb[i]);
      }
      v.rmsnorm_f32(x.data() + 1, w.data() + 1, n, 1e-5f, y.data() + 1);
      v.rmsnorm_bf16(x.data() + 1, wb.data() + 1, n, 1e-5f, yb.data() + 1);
      double ss = 0.0;
      for (int64_t i = 1; i <= n; ++i) ss += static_cast<double>(x[i]) * x[i];
      const double r = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int64_t i = 1; i <= n; ++i) {
        const std::string what = std::string(base::isa_name(isa)) + " n=" + std::to_string(n);
        expect_within_u(y[i], w[i] * (x[i] * r), 4, what);
        ASSERT_EQ(y[i], yb[i]) << what;  // a bf16 weight is the same number as its f32 widening
      }
    }
  }
}

TEST(Activation, RmsnormInPlaceAndEps) {
  for (Isa isa : supported_isas()) {
    std::vector<float> x = {0.0f, 0.0f, 0.0f}, w = {1.0f, 2.0f, 3.0f};
    detail::activation_variant(isa).rmsnorm_f32(x.data(), w.data(), 3, 1e-6f, x.data());
    for (float v : x) EXPECT_EQ(v, 0.0f);  // eps keeps an all-zero input finite
    std::vector<float> z = {3.0f, 4.0f};
    detail::activation_variant(isa).rmsnorm_f32(z.data(), w.data(), 2, 0.0f, z.data());
    expect_within_u(z[0], 3.0 / std::sqrt(12.5), 4, "in place");
    expect_within_u(z[1], 2.0 * 4.0 / std::sqrt(12.5), 4, "in place");
  }
}

TEST(Activation, RmsnormRowsNormalizeEachRowOnItsOwn) {
  std::mt19937 rng(7);
  const int64_t rows = 4, n = 33;
  std::vector<float> x = probe_values(rows * n - 1, rng, 2.0f), w = probe_values(n - 1, rng, 1.0f);
  std::vector<float> y(rows * n), want(rows * n);
  rmsnorm_rows(x.data(), w.data(), rows, n, 1e-6f, y.data());
  for (int64_t r = 0; r < rows; ++r)
    rmsnorm(x.data() + r * n, w.data(), n, 1e-6f, want.data() + r * n);
  EXPECT_EQ(y, want);
  rmsnorm_rows(x.data(), w.data(), rows, n, 1e-6f, x.data());  // in place
  EXPECT_EQ(x, want);
}

TEST(Activation, SoftmaxEveryVariant) {
  std::mt19937 rng(4);
  for (Isa isa : supported_isas()) {
    const ActivationVariant& v = detail::activation_variant(isa);
    for (int64_t n : kSizes) {
      for (float spread : {0.1f, 5.0f, 50.0f}) {
        std::normal_distribution<float> d(3.0f, spread);
        std::vector<float> x(n + 2);
        for (auto& e : x) e = d(rng);
        if (n > 3) x[1 + n / 2] = -std::numeric_limits<float>::infinity();  // a masked position
        const std::vector<float> orig = x;
        v.softmax(x.data() + 1, n);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t i = 1; i <= n; ++i) m = std::max(m, orig[i]);
        double sum = 0.0;
        for (int64_t i = 1; i <= n; ++i) sum += std::exp(static_cast<double>(orig[i] - m));
        for (int64_t i = 1; i <= n; ++i)
          expect_within_u(x[i], std::exp(static_cast<double>(orig[i] - m)) / sum, 6,
                          std::string(base::isa_name(isa)) + " softmax n=" + std::to_string(n));
        EXPECT_EQ(x[0], orig[0]);
        EXPECT_EQ(x[n + 1], orig[n + 1]);
      }
    }
  }
}

TEST(Activation, PublicEntryPoints) {
  std::vector<float> g = {-1.0f, 0.5f, 3.0f}, u = {2.0f, -1.0f, 0.25f}, y(3);
  situ_glu(g.data(), u.data(), 3, 4.0f, 25.0f, y.data());
  for (int i = 0; i < 3; ++i) expect_within_u(y[i], situ64(g[i], u[i], 4.0, 25.0), 8, "situ");
  silu_glu(g.data(), u.data(), 3, y.data());
  for (int i = 0; i < 3; ++i)
    expect_within_u(y[i], g[i] / (1.0 + std::exp(-g[i])) * u[i], 8, "silu");
  std::vector<float> s = {1.0f, 2.0f, 3.0f};
  softmax(s.data(), 3);
  const double z = std::exp(-2.0) + std::exp(-1.0) + 1.0;
  expect_within_u(s[2], 1.0 / z, 6, "softmax");
  const std::vector<uint16_t> wb = {0x3f80, 0x4000, 0x3f00};
  const std::vector<float> w = {1.0f, 2.0f, 0.5f};
  std::vector<float> a(3), b(3);
  rmsnorm(g.data(), w.data(), 3, 1e-5f, a.data());
  rmsnorm(g.data(), wb.data(), 3, 1e-5f, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace deltafin::kernels
