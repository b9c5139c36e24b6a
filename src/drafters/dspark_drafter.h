// The DSpark drafter as a speculation loop uses it: one shared DSparkModel (weights, borrowed
// target embedding and lm_head) and one DSparkSequence per sequence (its context cache).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drafters/dspark_context.h"
#include "drafters/dspark_forward.h"

namespace deltafin::drafters {

class DSparkSequence {
 public:
  // `model` must outlive the sequence. max_positions: context to reserve (0: grow as needed).
  explicit DSparkSequence(const DSparkModel& model, int64_t max_positions = 0)
      : model_(&model), ctx_(model.config(), max_positions) {}

  // The target layers whose taps append() takes, in order (model::ForwardOptions::tap_layers).
  const std::vector<int64_t>& tap_layers() const { return model_->config().target_layer_ids; }

  // Committed target positions in the cache.
  int64_t length() const { return ctx_.length(); }
  // Appends the first keep_rows rows of a target pass's taps [n_taps, pass_rows, hidden] (the
  // tap_out layout) as positions first_position ... (must equal length()). After a verify pass,
  // keep = 1 + accepted drafts: only rows K3 committed become context.
  void append(const float* taps, int64_t pass_rows, int64_t keep_rows, int64_t first_position) {
    model_->append_context(ctx_, taps, pass_rows, keep_rows, first_position);
  }
  // The session rewound to n positions; reset() for a new sequence.
  void truncate(int64_t n) { ctx_.truncate(n); }
  void reset() { ctx_.reset(); }

  // Drafts after `anchor` (the pending token at position length(), not yet run by the target):
  // `width` ids (1..7) with their confidence. Does not change the sequence.
  DSparkProposal propose(int32_t anchor, int width, bool want_logits = false) const {
    return model_->propose(ctx_, anchor, width, want_logits);
  }

  const DSparkContext& context() const { return ctx_; }

 private:
  const DSparkModel* model_;
  DSparkContext ctx_;
};

}  // namespace deltafin::drafters
