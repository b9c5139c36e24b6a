// The model drafters through the public API, on the k3-tiny-a fixture with the dspark-tiny-a
// oracle drafter laid out beside it as setup installs one: the ids, stop reasons, the session's
// ids and the call after are the same with DSpark drafting as with speculation off, greedy and
// seeded, while its drafts are accepted; and the memory plan's choice of drafters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/error.h"
#include "deltafin/engine.h"
#include "runtime/memory_plan.h"
#include "testing/generate_outcome.h"
#include "testing/k3_tiny_a.h"
#include "testing/text_model.h"

namespace deltafin {
namespace {

namespace fs = std::filesystem;

// MODEL/: k3-tiny-a's files (linked, with a byte-level tokenizer) and drafters/dspark -> the
// oracle drafter.
class K3WithDSpark : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("df_drafters_" + std::to_string(::getpid()));
    ::deltafin::testing::make_text_model(DELTAFIN_SOURCE_DIR, "k3-tiny-a", dir_.string());
    fs::create_directories(dir_ / "drafters");
    fs::create_directory_symlink(fs::path(DELTAFIN_SOURCE_DIR) / "tests/fixtures/dspark-tiny-a",
                                 dir_ / "drafters/dspark");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

using ::deltafin::testing::expect_same;
using ::deltafin::testing::Outcome;

Outcome generate(Engine& engine, const GenerateOptions& opt) {
  return ::deltafin::testing::generate(engine, opt, ::deltafin::testing::kK3TinyAPrompt);
}

GenerateOptions options(Speculation mode, int draft_min = 0) {
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.stop_at_eos = false;
  o.speculation.mode = mode;
  o.speculation.draft_min = draft_min;
  o.speculation.chat = true;  // DSpark drafts chat requests in auto
  return o;
}

TEST_F(K3WithDSpark, GreedyIdsAreTheOraclesAndDraftsAreAccepted) {
  EngineOptions eo{dir_.string(), 64};
  std::unique_ptr<Engine> engine = Engine::load(eo);
  EXPECT_EQ(engine->memory_plan().drafters, std::vector<std::string>{"dspark"});
  const Outcome off = generate(*engine, options(Speculation::kOff));
  EXPECT_EQ(off.result.ids, ::deltafin::testing::kK3TinyAGreedy);
  for (const Speculation mode : {Speculation::kDspark, Speculation::kAuto}) {
    for (const int forced : {0, 1, 3, 7}) {
      const std::string what =
          "mode " + std::to_string(static_cast<int>(mode)) + " draft_min " + std::to_string(forced);
      const Outcome on = generate(*engine, options(mode, forced));
      expect_same(off, on, what);
      EXPECT_GT(on.stats.verify_passes, 0) << what;
      // The oracle's trace accepts 1, 7, 0, 2 drafts at its first steps; the controller alone
      // probes one draft first, then backs off after the misses.
      EXPECT_GE(on.stats.accepted_tokens, forced > 0 ? 3 : 1) << what;
    }
  }
}

TEST_F(K3WithDSpark, SeededSamplingAndStopsAreUnchanged) {
  std::unique_ptr<Engine> engine = Engine::load({dir_.string(), 64});
  for (const uint64_t seed : {1u, 7u, 42u}) {
    GenerateOptions o = options(Speculation::kOff);
    o.temperature = 0.9f;
    o.top_p = 0.95f;
    o.seed = seed;
    const Outcome off = generate(*engine, o);
    for (const int forced : {1, 4}) {
      o.speculation = {Speculation::kDspark, 7, forced};
      o.speculation.chat = true;
      expect_same(off, generate(*engine, o), "seed " + std::to_string(seed));
    }
  }
  GenerateOptions off = options(Speculation::kOff), on = options(Speculation::kDspark, 2);
  off.stop_ids = on.stop_ids = {::deltafin::testing::kK3TinyAGreedy[4]};
  const Outcome a = generate(*engine, off), b = generate(*engine, on);
  expect_same(a, b, "stop id");
  EXPECT_EQ(b.result.stop, StopReason::kStopId);
  EXPECT_EQ(b.result.ids.size(), 5u);
}

TEST_F(K3WithDSpark, OffAndNgramLoadNoDrafter) {
  EngineOptions eo{dir_.string(), 64};
  eo.drafters = DrafterLoad::kOff;
  EXPECT_TRUE(Engine::load(eo)->memory_plan().drafters.empty());
  eo.drafters = DrafterLoad::kQwen;  // no Qwen3 folder beside the model
  EXPECT_THROW(Engine::load(eo), std::runtime_error);
}

// The plan weighs a drafter's memory against the reads it saves.
constexpr uint64_t kMiB = uint64_t{1} << 20;

runtime::TierInputs streamed_inputs(uint64_t budget_mib) {
  runtime::TierInputs in;
  in.budget_bytes = budget_mib * kMiB;
  in.process_bytes = 50 * kMiB;
  in.working_bytes = 100 * kMiB;
  in.global_bytes = 200 * kMiB;
  in.layer_bytes = {300 * kMiB, 300 * kMiB, 300 * kMiB, 300 * kMiB};
  in.n_experts = 2 * 64;
  in.slot_bytes = 16 * kMiB;
  in.expert_bytes = in.n_experts * in.slot_bytes;
  in.min_slots = 8;
  in.experts_per_pass = 2 * 4;
  return in;
}

TEST(DrafterPlan, LoadedWhenItSavesMoreThanItsMemoryCosts) {
  // 1500 MiB: the spine streams; a 100 MiB drafter saving 60% of each pass's reads is loaded.
  runtime::TierInputs in = streamed_inputs(1500);
  const runtime::TierPlan without = runtime::plan_tiers(in);
  in.drafters = {{"small", 100 * kMiB, 0.6, false}};
  const runtime::TierPlan with = runtime::plan_tiers(in);
  ASSERT_EQ(with.drafter_loaded.size(), 1u);
  EXPECT_TRUE(with.drafter_loaded[0]) << with.drafter_reasons[0];
  EXPECT_EQ(with.drafter_bytes, 100 * kMiB);
  EXPECT_LE(with.planned_bytes, in.budget_bytes);
  EXPECT_GE(runtime::disk_bytes_per_pass(in, with), runtime::disk_bytes_per_pass(in, without));
}

TEST(DrafterPlan, NotLoadedWhenItsMemoryCostsMoreReadsThanItSaves) {
  // A drafter that saves 5% of a pass but takes 300 MiB that would hold a spine layer.
  runtime::TierInputs in = streamed_inputs(2000);
  ASSERT_FALSE(runtime::plan_tiers(in).experts_mapped);
  in.drafters = {{"big", 300 * kMiB, 0.05, false}};
  runtime::TierPlan p = runtime::plan_tiers(in);
  EXPECT_FALSE(p.drafter_loaded[0]) << p.drafter_reasons[0];
  EXPECT_EQ(p.drafter_bytes, 0u);
  EXPECT_NE(p.drafter_reasons[0].find("not worth its memory"), std::string::npos);
  // Asked for by name it is loaded anyway, and the plan streams more instead.
  in.drafters[0].forced = true;
  p = runtime::plan_tiers(in);
  EXPECT_TRUE(p.drafter_loaded[0]);
  EXPECT_LE(p.planned_bytes, in.budget_bytes);
  EXPECT_NE(runtime::describe_drafters(in, p).find("big (300.0 MiB) loaded, asked for"),
            std::string::npos)
      << runtime::describe_drafters(in, p);
}

TEST(DrafterPlan, EverythingMappedKeepsADrafterThatStillFits) {
  runtime::TierInputs in = streamed_inputs(100000);
  in.drafters = {{"a", 100 * kMiB, 0.6, false}, {"b", 200 * kMiB, 0.4, false}};
  const runtime::TierPlan p = runtime::plan_tiers(in);
  EXPECT_TRUE(p.experts_mapped);
  EXPECT_TRUE(p.drafter_loaded[0] && p.drafter_loaded[1]);
  EXPECT_EQ(p.drafter_bytes, 300 * kMiB);
}

TEST(DrafterPlan, AForcedDrafterThatCannotFitIsAnErrorNamingIt) {
  runtime::TierInputs in = streamed_inputs(1500);
  in.drafters = {{"huge", 4000 * kMiB, 0.6, true}};
  try {
    runtime::plan_tiers(in);
    FAIL() << "no error";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("drafter huge"), std::string::npos) << e.what();
  }
  in.drafters[0].forced = false;  // unforced: left out, the model still runs
  const runtime::TierPlan p = runtime::plan_tiers(in);
  EXPECT_FALSE(p.drafter_loaded[0]);
}

}  // namespace
}  // namespace deltafin
