// The GPU backend's VRAM tiers on the host, without a GPU: the plan for Kimi K3's real shapes
// under a 24 GB card's budget (a synthetic desc: the plan only counts), the order tiers fill,
// the refusals naming the tier, and the expert cache's hit/miss/eviction decisions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#if DELTAFIN_WITH_CUDA
#include "cuda/gpu_model.h"
#include "cuda/gpu_tiers.h"

namespace deltafin::cuda {
namespace {

// Never read: planning only counts, but a placed weight needs a non-null view.
const uint8_t kByte = 0;
const float kFloat = 0;

HostMatrix bf16(int64_t rows, int64_t cols) {
  return {HostMatrix::DType::kBf16, &kByte, nullptr, rows, cols};
}
HostMatrix mxfp4(int64_t rows, int64_t cols) {
  return {HostMatrix::DType::kMxfp4, &kByte, &kByte, rows, cols};
}

// Kimi K3 as published: 93 layers (MLA every 4th and the last, layer 0 dense), 896 MXFP4
// experts of [3072, 3584] per MoE layer, a vocabulary of 163840 over hidden 7168.
GpuModelDesc k3_desc() {
  GpuModelDesc d;
  GpuShape& sh = d.shape;
  sh.hidden = 7168;
  sh.vocab = 163840;
  sh.attn_res_block = 12;
  sh.kda_heads = 96;
  sh.kda_dim = 128;
  sh.conv_kernel = 4;
  sh.mla_heads = 96;
  sh.q_lora = 1536;
  sh.kv_rank = 512;
  sh.nope = 128;
  sh.rope = 64;
  sh.v_dim = 128;
  sh.moe_width = 3584;
  sh.router = {896, 16, 1, 1, true, 2.5f};
  const int64_t h = sh.hidden, p = 96 * 128;
  d.embed = bf16(sh.vocab, h);
  d.lm_head = bf16(sh.vocab, h);
  d.final_norm = &kFloat;
  d.output_res = &kFloat;
  for (int64_t l = 0; l < 93; ++l) {
    GpuLayer g;
    g.kda = !(l % 4 == 3 || l == 92);
    g.moe = l != 0;
    g.input_norm = g.post_norm = g.attn_res = g.mlp_res = &kFloat;
    if (g.kda) {
      g.kda_w = {bf16(p, h),  bf16(p, h),   bf16(p, h),   &kFloat,   &kFloat,
                 &kFloat,     bf16(128, h), bf16(p, 128), &kFloat,   &kFloat,
                 bf16(96, h), bf16(p, h),   &kFloat,      bf16(h, p)};
    } else {
      g.mla_w = {bf16(1536, h),     &kFloat,          bf16(96 * 192, 1536),
                 bf16(576, h),      &kFloat,          bf16(96 * 256, 512),
                 bf16(96 * 128, h), bf16(h, 96 * 128)};
    }
    if (g.moe) {
      GpuMoeLayer& m = g.moe_w;
      m.router = bf16(896, h);
      m.score_bias = &kFloat;
      m.latent_down = bf16(3584, h);
      m.latent_norm = &kFloat;
      m.latent_up = bf16(h, 3584);
      m.shared = {bf16(6144, h), bf16(6144, h), bf16(h, 6144)};
      m.experts.assign(896, {mxfp4(3072, 3584), mxfp4(3072, 3584), mxfp4(3584, 3072)});
    } else {
      g.dense = {bf16(33792, h), bf16(33792, h), bf16(h, 33792)};
    }
    d.layers.push_back(std::move(g));
  }
  return d;
}

GpuLimits limits(int64_t positions) {
  GpuLimits l;
  l.max_positions = positions;
  l.max_tentative_rows = 17;
  return l;
}

constexpr uint64_t kGiB = uint64_t{1} << 30;

std::string refusal(const GpuModelDesc& d, const GpuLimits& l, uint64_t budget) {
  try {
    plan_tiers(d, l, budget);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(GpuTiers, K3PlansUnderA24GBCard) {
  const GpuModelDesc d = k3_desc();
  const GpuLimits l = limits(32768);
  const uint64_t budget = 22 * kGiB;
  const TierPlan t = plan_tiers(d, l, budget);
  std::printf("K3 under --vram-budget 22G: %s\n", describe_tiers(t).c_str());
  EXPECT_FALSE(t.whole);
  EXPECT_EQ(t.n_layers, 93);
  EXPECT_EQ(t.n_experts, 92 * 896);
  // One expert's six tensors in VRAM are its span in the shard: nothing padded.
  EXPECT_EQ(t.expert_slot_bytes, 17547264u);
  EXPECT_EQ(t.min_expert_slots, 16);
  EXPECT_GE(t.expert_slots, t.min_expert_slots);
  EXPECT_GT(t.resident_layers, 0);
  EXPECT_GT(t.streamed_layers(), 0);
  EXPECT_LE(t.total(), budget);
  // Nothing else fits: not one more slot, and not the next layer.
  EXPECT_LT(budget - t.total(), t.expert_slot_bytes);
  // The globals (embedding and lm_head, 2 x 2.35 GB) and one sequence at 32K positions lead.
  EXPECT_GT(t.global_bytes, uint64_t{4'690'000'000});
  EXPECT_GT(t.sequence_bytes, uint64_t{24} * 32768 * 576 * 4);
  // The staging holds any streamed layer twice: the largest streamed one is a KDA + MoE layer.
  EXPECT_EQ(t.staging_bytes % 2, 0u);
  EXPECT_GT(t.staging_bytes / 2, uint64_t{1'000'000'000});
  EXPECT_EQ(t.resident_spine_bytes + t.streamed_spine_bytes,
            plan_tiers(d, l, 2000 * kGiB).resident_spine_bytes);
}

// The host side of the same plan on a 128 GiB host: the streamed spine passes through a pinned
// ring of three layers (not a ~93 GB image of all 84), so the pinned buffers take a few GB and
// most of the RAM budget is left for the RAM tier of experts (--experts stream).
TEST(GpuTiers, K3PinnedHostMemoryFitsA128GiBHost) {
  const GpuModelDesc d = k3_desc();
  const TierPlan t = plan_tiers(d, limits(32768), 22 * kGiB);
  std::printf("pinned: spine ring %.1f MiB (%lld buffers), expert staging %.1f MiB\n",
              t.spine_ring_bytes / 1048576.0, static_cast<long long>(t.spine_ring_buffers),
              t.expert_staging_bytes / 1048576.0);
  EXPECT_EQ(t.spine_ring_buffers, kSpineRingBuffers);
  EXPECT_EQ(t.spine_ring_bytes, kSpineRingBuffers * (t.staging_bytes / 2));
  EXPECT_EQ(t.expert_staging_bytes, kExpertStagingBuffers * t.expert_slot_bytes);
  EXPECT_LT(t.pinned_host_bytes(), 4 * kGiB);
  EXPECT_LT(t.pinned_host_bytes(), t.streamed_spine_bytes / 20);
  // The engine's budget on a 128 GiB host (90% of it, less a few GB the process holds).
  const uint64_t host_budget = 128 * kGiB * 9 / 10 - 4 * kGiB;
  EXPECT_NO_THROW(check_host_tiers(t, host_budget));
  const uint64_t ram_tier = host_budget - t.pinned_host_bytes();
  EXPECT_GT(ram_tier / t.expert_slot_bytes, 5500u) << "experts the RAM tier holds";
  // A budget that cannot hold the ring is refused, naming it and the flags.
  try {
    check_host_tiers(t, 2 * kGiB);
    ADD_FAILURE() << "a 2 GiB host budget accepted";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the streamed spine's ring"), std::string::npos) << m;
    EXPECT_NE(m.find("--memory-budget"), std::string::npos) << m;
    EXPECT_NE(m.find("--vram-budget"), std::string::npos) << m;
  }
  // Without streamed layers there is no ring.
  const TierPlan resident = plan_tiers(d, limits(4096), 140 * kGiB);
  EXPECT_EQ(resident.streamed_layers(), 0);
  EXPECT_EQ(resident.spine_ring_bytes, 0u);
}

TEST(GpuTiers, WholeModelWhenItFits) {
  const GpuModelDesc d = k3_desc();
  const GpuLimits l = limits(4096);
  const VramPlan whole = plan_vram(d, l);
  const TierPlan t = plan_tiers(d, l, whole.total());
  EXPECT_TRUE(t.whole);
  EXPECT_EQ(t.total(), whole.total());
  EXPECT_EQ(t.expert_bytes, whole.expert_bytes);
  EXPECT_EQ(t.global_bytes + t.resident_spine_bytes, whole.spine_bytes);
  EXPECT_EQ(t.resident_layers, 93);
  EXPECT_EQ(t.staging_bytes, 0u);
  // One byte less and the experts move to a cache (every layer still resident). The cache needs
  // no table of the experts for routing on the device (92 MoE layers x 896 x 3 tasks, ~10 MB),
  // so its slots hold every expert, routed through the host.
  const TierPlan less = plan_tiers(d, l, whole.total() - 1);
  EXPECT_FALSE(less.whole);
  EXPECT_EQ(less.resident_layers, 93);
  EXPECT_EQ(less.expert_slots, less.n_experts);
  EXPECT_EQ(whole.expert_bytes - less.expert_bytes, 92 * expert_table_bytes(896));
}

TEST(GpuTiers, SpineLayersFillInOrderBeforeTheCacheGrows) {
  const GpuModelDesc d = k3_desc();
  GpuLimits l = limits(1024);
  l.resident_layers = 10;
  l.expert_slots = 16;
  const TierPlan ten = plan_tiers(d, l, 1000 * kGiB);
  EXPECT_EQ(ten.resident_layers, 10);
  EXPECT_EQ(ten.expert_slots, 16);
  // With exactly that much VRAM, the budget's own plan keeps the same 10 layers and 16 slots;
  // a slot more of VRAM goes to the cache, not to an 11th layer.
  const TierPlan same = plan_tiers(d, limits(1024), ten.total());
  EXPECT_EQ(same.resident_layers, 10);
  EXPECT_EQ(same.expert_slots, 16);
  const TierPlan more = plan_tiers(d, limits(1024), ten.total() + ten.expert_slot_bytes);
  EXPECT_EQ(more.resident_layers, 10);
  EXPECT_EQ(more.expert_slots, 17);
}

TEST(GpuTiers, RefusalsNameTheTierAndTheFlag) {
  const GpuModelDesc d = k3_desc();
  const GpuLimits l = limits(32768);
  GpuLimits none = l;
  none.resident_layers = 0;
  const TierPlan least = plan_tiers(d, none, 1000 * kGiB);
  // The smallest plan the budget takes: no resident layer, 16 slots.
  const TierPlan fits =
      plan_tiers(d, l, least.working_bytes() + least.staging_bytes + 16 * least.expert_slot_bytes);
  EXPECT_EQ(fits.resident_layers, 0);
  EXPECT_EQ(fits.expert_slots, 16);
  const std::string cache = refusal(d, l, fits.total() - 1);
  EXPECT_NE(cache.find("the smallest expert cache (16 slots"), std::string::npos) << cache;
  EXPECT_NE(cache.find("--vram-budget"), std::string::npos) << cache;
  const std::string staging = refusal(d, l, least.working_bytes() + 1);
  EXPECT_NE(staging.find("spine staging"), std::string::npos) << staging;
  const std::string working = refusal(d, l, 4 * kGiB);
  EXPECT_NE(working.find("the working set"), std::string::npos) << working;
  EXPECT_NE(working.find("--max-context"), std::string::npos) << working;
  GpuLimits forced = l;
  forced.resident_layers = 80;
  const std::string layers = refusal(d, forced, 22 * kGiB);
  EXPECT_NE(layers.find("80 resident spine layers"), std::string::npos) << layers;
  EXPECT_NE(layers.find("--vram-spine-layers"), std::string::npos) << layers;
  forced.resident_layers = 94;
  EXPECT_THROW(plan_tiers(d, forced, 1000 * kGiB), std::invalid_argument);
}

TEST(ExpertSlotIndex, HitsAndMissesOfARouteBeforeAnyEviction) {
  ExpertSlotIndex x(3, 2, 8);
  std::vector<int64_t> got = x.lookup(0, {1, 2});
  EXPECT_EQ(got, (std::vector<int64_t>{-1, -1}));
  const int64_t s1 = x.take(0, 1), s2 = x.take(0, 2);
  EXPECT_EQ(s1, 0);
  EXPECT_EQ(s2, 1);
  x.release(s1);
  x.release(s2);
  // The next route: expert 2 is a hit (pinned), 5 a miss into the empty slot.
  got = x.lookup(0, {2, 5});
  EXPECT_EQ(got, (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(x.take(0, 5), 2);
  x.release(1);
  x.release(2);
  // Full: layer 1's expert 7 evicts the least requested, then least recent: (0, 1) and (0, 5)
  // were asked for once, (0, 2) twice; (0, 1) is older.
  EXPECT_EQ(x.lookup(1, {7}), std::vector<int64_t>{-1});
  EXPECT_EQ(x.take(1, 7), 0);
  EXPECT_EQ(x.slot_of(0, 1), -1);
  EXPECT_EQ(x.slot_of(1, 7), 0);
  EXPECT_EQ(x.slot_of(0, 2), 1);
  x.release(0);
  // The same expert id in another layer is another key.
  EXPECT_EQ(x.lookup(0, {7}), std::vector<int64_t>{-1});
}

TEST(ExpertSlotIndex, PinnedSlotsAreNeverEvicted) {
  ExpertSlotIndex x(2, 1, 8);
  x.lookup(0, {3, 4});
  x.take(0, 3);
  x.take(0, 4);
  x.release(0);
  x.release(1);
  // Both hits of this route are pinned until their products are issued: a third expert waits.
  EXPECT_EQ(x.lookup(0, {3, 4, 5}), (std::vector<int64_t>{0, 1, -1}));
  EXPECT_FALSE(x.has_free());
  EXPECT_EQ(x.take(0, 5), -1);
  x.release(0);  // expert 3 computed: its slot takes the miss (a wave)
  EXPECT_TRUE(x.has_free());
  EXPECT_EQ(x.take(0, 5), 0);
  EXPECT_EQ(x.slot_of(0, 3), -1);
  EXPECT_EQ(x.slot_of(0, 4), 1);
}

}  // namespace
}  // namespace deltafin::cuda
#endif
