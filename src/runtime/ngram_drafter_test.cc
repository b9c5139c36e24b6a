// Prompt lookup: exact proposals on crafted histories, incremental index == rebuilt index, reset
// detection, confidence learning, and a work bound on a 64k-id history.
#include "runtime/ngram_drafter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

namespace deltafin::runtime {
namespace {

using Ids = std::vector<int32_t>;

Ids propose(NgramDrafter& d, const Ids& history, int max_tokens = 8) {
  return d.propose(history, max_tokens).ids;
}

TEST(NgramDrafter, ProposesWhatFollowedTheEarlierOccurrence) {
  NgramDrafter d({.n_min = 2, .n_max = 4});
  // Last 3 ids "1 2 3" occurred ending at position 3; what followed runs to the end of history.
  EXPECT_EQ(propose(d, {5, 1, 2, 3, 7, 8, 1, 2, 3}), (Ids{7, 8, 1, 2, 3}));
  EXPECT_EQ(d.last_match_n(), 3);
  NgramDrafter capped({.n_min = 2, .n_max = 4});
  EXPECT_EQ(propose(capped, {5, 1, 2, 3, 7, 8, 1, 2, 3}, 2), (Ids{7, 8}));
}

TEST(NgramDrafter, ContinuesARepeatOnlyWhenAsked) {
  const Ids loop = {9, 1, 2, 3, 1, 2, 3};
  const Ids run = {5, 7, 7, 7};
  NgramDrafter stop({.n_min = 2, .n_max = 4});
  EXPECT_EQ(propose(stop, loop, 7), (Ids{1, 2, 3}));
  NgramDrafter stop_run({.n_min = 2, .n_max = 4});
  EXPECT_EQ(propose(stop_run, run, 7), (Ids{7}));
  NgramDrafter cont({.n_min = 2, .n_max = 4, .continue_repeats = true});
  EXPECT_EQ(propose(cont, loop, 7), (Ids{1, 2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(cont.last_match_n(), 3);
  NgramDrafter cont_run({.n_min = 2, .n_max = 4, .continue_repeats = true});
  const Draft draft = cont_run.propose(run, 5);
  EXPECT_EQ(draft.ids, (Ids{7, 7, 7, 7, 7}));
  EXPECT_EQ(draft.confidence.size(), 5u);
  // A match far enough back is not affected.
  NgramDrafter cont_far({.n_min = 2, .n_max = 4, .continue_repeats = true});
  EXPECT_EQ(propose(cont_far, {5, 1, 2, 3, 7, 8, 1, 2, 3}, 3), (Ids{7, 8, 1}));
}

TEST(NgramDrafter, PrefersTheMostRecentOccurrence) {
  NgramDrafter d({.n_min = 2, .n_max = 4});
  EXPECT_EQ(propose(d, {1, 2, 5, 1, 2, 6, 1, 2}), (Ids{6, 1, 2}));
}

TEST(NgramDrafter, PrefersTheLongestMatchOverTheMostRecent) {
  NgramDrafter d({.n_min = 2, .n_max = 4});
  // "3 1 2" matches at position 2 (n = 3); the more recent "1 2" at position 6 is only n = 2.
  EXPECT_EQ(propose(d, {3, 1, 2, 7, 4, 1, 2, 8, 3, 1, 2}, 3), (Ids{7, 4, 1}));
  EXPECT_EQ(d.last_match_n(), 3);
}

TEST(NgramDrafter, RespectsNMinAndEdgeCases) {
  const Ids only_last_repeats = {4, 9, 5, 6, 9};
  NgramDrafter two({.n_min = 2, .n_max = 4});
  EXPECT_TRUE(propose(two, only_last_repeats).empty());
  EXPECT_EQ(two.last_match_n(), 0);
  NgramDrafter one({.n_min = 1, .n_max = 4});
  EXPECT_EQ(propose(one, only_last_repeats), (Ids{5, 6, 9}));
  EXPECT_EQ(one.last_match_n(), 1);

  NgramDrafter d;
  EXPECT_TRUE(propose(d, {}).empty());
  EXPECT_TRUE(propose(d, {7}).empty());
  EXPECT_TRUE(propose(d, {1, 2, 1, 2}, 0).empty());
  EXPECT_TRUE(propose(d, {1, 2, 3, 4, 5, 6}).empty());  // nothing repeats
}

TEST(NgramDrafter, ConfidenceGrowsWithMatchLengthAndFollowsAcceptance) {
  NgramDrafter d({.n_min = 1, .n_max = 4});
  EXPECT_LT(d.acceptance(1), d.acceptance(2));
  EXPECT_LT(d.acceptance(2), d.acceptance(4));
  const Draft draft = d.propose(Ids{5, 1, 2, 3, 7, 8, 1, 2, 3}, 4);
  ASSERT_EQ(draft.confidence.size(), draft.ids.size());
  const float before = d.acceptance(3);
  for (float c : draft.confidence) EXPECT_FLOAT_EQ(c, before);
  for (int i = 0; i < 5; ++i) d.observe(4, 0);
  const float after_misses = d.acceptance(3);
  EXPECT_LT(after_misses, before / 2);
  EXPECT_GE(after_misses, 0.0f);
  for (int i = 0; i < 20; ++i) d.observe(4, 4);
  EXPECT_GT(d.acceptance(3), 0.9f);
  EXPECT_LE(d.acceptance(3), 1.0f);
  // Other match lengths keep their own estimate.
  EXPECT_FLOAT_EQ(d.acceptance(2), NgramDrafter().acceptance(2));
}

Ids random_history(size_t len, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  Ids ids(len);
  for (auto& id : ids) id = pick(rng);
  // Paste earlier spans later so that long matches exist, as in quoted or repeated text.
  for (size_t at = 64; at + 16 < len; at += 97) {
    const size_t from = rng() % (at - 16);
    std::copy(ids.begin() + from, ids.begin() + from + 12, ids.begin() + at);
  }
  return ids;
}

TEST(NgramDrafter, IncrementalIndexEqualsRebuiltIndex) {
  const Ids ids = random_history(900, 40, 7);
  NgramDrafter incremental({.n_min = 1, .n_max = 5});
  size_t len = 1;
  int matched = 0;
  for (int step = 0; len <= ids.size(); ++step) {
    const std::span<const int32_t> history(ids.data(), len);
    const Draft a = incremental.propose(history, 6);
    NgramDrafter fresh({.n_min = 1, .n_max = 5});
    const Draft b = fresh.propose(history, 6);
    ASSERT_EQ(a.ids, b.ids) << "at length " << len;
    ASSERT_EQ(incremental.last_match_n(), fresh.last_match_n()) << "at length " << len;
    matched += a.ids.empty() ? 0 : 1;
    len += 1 + step % 4;  // the history grows by accepted + 1 ids per step
  }
  EXPECT_GT(matched, 50);
  EXPECT_EQ(incremental.work().rebuilds, 0u);
  EXPECT_LE(incremental.work().indexed_positions, ids.size());
}

TEST(NgramDrafter, DetectsAResetAndRebuilds) {
  NgramDrafter d;
  const Ids first = {1, 2, 3, 4, 1, 2, 3};
  EXPECT_EQ(propose(d, first), (Ids{4, 1, 2, 3}));
  // A new request: shorter, then different at the head, then different only in the tail.
  const Ids shorter = {9, 8, 9};
  EXPECT_TRUE(propose(d, shorter).empty());
  EXPECT_EQ(d.work().rebuilds, 1u);
  const Ids other = {7, 7, 5, 6, 7, 7};
  EXPECT_EQ(propose(d, other), (Ids{5, 6, 7, 7}));
  EXPECT_EQ(d.work().rebuilds, 2u);
  Ids tail_changed = other;
  tail_changed.back() = 5;
  tail_changed.insert(tail_changed.end(), {6, 7});
  NgramDrafter fresh;
  EXPECT_EQ(propose(d, tail_changed), propose(fresh, tail_changed));
  EXPECT_EQ(d.work().rebuilds, 3u);
  d.reset();
  EXPECT_EQ(propose(d, first), (Ids{4, 1, 2, 3}));
}

TEST(NgramDrafter, LongHistoryCostsConstantWorkPerStep) {
  constexpr size_t kLen = 64 * 1024;
  const Ids ids = random_history(kLen, 2000, 11);
  NgramDrafter d({.n_min = 2, .n_max = 4});
  const auto start = std::chrono::steady_clock::now();
  size_t proposals = 0;
  for (size_t len = 1; len <= kLen; ++len) {
    proposals += d.propose(std::span<const int32_t>(ids.data(), len), 7).ids.empty() ? 0 : 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Each position is indexed once and each step probes at most one table per n: O(1) per step.
  EXPECT_EQ(d.work().indexed_positions, kLen - 1);
  EXPECT_LE(d.work().lookups, kLen * 3);
  EXPECT_EQ(d.work().rebuilds, 0u);
  EXPECT_GT(proposals, 1000u);
  // Well under a second in a release build; the bound only catches a quadratic index (minutes).
  EXPECT_LT(seconds, 20.0);
}

}  // namespace
}  // namespace deltafin::runtime
