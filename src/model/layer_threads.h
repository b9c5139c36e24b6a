// How many of the thread pool's threads the layers of a forward pass run on. A disk read into
// memory slows while the CPU draws on memory bandwidth (docs/PERFORMANCE.md, "Fifth look"): when a
// token waits on its expert reads anyway, running the layers on half the threads takes less from
// the disk than it adds to compute. The lm_head runs with no read in
// flight and always gets every thread. The split never changes results: each kernel computes every
// output row the same way whatever the number of threads.
#pragma once

#include <cstdint>

#include "model/pass.h"

namespace deltafin::model {

class LayerThreads {
 public:
  // A decode pass that spent at least this share of its time waiting on reads is disk-bound: the
  // next one runs its layers on half the threads. At or below the lower share it is compute-bound
  // again and gets them all back. The gap keeps a pass near one edge from flipping every token.
  static constexpr double kReduceAtWaitShare = 0.25;
  static constexpr double kRestoreAtWaitShare = 0.10;
  // Where every thread waits on reads but half of them leave the compute as the bound (a fast
  // disk), the count would flip every token. A reduction undone within kSettledTokens decode
  // tokens is such a flip: every thread is kept for the next kFirstHoldTokens tokens, twice as
  // many after each further flip, up to kMaxHoldTokens. A reduction that lasted longer was right
  // for its time, and the hold starts over.
  static constexpr int kSettledTokens = 4;
  static constexpr int kFirstHoldTokens = 4;
  static constexpr int kMaxHoldTokens = 256;

  // fixed = 0: decide per pass from the waits (auto); fixed > 0: always that many (capped to the
  // pool).
  LayerThreads(int pool_threads, int fixed);

  // Threads for the layers of a pass. Prefill is compute-heavy and always gets every thread;
  // decode and verify passes (a few rows, bound by their reads alike) share the decision.
  int for_pass(PassKind kind) const;
  // After a pass: its wall time and the time its compute waited on reads.
  void observe(PassKind kind, double wall_seconds, double wait_seconds);

  // What auto runs a disk-bound token's layers on: half the pool, rounded up.
  int reduced_threads() const { return (pool_ + 1) / 2; }

 private:
  int pool_;
  int fixed_;
  bool reduced_ = false;
  int reduced_tokens_ = 0;  // decode/verify passes since the current reduction began
  int hold_ = 0;            // decode/verify passes left before a reduction is allowed again
  int next_hold_ = kFirstHoldTokens;
};

}  // namespace deltafin::model
