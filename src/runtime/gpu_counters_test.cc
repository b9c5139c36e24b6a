// The GPU model's per-pass byte arithmetic (cuda/gpu_counters.h) on the K3 oracle bound to its
// views, without a device: each part against an independent count from the model's shapes. The
// counters of real passes are checked on a GPU (tests/gpu/gpu_model_test.cc).
#include <gtest/gtest.h>

#include <string>

#if DELTAFIN_WITH_CUDA
#include "cuda/gpu_counters.h"
#include "runtime/gpu_bind.h"
#endif

namespace deltafin::runtime {
namespace {

#if DELTAFIN_WITH_CUDA
const std::string kK3 = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";

// The spine's pieces a pass reads (all but the embedding, the lm_head and the routed experts).
struct Tally {
  uint64_t bytes = 0, pieces = 0;
  void add(uint64_t b) {
    bytes += b;
    pieces += b > 0;
  }
  void matrix(const cuda::HostMatrix& m) {
    ASSERT_TRUE(m.empty() || m.dtype == cuda::HostMatrix::DType::kBf16);
    add(m.empty() ? 0 : static_cast<uint64_t>(m.rows * m.cols) * 2);
  }
  void floats(const float* p, int64_t n) { add(p == nullptr ? 0 : static_cast<uint64_t>(n) * 4); }
};

TEST(GpuCounters, PassBytesOfTheK3Oracle) {
  const std::unique_ptr<model::Model> m = model::Model::load(kK3);
  const cuda::GpuModelDesc desc = bind_gpu_model(*m);
  const cuda::GpuShape& sh = desc.shape;
  const cuda::VramPlan plan = cuda::plan_vram(desc, {1000, 17});
  const cuda::PassByteModel b = cuda::pass_byte_model(desc, plan);

  ASSERT_EQ(sh.hidden, 64);
  ASSERT_EQ(sh.vocab, 512);
  EXPECT_EQ(b.head_bytes, 512u * 64 * 2);
  EXPECT_EQ(b.embed_row_bytes, 64u * 2);
  // 4 MLA layers: a rank-32 latent and an 8-wide k_pe per position, fp32.
  EXPECT_EQ(b.cache_position_bytes, 4u * (32 + 8) * 4);
  // 9 KDA layers of 4 heads x 16 x 16 state and 3 x 3 history rows of 64, read and written.
  EXPECT_EQ(b.kda_state_bytes, 9u * 2 * (4 * 16 * 16 + 3 * 3 * 64) * 4);

  Tally t;
  const int64_t d = sh.hidden, p = sh.kda_heads * sh.kda_dim;
  t.floats(desc.final_norm, d);
  t.floats(desc.output_res, d);
  for (const cuda::GpuLayer& l : desc.layers) {
    for (const float* v : {l.input_norm, l.post_norm, l.attn_res, l.mlp_res}) t.floats(v, d);
    if (l.kda) {
      const cuda::GpuKdaLayer& k = l.kda_w;
      for (const cuda::HostMatrix* w :
           {&k.q_proj, &k.k_proj, &k.v_proj, &k.f_a, &k.f_b, &k.b_proj, &k.g_proj, &k.o_proj})
        t.matrix(*w);
      for (const float* v : {k.q_conv, k.k_conv, k.v_conv}) t.floats(v, p * sh.conv_kernel);
      t.floats(k.a_log, sh.kda_heads);
      t.floats(k.dt_bias, p);
      t.floats(k.o_norm, sh.kda_dim);
    } else {
      const cuda::GpuMlaLayer& a = l.mla_w;
      for (const cuda::HostMatrix* w : {&a.q_a, &a.q_b, &a.kv_a, &a.kv_b, &a.g_proj, &a.o_proj})
        t.matrix(*w);
      t.floats(a.q_a_norm, sh.q_lora);
      t.floats(a.kv_a_norm, sh.kv_rank);
    }
    if (l.moe) {
      const cuda::GpuMoeLayer& e = l.moe_w;
      for (const cuda::HostMatrix* w :
           {&e.router, &e.latent_down, &e.latent_up, &e.shared.gate, &e.shared.up, &e.shared.down})
        t.matrix(*w);
      t.floats(e.score_bias, sh.router.n_experts);
      t.floats(e.latent_norm, sh.moe_width);
    } else {
      for (const cuda::HostMatrix* w : {&l.dense.gate, &l.dense.up, &l.dense.down}) t.matrix(*w);
    }
  }
  // The plan rounds each piece up to 256 bytes.
  EXPECT_GE(b.spine_bytes, t.bytes);
  EXPECT_LE(b.spine_bytes, t.bytes + 255 * t.pieces);

  // A decode pass after a 16-row prompt pass that skipped the head.
  cuda::GpuCounters c;
  b.add_pass(c, 16, 0, 16);
  b.add_pass(c, 1, 1, 17);
  EXPECT_EQ(c.passes, 2u);
  EXPECT_EQ(c.rows, 17u);
  EXPECT_EQ(c.spine_bytes, 2 * b.spine_bytes);
  EXPECT_EQ(c.head_bytes, b.head_bytes);
  EXPECT_EQ(c.embed_bytes, 17 * b.embed_row_bytes);
  EXPECT_EQ(c.attention_cache_bytes, 33 * b.cache_position_bytes);
  EXPECT_EQ(c.kda_state_bytes, 2 * b.kda_state_bytes);
  EXPECT_EQ(c.expert_bytes, 0u);  // counted from the routes, on the device
  EXPECT_EQ(c.touched_bytes(), c.spine_bytes + c.head_bytes + c.embed_bytes +
                                   c.attention_cache_bytes + c.kda_state_bytes);
}

// The model the GPU places by tiers touches the same bytes whatever they are: the whole model,
// streamed spine layers (read from their staging buffer) or an expert cache.
TEST(GpuCounters, PassBytesAreTheSameInEveryTier) {
  const std::unique_ptr<model::Model> m = model::Model::load(kK3);
  const cuda::GpuModelDesc desc = bind_gpu_model(*m);
  const cuda::PassByteModel whole = cuda::pass_byte_model(desc, cuda::plan_vram(desc, {1000, 17}));
  ASSERT_EQ(whole.layer_expert_bytes.size(), desc.layers.size());
  for (size_t l = 0; l < desc.layers.size(); ++l) {
    const cuda::GpuLayer& g = desc.layers[l];
    EXPECT_EQ(whole.layer_expert_bytes[l], g.moe ? cuda::expert_bytes(g.moe_w.experts[0]) : 0u);
  }
  for (const int64_t resident : {-1, 0, 2}) {
    cuda::GpuLimits limits{1000, 17};
    limits.resident_layers = resident;
    limits.expert_slots = resident < 0 ? 0 : 3;
    const cuda::TierPlan tiers = cuda::plan_tiers(desc, limits, uint64_t{1} << 40);
    EXPECT_EQ(tiers.whole, resident < 0);
    const cuda::PassByteModel b = cuda::pass_byte_model(desc, tiers);
    EXPECT_EQ(b.spine_bytes, whole.spine_bytes) << resident;
    EXPECT_EQ(b.head_bytes, whole.head_bytes);
    EXPECT_EQ(b.embed_row_bytes, whole.embed_row_bytes);
    EXPECT_EQ(b.cache_position_bytes, whole.cache_position_bytes);
    EXPECT_EQ(b.kda_state_bytes, whole.kda_state_bytes);
    EXPECT_EQ(b.layer_expert_bytes, whole.layer_expert_bytes);
    EXPECT_EQ(b.n_experts, whole.n_experts);
  }
}
#endif

}  // namespace
}  // namespace deltafin::runtime
