// Tests for LayerThreads: half the pool after a disk-bound decode pass, all of it back after a
// compute-bound one, backing off where that flips every token, every thread for prefill, and
// fixed counts.
#include "model/layer_threads.h"

#include <gtest/gtest.h>

namespace deltafin::model {
namespace {

TEST(LayerThreads, AutoHalvesAfterADiskBoundTokenAndRestoresAfterAComputeBoundOne) {
  LayerThreads t(16, 0);
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 16);  // nothing observed yet
  t.observe(PassKind::kDecode, 0.200, 0.080);    // 40% of the token waiting on reads
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 8);
  t.observe(PassKind::kDecode, 0.200, 0.030);  // 15%: inside the gap, no change
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 8);
  t.observe(PassKind::kDecode, 0.200, 0.010);  // 5%: compute-bound
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 16);
  t.observe(PassKind::kDecode, 0.200, 0.030);  // 15% again: still no change, from this side either
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 16);
}

TEST(LayerThreads, TheEdgesOfTheGapCount) {
  LayerThreads t(4, 0);
  t.observe(PassKind::kDecode, 1.0, LayerThreads::kReduceAtWaitShare);
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 2);
  t.observe(PassKind::kDecode, 1.0, LayerThreads::kRestoreAtWaitShare);
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 4);
}

TEST(LayerThreads, PrefillAlwaysGetsEveryThreadAndIsNotObserved) {
  LayerThreads t(6, 0);
  t.observe(PassKind::kDecode, 1.0, 0.9);
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 3);
  EXPECT_EQ(t.for_pass(PassKind::kPrefill), 6);
  t.observe(PassKind::kPrefill, 1.0, 0.0);  // a prefill pass says nothing about decode
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 3);
}

TEST(LayerThreads, OddPoolsRoundUpAndOneThreadStaysOne) {
  LayerThreads odd(5, 0);
  odd.observe(PassKind::kDecode, 1.0, 1.0);
  EXPECT_EQ(odd.for_pass(PassKind::kDecode), 3);
  LayerThreads one(1, 0);
  one.observe(PassKind::kDecode, 1.0, 1.0);
  EXPECT_EQ(one.for_pass(PassKind::kDecode), 1);
}

TEST(LayerThreads, AFixedCountIgnoresTheWaitsAndIsCappedToThePool) {
  LayerThreads fixed(8, 3);
  fixed.observe(PassKind::kDecode, 1.0, 0.9);
  EXPECT_EQ(fixed.for_pass(PassKind::kDecode), 3);
  EXPECT_EQ(fixed.for_pass(PassKind::kPrefill), 3);
  LayerThreads capped(8, 64);
  EXPECT_EQ(capped.for_pass(PassKind::kDecode), 8);
}

// Tokens at `share` until the count changes (at most `limit`); returns how many were observed.
int tokens_until_change(LayerThreads& t, double share, int limit) {
  const int before = t.for_pass(PassKind::kDecode);
  for (int i = 1; i <= limit; ++i) {
    t.observe(PassKind::kDecode, 1.0, share);
    if (t.for_pass(PassKind::kDecode) != before) return i;
  }
  return limit + 1;
}

TEST(LayerThreads, FlipsBackOffTwiceAsLongEachTime) {
  LayerThreads t(16, 0);
  EXPECT_EQ(tokens_until_change(t, 0.4, 10), 1);   // disk-bound: halve
  EXPECT_EQ(tokens_until_change(t, 0.05, 10), 1);  // at once compute-bound: a flip
  EXPECT_EQ(tokens_until_change(t, 0.4, 100), LayerThreads::kFirstHoldTokens + 1);
  EXPECT_EQ(tokens_until_change(t, 0.05, 10), 1);
  EXPECT_EQ(tokens_until_change(t, 0.4, 100), 2 * LayerThreads::kFirstHoldTokens + 1);
}

TEST(LayerThreads, AHostThatFlipsEveryTokenSpendsFewTokensHalved) {
  // Every thread: 40% waiting; half of them: 5% (the layers became the bound).
  LayerThreads t(16, 0);
  int halved = 0;
  for (int i = 0; i < 1000; ++i) {
    const bool reduced = t.for_pass(PassKind::kDecode) == 8;
    halved += reduced;
    t.observe(PassKind::kDecode, 1.0, reduced ? 0.05 : 0.4);
  }
  EXPECT_GE(halved, 3);   // it keeps trying
  EXPECT_LE(halved, 10);  // 4 + 8 + ... + 256 + 256 ... full tokens between tries
}

TEST(LayerThreads, AReductionThatLastedStartsTheHoldOver) {
  LayerThreads t(16, 0);
  EXPECT_EQ(tokens_until_change(t, 0.4, 10), 1);
  EXPECT_EQ(tokens_until_change(t, 0.05, 10), 1);  // a flip: the next hold doubles
  EXPECT_EQ(tokens_until_change(t, 0.4, 100), LayerThreads::kFirstHoldTokens + 1);
  EXPECT_EQ(tokens_until_change(t, 0.4, 2 * LayerThreads::kSettledTokens),
            2 * LayerThreads::kSettledTokens + 1);  // stays halved while disk-bound
  EXPECT_EQ(tokens_until_change(t, 0.05, 10), 1);   // a regime change, not a flip: no hold
  EXPECT_EQ(tokens_until_change(t, 0.4, 10), 1);
  EXPECT_EQ(tokens_until_change(t, 0.05, 10), 1);  // a flip again, with the first hold
  EXPECT_EQ(tokens_until_change(t, 0.4, 100), LayerThreads::kFirstHoldTokens + 1);
}

TEST(LayerThreads, AZeroLengthPassChangesNothing) {
  LayerThreads t(8, 0);
  t.observe(PassKind::kDecode, 0.0, 0.0);
  EXPECT_EQ(t.for_pass(PassKind::kDecode), 8);
}

}  // namespace
}  // namespace deltafin::model
