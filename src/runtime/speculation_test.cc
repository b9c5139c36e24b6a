// Speculation through the public API on the k3-tiny-a fixture: ids, stop reasons, the session's
// ids and what follows are the same with speculation off and on, forced to verify drafted ids on
// every pass (draft_min), for greedy and seeded sampling, at every stop rule and at the context
// limit; the stats count what was drafted and kept.
#include <gtest/gtest.h>

#include "deltafin/engine.h"
#include "testing/generate_outcome.h"
#include "testing/k3_tiny_a.h"

namespace deltafin {
namespace {

const std::string& kModel = ::deltafin::testing::kK3TinyADir;
const std::vector<int32_t>& kPrompt = ::deltafin::testing::kK3TinyAPrompt;
const std::vector<int32_t>& kGreedy = ::deltafin::testing::kK3TinyAGreedy;

using ::deltafin::testing::expect_same;
using ::deltafin::testing::generate;
using ::deltafin::testing::Outcome;

GenerateOptions options(Speculation mode, int draft_min = 0, int draft_max = 7) {
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.stop_at_eos = false;
  o.speculation.mode = mode;
  o.speculation.draft_min = draft_min;
  o.speculation.draft_max = draft_max;
  return o;
}

TEST(Speculation, GreedyIdsAreTheOraclesWhateverIsDrafted) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 64});
  const Outcome off = generate(*engine, options(Speculation::kOff), kPrompt);
  EXPECT_EQ(off.result.ids, kGreedy);
  EXPECT_EQ(off.stats.verify_passes, 0);
  for (const int forced : {1, 2, 4, 7}) {
    const Outcome on = generate(*engine, options(Speculation::kNgram, forced, forced), kPrompt);
    expect_same(off, on, "draft_min " + std::to_string(forced));
    EXPECT_GT(on.stats.verify_passes, 0);
    EXPECT_GE(on.stats.drafted_tokens, on.stats.verify_passes * std::min(forced, 1));
    EXPECT_EQ(on.stats.decode_tokens, off.stats.decode_tokens) << "the kept rows";
    for (const PassReport& p : on.passes) {
      EXPECT_EQ(p.rows, p.drafted + 1);
      EXPECT_LE(p.accepted, p.drafted);
    }
  }
}

TEST(Speculation, AKnownContinuationIsAcceptedSeveralIdsPerPass) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 64});
  const Outcome off = generate(*engine, options(Speculation::kOff), kPrompt);
  for (const int width : {2, 4, 8}) {
    GenerateOptions o = options(Speculation::kScript, 0, width - 1);
    o.speculation.script = kGreedy;
    const Outcome on = generate(*engine, o, kPrompt);
    expect_same(off, on, "width " + std::to_string(width));
    // 15 decoded ids (the 16th stays pending), width at a time: every drafted id is accepted.
    EXPECT_EQ(on.stats.decode_passes, (15 + width - 1) / width) << width;
    EXPECT_EQ(on.stats.accepted_tokens, on.stats.drafted_tokens) << width;
    EXPECT_EQ(on.stats.decode_tokens, 15);
  }
  // A script wrong at its 6th id: the pass that drafts it keeps the rows before it, then the
  // model's own id goes on.
  std::vector<int32_t> wrong = kGreedy;
  wrong[5] = (wrong[5] + 1) % 512;
  GenerateOptions o = options(Speculation::kScript, 0, 7);
  o.speculation.script = wrong;
  const Outcome cut = generate(*engine, o, kPrompt);
  expect_same(off, cut, "cut");
  ASSERT_FALSE(cut.passes.empty());
  EXPECT_EQ(cut.passes[0].drafted, 7);   // ids 2..8 after the first
  EXPECT_EQ(cut.passes[0].accepted, 4);  // ids 2..5; the 6th is the wrong one
  EXPECT_LT(cut.stats.accepted_tokens, cut.stats.drafted_tokens);
}

TEST(Speculation, SeededSamplingDrawsTheSameIds) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 64});
  for (const uint64_t seed : {1u, 7u, 42u}) {
    GenerateOptions o = options(Speculation::kOff);
    o.temperature = 0.9f;
    o.top_p = 0.95f;
    o.seed = seed;
    const Outcome off = generate(*engine, o, kPrompt);
    for (const int forced : {1, 3, 6}) {
      o.speculation = {Speculation::kNgram, forced, forced};
      expect_same(off, generate(*engine, o, kPrompt),
                  "seed " + std::to_string(seed) + " draft_min " + std::to_string(forced));
    }
    o.speculation = {};
    expect_same(off, generate(*engine, o, kPrompt), "auto, seed " + std::to_string(seed));
  }
}

TEST(Speculation, StopRulesEndAtTheSameId) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 64});
  for (const int forced : {1, 4, 7}) {
    const std::string what = "draft_min " + std::to_string(forced);
    GenerateOptions off = options(Speculation::kOff), on = options(Speculation::kNgram, forced);
    off.stop_ids = on.stop_ids = {kGreedy[5]};
    expect_same(generate(*engine, off, kPrompt), generate(*engine, on, kPrompt), what + " stop id");
    off.stop_ids.clear();
    on.stop_ids.clear();
    off.stop_at_eos = on.stop_at_eos = true;  // the fixture's eos, should it come
    expect_same(generate(*engine, off, kPrompt), generate(*engine, on, kPrompt), what + " eos");
    expect_same(generate(*engine, off, kPrompt, 3), generate(*engine, on, kPrompt, 3),
                what + " callback");
    for (const int max_new : {1, 2, 5}) {
      off.max_new_tokens = on.max_new_tokens = max_new;
      expect_same(generate(*engine, off, kPrompt), generate(*engine, on, kPrompt),
                  what + " max_new " + std::to_string(max_new));
    }
  }
}

TEST(Speculation, TheContextLimitStopsAtTheSameId) {
  EngineOptions eo;
  eo.model_dir = kModel;
  eo.max_context_tokens = 30;
  std::unique_ptr<Engine> engine = Engine::load(eo);
  const Outcome off = generate(*engine, options(Speculation::kOff), kPrompt);
  EXPECT_EQ(off.result.stop, StopReason::kContextFull);
  for (const int forced : {1, 4, 7})
    expect_same(off, generate(*engine, options(Speculation::kNgram, forced), kPrompt),
                "draft_min " + std::to_string(forced));
}

}  // namespace
}  // namespace deltafin
