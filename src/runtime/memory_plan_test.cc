// Tier planning: mapped when the whole model fits, the largest spine layers resident first, the
// budget never exceeded, slots from what is left, refusals that say what is needed.
#include <gtest/gtest.h>

#include "base/error.h"
#include "runtime/memory_plan.h"

namespace deltafin::runtime {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TierInputs inputs(uint64_t budget_mib) {
  TierInputs in;
  in.budget_bytes = budget_mib * kMiB;
  in.process_bytes = 50 * kMiB;
  in.working_bytes = 100 * kMiB;
  in.global_bytes = 200 * kMiB;
  in.layer_bytes = {300 * kMiB, 100 * kMiB, 120 * kMiB, 100 * kMiB};
  in.lookahead_bytes = 12 * kMiB;
  in.n_experts = 3 * 64;
  in.slot_bytes = 16 * kMiB;
  in.expert_bytes = in.n_experts * in.slot_bytes;
  in.min_slots = 8;
  return in;
}

TEST(MemoryPlan, MapsEverythingWhenTheWholeModelFits) {
  const TierPlan p = plan_tiers(inputs(10000));
  EXPECT_TRUE(p.experts_mapped);
  EXPECT_EQ(p.n_streamed, 0);
  EXPECT_TRUE(p.within_budget);
  EXPECT_EQ(p.resident_spine_bytes, 620 * kMiB);
}

TEST(MemoryPlan, SpineFirstThenCacheSlots) {
  // 3000 MiB: everything minus 1.8 GB of experts would not fit; the spine does.
  const TierPlan p = plan_tiers(inputs(3000));
  EXPECT_FALSE(p.experts_mapped);
  EXPECT_EQ(p.n_streamed, 0);
  EXPECT_EQ(p.resident_spine_bytes, 620 * kMiB);
  EXPECT_GT(p.n_slots, 8);
  EXPECT_LE(p.planned_bytes, 3000 * kMiB);
  EXPECT_GT(p.planned_bytes + 16 * kMiB, 3000 * kMiB);  // one more slot would not fit
}

TEST(MemoryPlan, LargestLayersStayWhenTheSpineDoesNotFit) {
  // fixed 350 + routers 12 + 8 slots 128 = 490; 300 resident + 2 x 120 buffers = 540 -> 1030,
  // less than streaming every layer (2 x 300 buffers).
  const TierPlan p = plan_tiers(inputs(1040));
  EXPECT_FALSE(p.experts_mapped);
  EXPECT_TRUE(p.resident[0]);
  EXPECT_EQ(p.n_streamed, 3);
  EXPECT_EQ(p.streamed_bytes_per_pass, 320 * kMiB);
  EXPECT_EQ(p.stream_buffer_bytes, 240 * kMiB);
  EXPECT_EQ(p.n_slots, 8);
  EXPECT_LE(p.planned_bytes, 1040 * kMiB);
}

TEST(MemoryPlan, EveryPlanStaysWithinItsBudget) {
  for (uint64_t mib = 1030; mib < 4500; mib += 37) {
    const TierPlan p = plan_tiers(inputs(mib));
    EXPECT_TRUE(p.within_budget) << mib;
    EXPECT_LE(p.planned_bytes, mib * kMiB) << mib;
    EXPECT_GE(p.n_slots, p.experts_mapped ? 0 : 8) << mib;
    EXPECT_LE(p.n_slots, 192) << mib;
  }
}

TEST(MemoryPlan, ForcedModes) {
  TierInputs in = inputs(10000);
  in.spine = SpineMode::kStream;
  in.experts = ExpertMode::kStream;
  in.forced_slots = 3;
  TierPlan p = plan_tiers(in);
  EXPECT_FALSE(p.experts_mapped);
  EXPECT_EQ(p.n_streamed, 4);
  EXPECT_EQ(p.n_slots, 3);
  in = inputs(500);
  in.experts = ExpertMode::kMapped;
  p = plan_tiers(in);
  EXPECT_TRUE(p.experts_mapped);
  EXPECT_FALSE(p.within_budget);
  EXPECT_NE(describe_tiers(in, p, "test").find("NOT within the budget"), std::string::npos);
  in = inputs(10000);
  in.forced_slots = 1;
  EXPECT_THROW(plan_tiers(in), base::Error);
}

TEST(MemoryPlan, RefusesABudgetBelowTheStreamingMinimum) {
  try {
    plan_tiers(inputs(700));
    FAIL() << "700 MiB accepted";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("streaming still needs at least"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace deltafin::runtime
