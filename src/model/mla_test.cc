// MLA: the absorbed (latent-space) attention against the expanded form, for prefill and decode
// rows, with and without the q low-rank path and the output gate.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "model/mla.h"
#include "model/test_weights.h"

namespace deltafin::model {
namespace {

using testing::rel_diff;

struct MlaFixture {
  MlaShape shape;
  testing::OwnedMatrix qa, qb, q, kva, kvb, g, o;
  MlaWeights w;
};

MlaFixture make_mla(std::mt19937& rng, bool q_low_rank, bool gate) {
  MlaFixture f;
  f.shape = {24, 3, q_low_rank ? 16 : 0, 32, 16, 8, 16, gate, 1e-6f};
  const MlaShape& s = f.shape;
  if (q_low_rank) {
    f.qa = testing::random_bf16(rng, s.q_lora_rank, s.hidden, 0.3f);
    f.qb = testing::random_bf16(rng, s.n_heads * s.qk_dim(), s.q_lora_rank, 0.3f);
    f.w.q_a = f.qa.view;
    f.w.q_b = f.qb.view;
    f.w.q_a_norm = testing::random_vector(rng, s.q_lora_rank, 1.0f, 0.1f);
  } else {
    f.q = testing::random_bf16(rng, s.n_heads * s.qk_dim(), s.hidden, 0.3f);
    f.w.q_proj = f.q.view;
  }
  f.kva = testing::random_bf16(rng, s.kv_lora_rank + s.rope_dim, s.hidden, 0.3f);
  f.kvb = testing::random_bf16(rng, s.n_heads * (s.nope_dim + s.v_dim), s.kv_lora_rank, 0.3f);
  f.o = testing::random_bf16(rng, s.hidden, s.n_heads * s.v_dim, 0.3f);
  f.w.kv_a = f.kva.view;
  f.w.kv_b = f.kvb.view;
  f.w.o_proj = f.o.view;
  f.w.kv_a_norm = testing::random_vector(rng, s.kv_lora_rank, 1.0f, 0.1f);
  if (gate) {
    f.g = testing::random_bf16(rng, s.n_heads * s.v_dim, s.hidden, 0.3f);
    f.w.g_proj = f.g.view;
  }
  return f;
}

TEST(Mla, AbsorbedMatchesExpanded) {
  for (bool q_low_rank : {true, false}) {
    std::mt19937 rng(q_low_rank ? 11 : 12);
    MlaFixture f = make_mla(rng, q_low_rank, q_low_rank);
    const int64_t d = f.shape.hidden;
    const std::vector<float> x = testing::random_vector(rng, 9 * d, 0.0f, 1.0f);
    MlaCache ce, ca;
    MlaWorkspace ws;  // shared by both forms and every call
    std::vector<float> oe(9 * d), oa(9 * d);
    // A 6-row prefill, then three one-row decode steps.
    mla_forward(f.shape, f.w, x.data(), 6, ce, MlaMode::kExpanded, ws, oe.data());
    mla_forward(f.shape, f.w, x.data(), 6, ca, MlaMode::kAbsorbed, ws, oa.data());
    for (int64_t t = 6; t < 9; ++t) {
      mla_forward(f.shape, f.w, x.data() + t * d, 1, ce, MlaMode::kExpanded, ws, oe.data() + t * d);
      mla_forward(f.shape, f.w, x.data() + t * d, 1, ca, MlaMode::kAbsorbed, ws, oa.data() + t * d);
    }
    EXPECT_LT(rel_diff(oa, oe), 1e-5) << "q_low_rank=" << q_low_rank;
    EXPECT_EQ(ce.latent, ca.latent);
    EXPECT_EQ(ce.n_positions, 9);
  }
}

TEST(Mla, RowsSeeOnlyEarlierPositions) {
  // Causality: a 9-row pass equals 4 rows then 5 rows on the same cache.
  std::mt19937 rng(13);
  MlaFixture f = make_mla(rng, true, true);
  const int64_t d = f.shape.hidden;
  const std::vector<float> x = testing::random_vector(rng, 9 * d, 0.0f, 1.0f);
  for (MlaMode mode : {MlaMode::kExpanded, MlaMode::kAbsorbed}) {
    MlaCache c1, c2;
    MlaWorkspace ws;
    std::vector<float> o1(9 * d), o2(9 * d);
    mla_forward(f.shape, f.w, x.data(), 9, c1, mode, ws, o1.data());
    mla_forward(f.shape, f.w, x.data(), 4, c2, mode, ws, o2.data());
    mla_forward(f.shape, f.w, x.data() + 4 * d, 5, c2, mode, ws, o2.data() + 4 * d);
    EXPECT_LT(rel_diff(o2, o1), 1e-6);
  }
}

TEST(Mla, CacheReservedForThePlannedContextNeverMoves) {
  std::mt19937 rng(14);
  MlaFixture f = make_mla(rng, false, false);
  const int64_t d = f.shape.hidden, n = 12;
  const std::vector<float> x = testing::random_vector(rng, n * d, 0.0f, 1.0f);
  MlaCache planned, unplanned;
  planned.reset(f.shape, n);
  MlaWorkspace ws;
  std::vector<float> o1(n * d), o2(n * d);
  mla_forward(f.shape, f.w, x.data(), 1, planned, MlaMode::kAuto, ws, o1.data());
  const float* latent = planned.latent.data();
  const float* k_pe = planned.k_pe.data();
  for (int64_t t = 1; t < n; ++t)
    mla_forward(f.shape, f.w, x.data() + t * d, 1, planned, MlaMode::kAuto, ws, o1.data() + t * d);
  EXPECT_EQ(planned.latent.data(), latent);
  EXPECT_EQ(planned.k_pe.data(), k_pe);
  for (int64_t t = 0; t < n; ++t)
    mla_forward(f.shape, f.w, x.data() + t * d, 1, unplanned, MlaMode::kAuto, ws,
                o2.data() + t * d);
  EXPECT_EQ(o1, o2);  // the reservation changes where the cache lives, not what it computes
  EXPECT_EQ(planned.latent, unplanned.latent);
}

// A verify pass's rows attend as one-row decode steps would (MlaMode::kDecodeRows): on a short
// cache, kAuto picks the expanded form for four rows where one row at a time picks the absorbed
// one from the second position on, so the rounding of a four-row kAuto call differs from decode
// steps, and kDecodeRows must not.
TEST(Mla, DecodeRowsEqualOneRowStepsWhereAutoDiffers) {
  std::mt19937 rng(21);
  MlaFixture f = make_mla(rng, true, true);
  const int64_t d = f.shape.hidden, n = 4;
  const std::vector<float> x = testing::random_vector(rng, n * d, 0.0f, 1.0f);
  MlaWorkspace ws;
  MlaCache steps, rows, together;
  std::vector<float> o_steps(n * d), o_rows(n * d), o_together(n * d);
  for (int64_t r = 0; r < n; ++r)
    mla_forward(f.shape, f.w, x.data() + r * d, 1, steps, MlaMode::kAuto, ws,
                o_steps.data() + r * d);
  mla_forward(f.shape, f.w, x.data(), n, rows, MlaMode::kDecodeRows, ws, o_rows.data());
  mla_forward(f.shape, f.w, x.data(), n, together, MlaMode::kAuto, ws, o_together.data());
  EXPECT_EQ(0, std::memcmp(o_steps.data(), o_rows.data(), o_steps.size() * sizeof(float)));
  EXPECT_EQ(rows.latent, steps.latent);
  EXPECT_EQ(rows.k_pe, steps.k_pe);
  // The case is one where the form matters: otherwise this test would not tell the modes apart.
  EXPECT_NE(0, std::memcmp(o_steps.data(), o_together.data(), o_steps.size() * sizeof(float)));
}

}  // namespace
}  // namespace deltafin::model
