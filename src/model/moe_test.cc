// MoE: fixed-order sums (delivery order never changes a bit), multi-row equals row-by-row, and a
// float64 recomputation of the whole block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "experts/mapped_expert_store.h"
#include "model/moe.h"
#include "model/test_weights.h"

namespace deltafin::model {
namespace {

constexpr int kLayer = 1;

// Routed experts of one layer laid out back to back in one buffer, as in a shard.
struct ExpertBank {
  std::vector<uint8_t> bytes;
  experts::ExpertCatalog catalog;
};

ExpertBank make_bank(std::mt19937& rng, int n_experts, int64_t width, int64_t inter, bool mxfp4) {
  ExpertBank bank;
  experts::ExpertCatalog::Layer layer;
  uint64_t off = 0;
  auto place = [&](experts::ExpertMatrixLayout& m, int64_t rows, int64_t cols) {
    m.dtype = mxfp4 ? kernels::WeightDType::kMxfp4 : kernels::WeightDType::kBF16;
    m.rows = rows;
    m.cols = cols;
    m.data_offset = off;
    off += mxfp4 ? rows * cols / 2 : rows * cols * 2;
    if (mxfp4) {
      m.scales_offset = off;
      off += rows * cols / 32;
    }
  };
  place(layer.layout.gate, inter, width);
  place(layer.layout.down, width, inter);
  place(layer.layout.up, inter, width);
  layer.layout.span_bytes = off;
  bank.bytes.resize(off * n_experts);
  for (int e = 0; e < n_experts; ++e) {
    uint8_t* base = bank.bytes.data() + e * off;
    for (const experts::ExpertMatrixLayout* m :
         {&layer.layout.gate, &layer.layout.down, &layer.layout.up}) {
      testing::OwnedMatrix r = mxfp4 ? testing::random_mxfp4(rng, m->rows, m->cols)
                                     : testing::random_bf16(rng, m->rows, m->cols, 0.2f);
      std::memcpy(base + m->data_offset, r.data.data(), r.data.size());
      if (mxfp4) std::memcpy(base + m->scales_offset, r.scales.data(), r.scales.size());
    }
    layer.spans.push_back({kLayer, e, "memory", e * off, off});
  }
  bank.catalog.layers.resize(kLayer + 1);
  bank.catalog.layers[kLayer] = layer;
  return bank;
}

std::unique_ptr<experts::MappedExpertStore> store_for(ExpertBank& bank) {
  uint8_t* base = bank.bytes.data();
  return std::make_unique<experts::MappedExpertStore>(
      bank.catalog, [base](const format::ExpertSpan& s) { return base + s.offset; });
}

// Hands a batch's experts out last-requested first.
class ReversedStore : public experts::ExpertStore {
 public:
  explicit ReversedStore(experts::MappedExpertStore* inner) : inner_(inner) {}
  std::unique_ptr<experts::ExpertBatch> request(int layer, std::span<const int32_t> ids) override {
    return std::make_unique<Batch>(inner_, layer, ids);
  }

 private:
  class Batch : public experts::ExpertBatch {
   public:
    Batch(experts::MappedExpertStore* s, int layer, std::span<const int32_t> ids)
        : s_(s), layer_(layer), ids_(ids.begin(), ids.end()), next_(ids.size()) {}
    size_t size() const override { return ids_.size(); }
    experts::ReadyExpert acquire_next() override {
      --next_;
      return {next_, ids_[next_], s_->get(layer_, ids_[next_])};
    }
    void release(size_t) override {}

   private:
    experts::MappedExpertStore* s_;
    int layer_;
    std::vector<int32_t> ids_;
    size_t next_;
  };
  experts::MappedExpertStore* inner_;
};

struct MoeFixture {
  MoeShape shape;
  testing::OwnedMatrix router, down, up, sg, su, sd;
  MoeWeights w;
  ExpertBank bank;
};

MoeFixture make_moe(std::mt19937& rng, bool latent) {
  MoeFixture f;
  const int64_t d = 32, width = latent ? 64 : 32, inter = 32, ne = 8;
  f.shape.hidden = d;
  f.shape.width = width;
  f.shape.router = {static_cast<int>(ne), 3, 1, 1, true, latent ? 1.0f : 2.446f};
  f.shape.act = latent ? Activation{Activation::Kind::kSiTU, 4.0f, 25.0f}
                       : Activation{Activation::Kind::kSiLU, 0.0f, 0.0f};
  f.shape.norm_eps = 1e-5f;
  f.router = testing::random_bf16(rng, ne, d, 0.5f);
  f.w.router = f.router.view;
  f.w.score_bias = testing::random_vector(rng, ne, 0.0f, 0.05f);
  if (latent) {
    f.down = testing::random_bf16(rng, width, d, 0.3f);
    f.up = testing::random_bf16(rng, d, width, 0.3f);
    f.w.latent_down = f.down.view;
    f.w.latent_up = f.up.view;
    f.w.latent_norm = testing::random_vector(rng, width, 1.0f, 0.1f);
  }
  f.sg = testing::random_bf16(rng, 2 * inter, d, 0.3f);
  f.su = testing::random_bf16(rng, 2 * inter, d, 0.3f);
  f.sd = testing::random_bf16(rng, d, 2 * inter, 0.3f);
  f.w.shared = {f.sg.view, f.su.view, f.sd.view};
  f.bank = make_bank(rng, static_cast<int>(ne), width, inter, /*mxfp4=*/latent);
  return f;
}

std::vector<double> matvec64(const kernels::WeightMatrix& w, const std::vector<double>& x) {
  std::vector<double> y(w.rows, 0.0);
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    kernels::decode_row(w, r, row.data());
    for (int64_t c = 0; c < w.cols; ++c) y[r] += row[c] * x[c];
  }
  return y;
}

std::vector<double> glu64(const Activation& a, const GluWeights& w, const std::vector<double>& x) {
  std::vector<double> g = matvec64(w.gate, x), u = matvec64(w.up, x);
  for (size_t i = 0; i < g.size(); ++i) {
    const double sg = 1.0 / (1.0 + std::exp(-g[i]));
    g[i] = a.kind == Activation::Kind::kSiLU ? g[i] * sg * u[i]
                                             : a.beta * std::tanh(g[i] / a.beta) * sg *
                                                   a.linear_beta * std::tanh(u[i] / a.linear_beta);
  }
  return matvec64(w.down, g);
}

TEST(Moe, DeliveryOrderNeverChangesABit) {
  for (bool latent : {true, false}) {
    std::mt19937 rng(latent ? 21 : 22);
    MoeFixture f = make_moe(rng, latent);
    const int64_t n = 7, d = f.shape.hidden;
    const std::vector<float> x = testing::random_vector(rng, n * d, 0.0f, 1.0f);
    auto mapped = store_for(f.bank);
    ReversedStore reversed(mapped.get());
    std::vector<float> a(n * d), b(n * d);
    MoeWorkspace ws;
    moe_forward(f.shape, f.w, kLayer, *mapped, x.data(), n, ws, a.data());
    moe_forward(f.shape, f.w, kLayer, reversed, x.data(), n, ws, b.data());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "latent=" << latent;
  }
}

TEST(Moe, ManyRowsEqualRowByRow) {
  std::mt19937 rng(23);
  MoeFixture f = make_moe(rng, true);
  const int64_t n = 9, d = f.shape.hidden;
  const std::vector<float> x = testing::random_vector(rng, n * d, 0.0f, 1.0f);
  auto store = store_for(f.bank);
  std::vector<float> all(n * d), one(n * d);
  MoeWorkspace ws;  // the one-row passes reuse what the n-row pass grew
  moe_forward(f.shape, f.w, kLayer, *store, x.data(), n, ws, all.data());
  for (int64_t r = 0; r < n; ++r)
    moe_forward(f.shape, f.w, kLayer, *store, x.data() + r * d, 1, ws, one.data() + r * d);
  EXPECT_EQ(0, std::memcmp(all.data(), one.data(), all.size() * sizeof(float)));
}

TEST(Moe, MatchesFloat64Recomputation) {
  for (bool latent : {true, false}) {
    std::mt19937 rng(latent ? 24 : 25);
    MoeFixture f = make_moe(rng, latent);
    const int64_t n = 5, d = f.shape.hidden, k = f.shape.router.top_k;
    const std::vector<float> x = testing::random_vector(rng, n * d, 0.0f, 1.0f);
    auto store = store_for(f.bank);
    std::vector<float> got(n * d);
    MoeWorkspace ws;
    moe_forward(f.shape, f.w, kLayer, *store, x.data(), n, ws, got.data());
    Route rt;
    route_rows(f.shape, f.w, x.data(), n, rt);
    std::vector<float> want(n * d);
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<double> xr(x.begin() + r * d, x.begin() + (r + 1) * d);
      const std::vector<double> z = latent ? matvec64(f.w.latent_down, xr) : xr;
      std::vector<double> y(f.shape.width, 0.0);
      for (int j = 0; j < k; ++j) {
        const experts::ExpertWeights ew = store->get(kLayer, rt.experts[r * k + j]);
        const std::vector<double> e = glu64(f.shape.act, {ew.gate, ew.up, ew.down}, z);
        for (size_t i = 0; i < y.size(); ++i) y[i] += rt.weights[r * k + j] * e[i];
      }
      if (latent) {
        double ss = 0.0;
        for (double v : y) ss += v * v;
        const double inv = 1.0 / std::sqrt(ss / y.size() + 1e-5);
        for (size_t i = 0; i < y.size(); ++i) y[i] *= inv * f.w.latent_norm[i];
        y = matvec64(f.w.latent_up, y);
      }
      const std::vector<double> s = glu64(f.shape.act, f.w.shared, xr);
      for (int64_t i = 0; i < d; ++i) want[r * d + i] = static_cast<float>(y[i] + s[i]);
    }
    EXPECT_LT(testing::rel_diff(got, want), 1e-5) << "latent=" << latent;
  }
}

}  // namespace
}  // namespace deltafin::model
