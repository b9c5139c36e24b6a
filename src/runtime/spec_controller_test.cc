// The speculation controller on simulated runs: a target whose pass cost and acceptance follow a
// script, so each test is a deterministic trace of decisions (widening, back-off, probes, costs).
#include "runtime/spec_controller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "runtime/ngram_drafter.h"

namespace deltafin::runtime {
namespace {

// accepted ids of a verify pass of k drafted ids, given how many verify passes came before.
using AcceptFn = std::function<int(int verify_index, int k)>;
using CostFn = std::function<double(int rows)>;

double streamed_cost(int rows) { return 2.7 * (1.0 + 0.22 * (rows - 1)); }

struct SimRun {
  double seconds = 0.0;
  long tokens = 0;
  std::vector<int> widths;  // per step
  int verifies = 0;
  // Time relative to speculation off producing the same tokens, minus 1.
  double overhead(const CostFn& cost) const { return seconds / (tokens * cost(1)) - 1.0; }
};

// Runs the step protocol until n_tokens are produced. The drafter proposes as many ids as asked.
SimRun simulate(SpecController& c, long n_tokens, const AcceptFn& accept,
                const CostFn& cost = streamed_cost, std::vector<float> confidence = {}) {
  SimRun run;
  while (run.tokens < n_tokens) {
    const int budget = c.draft_budget();
    int k = 0;
    if (budget > 0) {
      Draft draft;
      draft.ids.assign(budget, 42);
      if (!confidence.empty()) draft.confidence.assign(budget, confidence[0]);
      k = c.choose_width(draft);
    }
    const double seconds = cost(k + 1);
    // The bytes of a streamed spine with cached experts: the same whatever the width, so that the
    // timings alone decide (the bytes' floor has its own test).
    c.record_pass(k + 1, seconds, 1000u);
    int accepted = 0;
    if (k > 0) {
      accepted = std::clamp(accept(run.verifies++, k), 0, k);
      c.record_acceptance(k, accepted);
    }
    run.tokens += 1 + accepted;
    run.seconds += seconds;
    run.widths.push_back(k);
  }
  return run;
}

TEST(SpecController, FullAcceptanceProbesNarrowThenWidensToDraftMax) {
  SpecController c;
  const SimRun run = simulate(c, 300, [](int, int k) { return k; });
  ASSERT_GT(run.widths.size(), 10u);
  EXPECT_EQ(run.widths[0], 0);  // measures the 1-row pass first
  EXPECT_EQ(c.steps()[0].reason, SpecReason::kMeasure);
  EXPECT_GE(run.widths[1], 1);
  EXPECT_LE(run.widths[1], 2);
  const auto first_max = std::find(run.widths.begin(), run.widths.end(), 7);
  ASSERT_NE(first_max, run.widths.end());
  EXPECT_LE(first_max - run.widths.begin(), 7);
  EXPECT_TRUE(std::all_of(first_max, run.widths.end(), [](int w) { return w == 7; }));
  EXPECT_TRUE(std::is_sorted(run.widths.begin(), first_max));
  EXPECT_GT(c.totals().tokens_per_pass(), 7.0);
  EXPECT_LT(run.overhead(streamed_cost), -0.6);  // more than 2.5x faster than plain decoding
}

TEST(SpecController, DraftMaxBoundsTheWidth) {
  SpecController c({.draft_max = 3});
  const SimRun run = simulate(c, 200, [](int, int k) { return k; });
  EXPECT_EQ(*std::max_element(run.widths.begin(), run.widths.end()), 3);
  EXPECT_EQ(run.widths.back(), 3);
}

TEST(SpecController, FailingDraftsCostLessThanThreePercent) {
  // Drafts that never hold, on the prior cost model, on a learned model where an extra row costs
  // more than the prior assumes, and on one where it costs less: the probes that find out, and
  // those that keep checking, must stay under 3% of plain decoding at every run length.
  const std::vector<CostFn> costs = {
      streamed_cost,
      [](int rows) { return 1.0 + 0.4 * (rows - 1); },
      [](int rows) { return 0.05 * (1.0 + 0.1 * (rows - 1)); },
  };
  for (size_t ci = 0; ci < costs.size(); ++ci) {
    for (long n : {128L, 256L, 1024L, 8192L}) {
      SpecController c;
      const SimRun run = simulate(
          c, n, [](int, int) { return 0; }, costs[ci]);
      EXPECT_LT(run.overhead(costs[ci]), 0.03) << "cost model " << ci << ", " << n << " tokens";
      EXPECT_GT(run.verifies, 0) << "it must keep probing";
      EXPECT_LT(run.verifies, 12 + n / 64) << "cost model " << ci << ", " << n << " tokens";
    }
  }
  SpecController c;
  simulate(c, 4096, [](int, int) { return 0; });
  EXPECT_EQ(c.backoff_level(), 6);
  int probes = 0;
  for (const SpecStep& s : c.steps()) {
    EXPECT_LE(s.width, 2);
    probes += s.reason == SpecReason::kProbe ? 1 : 0;
    if (s.reason == SpecReason::kProbe) {
      EXPECT_EQ(s.width, 1);
    }
  }
  EXPECT_GT(probes, 4096 / 64 - 8);
}

// A machine whose pass times drift by +-30% from pass to pass (the device host's disk gave 1.8 to
// 3.1 GB/s within minutes), with bytes per pass that do not drift.
struct DriftingMachine {
  const char* name;
  double row_cost;       // true extra cost per verified row, relative to a 1-row pass
  double row_bytes;      // extra bytes per row, relative to a 1-row pass's bytes
  double one_row_bytes;  // 0 = nothing read (compute-bound, spine in RAM)
  double drift;          // each pass's time is multiplied by a uniform draw in [1-drift, 1+drift]
};

TEST(SpecController, DriftingPassTimesKeepFailingDraftsUnderThreePercent) {
  // One slow 1-row pass measured early can make every later 2-row pass look cheaper than plain
  // decoding. The controller must not believe it: failing drafts still have to stop, and a pick
  // made on such costs must not restart the back-off from its shortest wait.
  const DriftingMachine machines[] = {
      // Spine and experts streamed: a second row reads its own experts (the 9 GiB cgroup).
      {"streamed experts", 0.13, 0.13, 1000.0, 0.3},
      // Spine streamed, experts cached: an extra row costs almost nothing, reads nothing more.
      {"cached experts", 0.02, 0.0, 1000.0, 0.3},
      // Everything in RAM: an extra row is compute only, and CPU timings drift far less.
      {"compute-bound", 0.3, 0.0, 0.0, 0.05},
  };
  for (const DriftingMachine& m : machines) {
    for (unsigned seed = 1; seed <= 40; ++seed) {
      std::mt19937 rng(seed);
      std::uniform_real_distribution<double> drift(1.0 - m.drift, 1.0 + m.drift);
      for (long n : {64L, 256L}) {
        SpecController c;
        double true_seconds = 0.0;
        long tokens = 0;
        int verifies = 0;
        while (tokens < n) {
          const int budget = c.draft_budget();
          int k = 0;
          if (budget > 0) {
            Draft draft;
            draft.ids.assign(budget, 42);
            k = c.choose_width(draft);
          }
          const double cost = 1.0 + m.row_cost * k;
          const double bytes = m.one_row_bytes * (1.0 + m.row_bytes * k);
          c.record_pass(k + 1, 2.0 * cost * drift(rng), static_cast<uint64_t>(bytes));
          if (k > 0) {
            c.record_acceptance(k, 0);
            ++verifies;
          }
          true_seconds += cost;
          ++tokens;
        }
        const double overhead = true_seconds / static_cast<double>(tokens) - 1.0;
        EXPECT_LT(overhead, 0.03) << m.name << ", seed " << seed << ", " << n << " tokens";
        EXPECT_GT(verifies, 0) << m.name << ": it must keep probing";
      }
    }
  }
}

TEST(SpecController, RecoversWhenDraftsStartToHold) {
  SpecController c;
  // 2000 tokens of failing drafts (deep back-off), then drafts that always hold.
  simulate(c, 2000, [](int, int) { return 0; });
  ASSERT_EQ(c.backoff_level(), 6);
  const SimRun run = simulate(c, 600, [](int, int k) { return k; });
  const auto first_max = std::find(run.widths.begin(), run.widths.end(), 7);
  ASSERT_NE(first_max, run.widths.end());
  // At most one full back-off (63 steps) before the probe, then a few steps to widen.
  EXPECT_LE(first_max - run.widths.begin(), 64 + 8);
  EXPECT_EQ(c.backoff_level(), 0);
  EXPECT_EQ(run.widths.back(), 7);
}

TEST(SpecController, ShortRequestsOnFailingTextPayOneProbeEach) {
  SpecController c;
  double seconds = 0.0;
  long tokens = 0;
  int verifies = 0;
  constexpr int kRequests = 100;
  for (int r = 0; r < kRequests; ++r) {
    c.begin_request();
    const SimRun run = simulate(c, 16, [](int, int) { return 0; });
    seconds += run.seconds;
    tokens += run.tokens;
    verifies += run.verifies;
  }
  EXPECT_LT(seconds / (tokens * streamed_cost(1)) - 1.0, 0.03);
  EXPECT_LE(verifies, kRequests + 10);

  // The next request's text lets drafts hold: the opening probe finds it.
  c.begin_request();
  const SimRun run = simulate(c, 100, [](int, int k) { return k; });
  EXPECT_EQ(c.steps()[0].reason, SpecReason::kProbe);
  EXPECT_EQ(run.widths.back(), 7);
}

TEST(SpecController, AlternatingAcceptanceStillPays) {
  // Every other verify holds entirely, the rest fail at once. Per position that is a = 1/2 at the
  // narrowest width, where the controller settles (1.5 tokens per 1.22-cost pass): the per-position
  // model cannot see that the passes which hold would hold at any width.
  SpecController c;
  const SimRun run = simulate(c, 2000, [](int i, int k) { return i % 2 == 0 ? k : 0; });
  EXPECT_LT(run.overhead(streamed_cost), -0.15);  // faster than plain decoding
  const long drafting =
      std::count_if(run.widths.begin(), run.widths.end(), [](int w) { return w; });
  EXPECT_GT(drafting, static_cast<long>(run.widths.size()) / 2);
}

TEST(SpecController, PartialAcceptanceSettlesOnAMiddleWidth) {
  // The first two drafted ids always hold, the third never does: a = 2/3 per position.
  SpecController c;
  const SimRun run = simulate(c, 2000, [](int, int k) { return std::min(k, 2); });
  std::vector<int> tail(run.widths.end() - 50, run.widths.end());
  for (int w : tail) {
    EXPECT_GE(w, 2);
    EXPECT_LE(w, 4);
  }
  EXPECT_GT(c.acceptance(), 0.6);
  EXPECT_LT(c.acceptance(), 0.8);
  EXPECT_LT(run.overhead(streamed_cost), -0.3);
}

TEST(SpecController, LearnsThatWideVerifyDoesNotPayOnAComputeBoundMachine) {
  // Each extra row costs 1.5 rows: even full acceptance loses. The controller must measure that
  // (the prior says 0.22) and settle on plain decoding with sparse probes.
  const CostFn compute_bound = [](int rows) { return 1.0 + 1.5 * (rows - 1); };
  SpecController c;
  const SimRun run = simulate(
      c, 4096, [](int, int k) { return k; }, compute_bound);
  EXPECT_LT(run.overhead(compute_bound), 0.03);
  // 16 samples of the 2-row width outweigh the prior slope's pull (worth 2 passes).
  EXPECT_NEAR(c.pass_cost(2), 2.5, 0.05);
  const long drafting =
      std::count_if(run.widths.begin(), run.widths.end(), [](int w) { return w; });
  EXPECT_LT(drafting, 4096 / 32);
}

TEST(SpecController, CostModelUsesThePriorUntilMeasured) {
  SpecController c;
  EXPECT_DOUBLE_EQ(c.pass_cost(1), 1.0);
  EXPECT_DOUBLE_EQ(c.pass_cost(5), 1.0 + 4 * SpecController::kPriorRowCost);
  c.record_pass(1, 2.0, 100);
  EXPECT_DOUBLE_EQ(c.pass_cost(1), 2.0);
  EXPECT_DOUBLE_EQ(c.pass_cost(3), 2.0 * (1.0 + 2 * SpecController::kPriorRowCost));
  // One 3-row pass at 2x a 1-row pass (slope 0.5 per row) pulls the slope from the prior's 0.22
  // by a third (the prior counts as two passes): 0.3133 per row.
  c.record_pass(3, 4.0, 100);
  const double slope = (2 * SpecController::kPriorRowCost + 0.5) / 3;
  const double model3 = 1.0 + 2 * slope;
  // The 3-row width's own mean weighs one pass against the model's two.
  EXPECT_NEAR(c.pass_cost(3), 2.0 * (2.0 + 2 * model3) / 3, 1e-12);
  EXPECT_NEAR(c.pass_cost(5), 2.0 * (1.0 + 4 * slope), 1e-12);
  EXPECT_DOUBLE_EQ(c.pass_bytes(3), 100.0);
  // More passes at 2x: the width's mean takes over.
  for (int i = 0; i < 40; ++i) c.record_pass(3, 4.0, 100);
  EXPECT_NEAR(c.pass_cost(3), 4.0, 0.3);
  // The mean follows new measurements.
  for (int i = 0; i < 40; ++i) c.record_pass(1, 3.0, 100);
  EXPECT_NEAR(c.pass_cost(1), 3.0, 0.05);
}

TEST(SpecController, ARowIsNeverFreeAndNeverCheaperThanItsBytes) {
  SpecController c;
  // A 2-row pass timed faster than the 1-row pass (the disk sped up in between) still costs at
  // least 1% more per extra row.
  c.record_pass(1, 2.0, 0);
  for (int i = 0; i < 16; ++i) c.record_pass(2, 1.5, 0);
  EXPECT_NEAR(c.pass_cost(2), 2.0 * 1.01, 1e-12);
  EXPECT_NEAR(c.pass_cost(4), 2.0 * 1.03, 1e-12);
  // Where the wider pass reads more, it costs at least its bytes' ratio, whatever its timing.
  SpecController io;
  io.record_pass(1, 2.0, 1000);
  for (int i = 0; i < 16; ++i) io.record_pass(2, 1.8, 1300);
  EXPECT_NEAR(io.pass_cost(2), 2.0 * 1.3, 1e-12);
}

TEST(SpecController, LowConfidenceNarrowsTheWidth) {
  SpecController sure;
  SpecController unsure;
  simulate(sure, 200, [](int, int k) { return k; });
  simulate(unsure, 200, [](int, int k) { return k; }, streamed_cost, {0.1f});
  EXPECT_EQ(sure.steps().back().width, 7);
  EXPECT_LT(unsure.totals().drafted, sure.totals().drafted / 4);
}

TEST(SpecController, DraftMinForcesEveryStepAndOffNeverDrafts) {
  SpecController forced({.draft_min = 1});
  simulate(forced, 500, [](int, int) { return 0; });
  for (const SpecStep& s : forced.steps()) EXPECT_GE(s.width, 1);

  SpecController off({.mode = SpecMode::kOff});
  simulate(off, 100, [](int, int k) { return k; });
  EXPECT_EQ(off.totals().drafted, 0u);
  EXPECT_EQ(off.steps().size(), 100u);
  EXPECT_EQ(off.steps()[0].reason, SpecReason::kOff);

  SpecController always({.mode = SpecMode::kAlways, .draft_max = 5});
  simulate(always, 100, [](int, int) { return 0; });
  for (const SpecStep& s : always.steps()) EXPECT_EQ(s.width, 5);
}

TEST(SpecController, EmptyDraftsDoNotCountAsFailures) {
  SpecController c;
  for (int i = 0; i < 50; ++i) {
    ASSERT_GT(c.draft_budget(), 0);
    EXPECT_EQ(c.choose_width(Draft{}), 0);
    c.record_pass(1, 1.0, 10);
  }
  EXPECT_EQ(c.backoff_level(), 0);
  EXPECT_EQ(c.steps().back().reason, SpecReason::kNoDraft);
}

TEST(SpecController, DecisionsAreDeterministicAndRecorded) {
  const AcceptFn pattern = [](int i, int k) { return (i * 7) % 5 < 2 ? k : (i % 3) % (k + 1); };
  SpecController a;
  SpecController b;
  simulate(a, 1500, pattern);
  simulate(b, 1500, pattern);
  ASSERT_EQ(a.steps().size(), b.steps().size());
  uint64_t drafted = 0;
  uint64_t accepted = 0;
  for (size_t i = 0; i < a.steps().size(); ++i) {
    EXPECT_EQ(a.steps()[i].width, b.steps()[i].width);
    EXPECT_EQ(a.steps()[i].reason, b.steps()[i].reason);
    drafted += a.steps()[i].width;
    accepted += std::max<int>(0, a.steps()[i].accepted);
  }
  const SpecTotals& t = a.totals();
  EXPECT_EQ(t.drafted, drafted);
  EXPECT_EQ(t.accepted, accepted);
  EXPECT_EQ(t.passes, a.steps().size());
  EXPECT_EQ(t.tokens, t.passes + t.accepted);
  EXPECT_GE(t.tokens, 1500u);
  EXPECT_STREQ(spec_reason_name(SpecReason::kNotWorth), "not_worth");

  a.begin_request();
  EXPECT_TRUE(a.steps().empty());
  EXPECT_EQ(a.totals().passes, 0u);
  EXPECT_GT(a.pass_cost(2), 0.0);  // the costs survive a new request
}

// The n-gram drafter and the controller together against a target whose greedy output is known:
// a draft is accepted up to its first id that differs from that output.
struct TextRun {
  double overhead = 0.0;  // against plain decoding of the same tokens
  double tokens_per_pass = 0.0;
};

TextRun run_text(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                 NgramOptions options = {}) {
  NgramDrafter drafter(options);
  SpecController c;
  std::vector<int32_t> history = prompt;
  history.push_back(output[0]);
  size_t produced = 1;  // output[0] came from the prefill
  double seconds = 0.0;
  while (produced < output.size()) {
    int k = 0;
    const int budget = c.draft_budget();
    Draft draft;
    if (budget > 0) {
      draft = drafter.propose(history, budget);
      k = c.choose_width(draft);
    }
    seconds += streamed_cost(k + 1);
    c.record_pass(k + 1, streamed_cost(k + 1), 0);
    int accepted = 0;
    while (accepted < k && produced + accepted < output.size() &&
           draft.ids[accepted] == output[produced + accepted]) {
      ++accepted;
    }
    if (k > 0) {
      c.record_acceptance(k, accepted);
      drafter.observe(k, accepted);
    }
    const size_t take = std::min<size_t>(accepted + 1, output.size() - produced);
    history.insert(history.end(), output.begin() + produced, output.begin() + produced + take);
    produced += take;
  }
  return {seconds / ((output.size() - 1) * streamed_cost(1)) - 1.0, c.totals().tokens_per_pass()};
}

std::vector<int32_t> random_ids(size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

TEST(SpecControllerWithNgram, RepeatingOutputSpeculatesWide) {
  const std::vector<int32_t> prompt = random_ids(300, 50000, 1);
  // The model loops over a 23-id passage of the prompt, as greedy output often does.
  std::vector<int32_t> output;
  for (int i = 0; i < 600; ++i) output.push_back(prompt[100 + i % 23]);
  const TextRun run = run_text(prompt, output);
  EXPECT_GT(run.tokens_per_pass, 5.0);
  EXPECT_LT(run.overhead, -0.55);
}

TEST(SpecControllerWithNgram, AShortLoopNeedsContinuedRepeats) {
  const std::vector<int32_t> prompt = random_ids(300, 50000, 4);
  std::vector<int32_t> output;
  for (int i = 0; i < 600; ++i) output.push_back(prompt[50 + i % 3]);
  // Stopping at the end of the history caps a draft at the loop's 3 ids.
  const TextRun stop = run_text(prompt, output);
  EXPECT_LE(stop.tokens_per_pass, 4.0);
  const TextRun cont = run_text(prompt, output, {.continue_repeats = true});
  EXPECT_GT(cont.tokens_per_pass, 7.0);
}

TEST(SpecControllerWithNgram, FailingDraftsOnRealTextShapesCostUnderThreePercent) {
  // Random ids over a small vocabulary: 2-gram matches everywhere, continuations that almost never
  // hold (the worst case for prompt lookup); over a large one: hardly any match at all.
  for (int vocab : {12, 40, 50000}) {
    for (size_t n : {200u, 1000u, 4000u}) {
      for (bool repeats : {false, true}) {
        const TextRun run = run_text(random_ids(200, vocab, 2), random_ids(n, vocab, 3),
                                     {.continue_repeats = repeats});
        EXPECT_LT(run.overhead, 0.03) << "vocab " << vocab << ", " << n << " tokens";
      }
    }
  }
}

}  // namespace
}  // namespace deltafin::runtime
