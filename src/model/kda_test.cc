// The KDA block: a chunked prefill against token-by-token decode, conv and recurrent state carried
// across calls, and a reused workspace (the kernels' own tests are in kernels/kda_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/kda.h"
#include "model/test_weights.h"

namespace deltafin::model {
namespace {

using testing::rel_diff;

struct KdaFixture {
  KdaShape shape;
  testing::OwnedMatrix q, k, v, fa, fb, b, g, ga, gb, o;
  KdaWeights w;
};

KdaFixture make_kda(std::mt19937& rng, KdaGate gate, bool full_rank) {
  KdaFixture f;
  f.shape = {24, 3, 8, 4, gate, -5.0f, 1e-5f};
  const int64_t d = 24, p = 24, hd = 8;
  f.q = testing::random_bf16(rng, p, d, 0.3f);
  f.k = testing::random_bf16(rng, p, d, 0.3f);
  f.v = testing::random_bf16(rng, p, d, 0.3f);
  f.fa = testing::random_bf16(rng, hd, d, 0.3f);
  f.fb = testing::random_bf16(rng, p, hd, 0.3f);
  f.b = testing::random_bf16(rng, 3, d, 0.3f);
  f.o = testing::random_bf16(rng, d, p, 0.3f);
  f.w.q_proj = f.q.view;
  f.w.k_proj = f.k.view;
  f.w.v_proj = f.v.view;
  f.w.f_a = f.fa.view;
  f.w.f_b = f.fb.view;
  f.w.b_proj = f.b.view;
  f.w.o_proj = f.o.view;
  if (full_rank) {
    f.g = testing::random_bf16(rng, p, d, 0.3f);
    f.w.g_proj = f.g.view;
  } else {
    f.ga = testing::random_bf16(rng, hd, d, 0.3f);
    f.gb = testing::random_bf16(rng, p, hd, 0.3f);
    f.w.g_a = f.ga.view;
    f.w.g_b = f.gb.view;
  }
  f.w.q_conv = testing::random_vector(rng, p * 4, 0.0f, 0.5f);
  f.w.k_conv = testing::random_vector(rng, p * 4, 0.0f, 0.5f);
  f.w.v_conv = testing::random_vector(rng, p * 4, 0.0f, 0.5f);
  f.w.a_log = testing::random_vector(rng, 3, 0.5f, 0.5f);
  f.w.dt_bias = testing::random_vector(rng, p, 0.0f, 1.0f);
  f.w.o_norm = testing::random_vector(rng, hd, 1.0f, 0.1f);
  return f;
}

TEST(KdaForward, PrefillMatchesTokenByToken) {
  for (KdaGate gate : {KdaGate::kLowerBound, KdaGate::kSoftplus}) {
    std::mt19937 rng(3);
    KdaFixture f = make_kda(rng, gate, gate == KdaGate::kLowerBound);
    const int64_t n = 19, d = f.shape.hidden;
    const std::vector<float> x = testing::random_vector(rng, n * d, 0.0f, 1.0f);
    KdaState whole, split, steps;
    whole.reset(f.shape);
    split.reset(f.shape);
    steps.reset(f.shape);
    std::vector<float> out_whole(n * d), out_split(n * d), out_steps(n * d);
    KdaWorkspace ws;  // reused by every call below
    kda_forward(f.shape, f.w, x.data(), n, whole, KdaMode::kChunked, ws, out_whole.data());
    // Two chunked calls carry conv and recurrent state across the boundary.
    kda_forward(f.shape, f.w, x.data(), 7, split, KdaMode::kChunked, ws, out_split.data());
    kda_forward(f.shape, f.w, x.data() + 7 * d, n - 7, split, KdaMode::kChunked, ws,
                out_split.data() + 7 * d);
    for (int64_t t = 0; t < n; ++t)
      kda_forward(f.shape, f.w, x.data() + t * d, 1, steps, KdaMode::kRecurrent, ws,
                  out_steps.data() + t * d);
    // The workspace now holds what the other passes left; auto runs n > 1 rows chunked.
    KdaState again;
    again.reset(f.shape);
    std::vector<float> out_again(n * d);
    kda_forward(f.shape, f.w, x.data(), n, again, KdaMode::kAuto, ws, out_again.data());
    EXPECT_EQ(out_again, out_whole);
    EXPECT_LT(rel_diff(out_whole, out_steps), 1e-5);
    EXPECT_LT(rel_diff(out_split, out_steps), 1e-5);
    EXPECT_LT(rel_diff(whole.s, steps.s), 1e-5);
    EXPECT_EQ(whole.conv, steps.conv);  // the last inputs, copied, identical
  }
}

}  // namespace
}  // namespace deltafin::model
