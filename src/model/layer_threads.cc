// LayerThreads: the disk-bound / compute-bound decision per decode pass.
#include "model/layer_threads.h"

#include <algorithm>

namespace deltafin::model {

LayerThreads::LayerThreads(int pool_threads, int fixed)
    : pool_(std::max(1, pool_threads)), fixed_(std::clamp(fixed, 0, pool_)) {}

int LayerThreads::for_pass(PassKind kind) const {
  if (fixed_ > 0) return fixed_;
  if (kind == PassKind::kPrefill || !reduced_) return pool_;
  return reduced_threads();
}

void LayerThreads::observe(PassKind kind, double wall_seconds, double wait_seconds) {
  if (fixed_ > 0 || kind == PassKind::kPrefill || wall_seconds <= 0) return;
  const double share = wait_seconds / wall_seconds;
  if (!reduced_) {
    if (hold_ > 0) {
      --hold_;
    } else if (share >= kReduceAtWaitShare) {
      reduced_ = true;
      reduced_tokens_ = 0;
    }
    return;
  }
  ++reduced_tokens_;
  if (share > kRestoreAtWaitShare) return;
  reduced_ = false;
  if (reduced_tokens_ < kSettledTokens) {  // a flip: back off
    hold_ = next_hold_;
    next_hold_ = std::min(2 * next_hold_, kMaxHoldTokens);
  } else {
    next_hold_ = kFirstHoldTokens;
  }
}

}  // namespace deltafin::model
