// The engine with streamed experts and spine on k3-tiny-a: the plan it reports, the oracle's
// greedy ids and bit-identical logits against the mapped engine, counters that add up, and a
// route trace.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/thread_pool.h"
#include "deltafin/engine.h"
#include "testing/k3_tiny_a.h"

namespace deltafin {
namespace {

const std::string& kModel = ::deltafin::testing::kK3TinyADir;
const std::vector<int32_t>& kPrompt = ::deltafin::testing::kK3TinyAPrompt;
const std::vector<int32_t>& kGreedy = ::deltafin::testing::kK3TinyAGreedy;

TEST(Streaming, DefaultMapsAModelThatFits) {
  std::unique_ptr<Engine> engine = Engine::load({kModel, 64});
  EXPECT_FALSE(engine->memory_plan().streaming);
  EXPECT_EQ(engine->memory_plan().streamed_layers, 0);
  EXPECT_NE(engine->memory_plan().summary.find("experts mapped"), std::string::npos);
  EXPECT_TRUE(engine->memory_plan().warming);
}

// The warm-up is a prefetch: --no-prefetch is the plain mmap path, and streamed experts have no
// mapping to warm.
TEST(Streaming, OnlyAMappedModelWithPrefetchIsWarmed) {
  EngineOptions plain{kModel, 64};
  plain.prefetch = false;
  EXPECT_FALSE(Engine::load(plain)->memory_plan().warming);
  EngineOptions streamed{kModel, 64};
  streamed.experts = ExpertMode::kStream;
  EXPECT_FALSE(Engine::load(streamed)->memory_plan().warming);
}

// A mapped model's faults are not waits, so auto keeps every thread; a fixed count holds for any
// model, and the stats report what the last pass ran on.
TEST(Streaming, LayerThreadsAreReported) {
  const int pool = base::default_pool().size();
  GenerateOptions g;
  g.max_new_tokens = 4;
  g.stop_at_eos = false;
  std::unique_ptr<Engine> mapped = Engine::load({kModel, 64});
  EXPECT_EQ(mapped->stream_stats().layer_threads, 0);  // no pass yet
  mapped->new_session()->generate(kPrompt, g);
  EXPECT_EQ(mapped->stream_stats().layer_threads, pool);
  for (ExpertMode experts : {ExpertMode::kMapped, ExpertMode::kStream}) {
    EngineOptions one{kModel, 64};
    one.experts = experts;
    one.layer_threads = 1;
    std::unique_ptr<Engine> engine = Engine::load(one);
    EXPECT_EQ(engine->new_session()->generate(kPrompt, g).ids,
              std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 4));
    EXPECT_EQ(engine->stream_stats().layer_threads, 1);
  }
}

TEST(Streaming, StreamedEngineMatchesTheMappedOneBitForBit) {
  std::unique_ptr<Engine> mapped = Engine::load({kModel, 5});
  const std::vector<float> want = mapped->new_session()->forward(kPrompt, true);

  const std::string trace = std::string(DELTAFIN_BINARY_DIR) + "/streaming_test_trace.jsonl";
  EngineOptions o{kModel, 5};
  o.experts = ExpertMode::kStream;
  o.spine = SpineMode::kStream;
  o.expert_slots = 6;
  o.trace_routes = trace;
  std::unique_ptr<Engine> engine = Engine::load(o);
  const MemoryPlanInfo plan = engine->memory_plan();
  EXPECT_TRUE(plan.streaming);
  EXPECT_FALSE(plan.lookahead);  // the spine streams
  EXPECT_EQ(plan.streamed_layers, engine->info().n_layers);
  EXPECT_EQ(plan.expert_slots, 6);

  const std::vector<float> got = engine->new_session()->forward(kPrompt, true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);

  std::unique_ptr<Session> s = engine->new_session();
  GenerateOptions g;
  g.max_new_tokens = 16;
  g.stop_at_eos = false;
  EXPECT_EQ(s->generate(kPrompt, g).ids, kGreedy);

  const StreamStats st = engine->stream_stats();
  EXPECT_GT(st.experts_requested, 0u);
  EXPECT_EQ(st.experts_requested, st.cache_hits + st.prefetch_hits + st.demand_reads);
  EXPECT_GT(st.spine_bytes_read, 0u);
  EXPECT_GT(st.expert_bytes_read, 0u);
  EXPECT_GE(st.needed_bytes, st.spine_bytes_read);
  engine.reset();  // closes the trace

  std::ifstream in(trace);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.rfind("{\"position\":", 0), 0u) << line;
    ++lines;
  }
  EXPECT_GT(lines, 0);
  std::remove(trace.c_str());
}

TEST(Streaming, ExpertsStreamedWithTheSpineResidentUseTheLookahead) {
  EngineOptions o{kModel, 64};
  o.experts = ExpertMode::kStream;
  std::unique_ptr<Engine> engine = Engine::load(o);
  EXPECT_TRUE(engine->memory_plan().lookahead);
  EXPECT_EQ(engine->memory_plan().streamed_layers, 0);
  std::unique_ptr<Session> s = engine->new_session();
  GenerateOptions g;
  g.max_new_tokens = 16;
  g.stop_at_eos = false;
  EXPECT_EQ(s->generate(kPrompt, g).ids, kGreedy);
  const StreamStats st = engine->stream_stats();
  EXPECT_GT(st.predicted_actual, 0u);
  EXPECT_LE(st.predicted_matched, st.predicted_actual);
  EXPECT_EQ(st.spine_bytes_read, 0u);
}

TEST(Streaming, RefusesABudgetItCannotKeep) {
  EngineOptions o{kModel, 64};
  o.experts = ExpertMode::kStream;
  o.memory_budget = "1M";
  EXPECT_THROW(Engine::load(o), std::runtime_error);
}

}  // namespace
}  // namespace deltafin
