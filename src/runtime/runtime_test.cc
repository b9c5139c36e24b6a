// The public API on the k3-tiny-a fixture: generation continues across calls exactly as one call
// would, prefix sync, stop rules, sampling determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "base/error.h"
#include "deltafin/engine.h"
#include "runtime/sampler.h"
#include "testing/k3_tiny_a.h"

namespace deltafin {
namespace {

const std::string& kModel = ::deltafin::testing::kK3TinyADir;
const std::vector<int32_t>& kPrompt = ::deltafin::testing::kK3TinyAPrompt;
const std::vector<int32_t>& kGreedy = ::deltafin::testing::kK3TinyAGreedy;

TEST(Sampler, GreedyTakesTheLowestIdOnTies) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(runtime::argmax(logits), 1);
  GenerateOptions opt;
  opt.temperature = 0.8f;
  opt.top_k = 1;
  runtime::Sampler top1(opt);
  EXPECT_EQ(top1.next(logits), 1);
}

// NaN never wins, and a NaN first stays (the running maximum compares, never reads back).
TEST(Sampler, GreedySkipsNaNAndMatchesAPlainScan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(runtime::argmax(std::vector<float>{-1.0f, nan, 3.0f, nan, 3.0f}), 2);
  EXPECT_EQ(runtime::argmax(std::vector<float>{nan, 5.0f, 7.0f}), 0);
  EXPECT_EQ(runtime::argmax(std::vector<float>{-0.0f, 0.0f}), 0);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> few(-8, 8);  // many ties
  for (int trial = 0; trial < 60; ++trial) {
    // Sizes around the 16-float steps, NaNs anywhere but first, the maximum in the tail too.
    std::vector<float> v(1000 + trial % 20);
    for (float& x : v) x = static_cast<float>(few(rng));
    if (trial % 3 == 0) v.back() = 9.0f;
    std::vector<float> plain = v;
    for (size_t i = 1 + trial % 7; i < v.size(); i += 37) {
      v[i] = nan;
      plain[i] = -100.0f;  // never the maximum
    }
    const auto first_max = std::max_element(plain.begin(), plain.end()) - plain.begin();
    EXPECT_EQ(runtime::argmax(v), first_max) << "trial " << trial;
  }
}

TEST(Sampler, SameSeedSameDraws) {
  const std::vector<float> logits = {0.1f, 0.3f, 0.2f, 0.25f, 0.0f};
  GenerateOptions opt;
  opt.temperature = 1.0f;
  opt.top_p = 0.9f;
  opt.seed = 42;
  runtime::Sampler a(opt), b(opt);
  std::vector<int32_t> da, db;
  for (int i = 0; i < 50; ++i) {
    da.push_back(a.next(logits));
    db.push_back(b.next(logits));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(std::count(da.begin(), da.end(), da[0]), 50);  // it does sample
}

TEST(Context, DefaultIsCappedAndTooLongIsRefused) {
  EngineOptions o;
  o.model_dir = kModel;
  std::unique_ptr<Engine> engine = Engine::load(o);
  EXPECT_EQ(engine->info().max_context_tokens, kDefaultMaxContext);  // the model allows 1048576
  // k3-tiny-a: its MLA layers keep (kv_lora_rank + rope) floats per position each.
  EXPECT_GT(engine->memory_plan().context_bytes, 0u);
  EXPECT_EQ(engine->memory_plan().context_bytes % kDefaultMaxContext, 0u);
  o.max_context_tokens = 2'000'000;
  EXPECT_THROW(Engine::load(o), base::Error);  // beyond max_position_embeddings
}

TEST(Context, PlanGrowsWithTheContextItHolds) {
  EngineOptions o;
  o.model_dir = kModel;
  o.max_context_tokens = 1000;
  const uint64_t small = Engine::load(o)->memory_plan().context_bytes;
  o.max_context_tokens = 4000;
  const uint64_t large = Engine::load(o)->memory_plan().context_bytes;
  EXPECT_EQ(large, 4 * small);
}

TEST(Context, SessionStopsAtTheLimit) {
  EngineOptions o;
  o.model_dir = kModel;
  o.max_context_tokens = 30;
  std::unique_ptr<Engine> engine = Engine::load(o);
  std::unique_ptr<Session> s = engine->new_session();
  GenerateOptions opt;
  opt.max_new_tokens = 16;
  opt.stop_at_eos = false;
  // 24 prompt ids leave room for 6 more positions: ids 1..6 are run, the 7th is returned unrun.
  const GenerateResult r = s->generate(kPrompt, opt);
  EXPECT_EQ(r.stop, StopReason::kContextFull);
  ASSERT_EQ(r.ids.size(), 7u);
  EXPECT_EQ(r.ids, std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 7));  // unchanged
  EXPECT_EQ(s->position(), 31);  // 30 run + the pending id
  EXPECT_EQ(s->generate({}, opt).stop, StopReason::kContextFull);
  EXPECT_THROW(s->forward(std::vector<int32_t>{1}), base::Error);
  s->reset();
  EXPECT_THROW(s->forward(std::vector<int32_t>(31, 5)), base::Error);
  EXPECT_EQ(s->position(), 0);  // a refused forward runs nothing
  EXPECT_NO_THROW(s->forward(std::vector<int32_t>(30, 5)));
}

TEST(Session, GreedyMatchesTheOracleAndContinuesAcrossCalls) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 64});
  std::unique_ptr<Session> one = engine->new_session();
  GenerateOptions opt;
  opt.max_new_tokens = 16;
  opt.stop_at_eos = false;
  std::vector<int32_t> streamed;
  const GenerateResult all = one->generate(kPrompt, opt, [&](int32_t id) {
    streamed.push_back(id);
    return true;
  });
  EXPECT_EQ(all.ids, kGreedy);
  EXPECT_EQ(streamed, kGreedy);
  EXPECT_EQ(all.stop, StopReason::kMaxTokens);
  EXPECT_EQ(one->position(), 24 + 16);

  std::unique_ptr<Session> two = engine->new_session();
  opt.max_new_tokens = 6;
  std::vector<int32_t> ids = two->generate(kPrompt, opt).ids;
  opt.max_new_tokens = 10;
  const std::vector<int32_t> rest = two->generate({}, opt).ids;
  ids.insert(ids.end(), rest.begin(), rest.end());
  EXPECT_EQ(ids, kGreedy);
  EXPECT_EQ(two->stats().decode_tokens, 15);  // 16 ids: the last one is still pending
  EXPECT_EQ(two->stats().prefill_tokens, 24);
}

TEST(Session, SyncRunsOnlyTheSuffixOfIdsThatExtendTheKeptOnes) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 64});
  std::unique_ptr<Session> s = engine->new_session();
  GenerateOptions opt;
  opt.max_new_tokens = 6;
  opt.stop_at_eos = false;
  EXPECT_EQ(s->sync(kPrompt), 0);
  s->forward(std::span(kPrompt).first(20));
  EXPECT_EQ(s->sync(kPrompt), 20);
  EXPECT_EQ(s->generate(std::span(kPrompt).subspan(20), opt).ids,
            std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 6));
  std::vector<int32_t> held = kPrompt;
  held.insert(held.end(), kGreedy.begin(), kGreedy.begin() + 6);
  EXPECT_EQ(s->ids(), held);  // the last generated id is pending, and counted
  EXPECT_EQ(s->position(), 30);
  EXPECT_EQ(s->stats().prefill_tokens, 24);

  // Extending past the pending id: the client's next prompt holds it and two more ids.
  std::vector<int32_t> next = kPrompt;
  next.insert(next.end(), kGreedy.begin(), kGreedy.begin() + 8);
  EXPECT_EQ(s->sync(next), 30);
  opt.max_new_tokens = 8;
  EXPECT_EQ(s->generate(std::span(next).subspan(30), opt).ids,
            std::vector<int32_t>(kGreedy.begin() + 8, kGreedy.end()));
  // An equal list continues from where the session is.
  EXPECT_EQ(s->sync(s->ids()), 40);
  // Anything else starts over.
  EXPECT_EQ(s->sync(std::vector<int32_t>{kPrompt[0], 7}), 0);
  EXPECT_EQ(s->position(), 0);
  EXPECT_TRUE(s->ids().empty());
}

TEST(Session, StopsAtStopIdsAndOnRequest) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 64});
  std::unique_ptr<Session> s = engine->new_session();
  GenerateOptions opt;
  opt.max_new_tokens = 16;
  opt.stop_ids = {kGreedy[3]};
  GenerateResult r = s->generate(kPrompt, opt);
  EXPECT_EQ(r.ids, std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 4));
  EXPECT_EQ(r.stop, StopReason::kStopId);
  s->reset();
  opt.stop_ids.clear();
  r = s->generate(kPrompt, opt, [](int32_t) { return false; });
  EXPECT_EQ(r.ids.size(), 1u);
  EXPECT_EQ(r.stop, StopReason::kCallback);
  EXPECT_THROW(s->forward(std::vector<int32_t>{512}), base::Error);
  EXPECT_EQ(s->position(), 25);  // a refused id runs nothing; the pending one stays
  EXPECT_EQ(s->ids().back(), kGreedy[0]);
}

TEST(Session, ForwardAllRowsIncludesOnlyTheNewIds) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 5});
  const int64_t vocab = engine->info().vocab_size;
  std::unique_ptr<Session> s = engine->new_session();
  const std::vector<float> rows = s->forward(kPrompt, true);
  ASSERT_EQ(rows.size(), kPrompt.size() * vocab);
  GenerateOptions opt;
  opt.max_new_tokens = 1;
  s->reset();
  s->generate(kPrompt, opt);  // leaves the generated id pending
  const std::vector<float> next = s->forward(std::vector<int32_t>{kGreedy[1]}, true);
  EXPECT_EQ(next.size(), static_cast<size_t>(vocab));
  EXPECT_EQ(s->position(), 26);
}

TEST(Session, CancelBetweenPrefillPassesKeepsWhatRan) {
  EngineOptions options{kModel, 5};
  options.prefill_group_tokens = 12;  // rounded down to 10: 24 prompt ids in passes of 10, 10, 4
  std::unique_ptr<Engine> engine = Engine::load(options);
  std::unique_ptr<Session> s = engine->new_session();
  GenerateOptions opt;
  opt.max_new_tokens = 16;
  opt.stop_at_eos = false;
  int polls = 0;
  opt.cancel = [&polls] { return ++polls == 2; };  // stop before the third pass
  GenerateResult r = s->generate(kPrompt, opt);
  EXPECT_EQ(r.stop, StopReason::kCancelled);
  EXPECT_TRUE(r.ids.empty());
  EXPECT_EQ(s->position(), 20);
  EXPECT_EQ(s->ids(), std::vector<int32_t>(kPrompt.begin(), kPrompt.begin() + 20));
  EXPECT_EQ(s->stats().prefill_tokens, 20);
  // The rest of the prompt continues from there exactly.
  opt.cancel = nullptr;
  r = s->generate(std::span(kPrompt).subspan(20), opt);
  EXPECT_EQ(r.ids, kGreedy);
}

TEST(Session, CancelBetweenLayersStopsMidPassAndResets) {
  EngineOptions options{kModel, 5};
  std::unique_ptr<Engine> engine = Engine::load(options);
  const int64_t n_layers = engine->info().n_layers;
  std::unique_ptr<Session> s = engine->new_session();
  GenerateOptions opt;
  opt.max_new_tokens = 16;
  opt.stop_at_eos = false;
  opt.cancel_between_layers = true;
  // Polled but never true: the same ids bit for bit, and polled between layers (more than once
  // per pass).
  int polls = 0;
  opt.cancel = [&polls] {
    ++polls;
    return false;
  };
  GenerateResult r = s->generate(kPrompt, opt);
  EXPECT_EQ(r.ids, kGreedy);
  EXPECT_GE(polls, n_layers - 1);
  // True at the second layer of the first pass: nothing generated, and the part-run session is
  // reset; it runs the prompt again exactly.
  s->reset();
  polls = 0;
  opt.cancel = [&polls] { return ++polls == 2; };
  r = s->generate(kPrompt, opt);
  EXPECT_EQ(r.stop, StopReason::kCancelled);
  EXPECT_TRUE(r.ids.empty());
  EXPECT_EQ(polls, 2);
  EXPECT_EQ(s->position(), 0);
  opt.cancel = nullptr;
  r = s->generate(kPrompt, opt);
  EXPECT_EQ(r.ids, kGreedy);
}

}  // namespace
}  // namespace deltafin
