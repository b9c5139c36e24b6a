// A model drafter's per-session side (DSpark, Qwen3): the state it keeps for one sequence, kept in
// step with the session's committed ids, and the target hidden states it reads after each pass.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/drafter.h"

namespace deltafin::runtime {

class SessionDrafter : public Drafter {
 public:
  // Target layers whose running sums this drafter reads (ascending; empty: none). The session
  // taps them in every pass while ready() holds, and hands over the rows it commits.
  virtual std::span<const int64_t> tap_layers() const { return {}; }
  // Rows [first, first + count) of a pass of `n` rows were committed, at the positions right
  // after the ones already handed over. `taps` is the pass's ForwardOptions::tap_out:
  // [tap_layers().size()][n][hidden].
  virtual void commit_rows(const float* taps, int64_t n, int64_t first, int64_t count) {
    (void)taps, (void)n, (void)first, (void)count;
  }
  // The session now holds only its first `positions` ids (a rewind, or 0 for a reset).
  virtual void rewind(int64_t positions) = 0;
  // Whether it can propose after a sequence of `positions` committed ids: its state covers them
  // all and they are within its range.
  virtual bool ready(int64_t positions) const = 0;
};

// A model drafter the engine loaded once, shared by its sessions.
class DrafterModel {
 public:
  virtual ~DrafterModel() = default;
  virtual const char* name() const = 0;
  virtual std::unique_ptr<SessionDrafter> new_session() = 0;
};

}  // namespace deltafin::runtime
