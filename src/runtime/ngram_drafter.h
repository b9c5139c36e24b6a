// Prompt-lookup drafting: proposes the ids that followed the most recent earlier occurrence of the
// history's last n ids (longest n first), from an index kept up to date as the history grows.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/drafter.h"

namespace deltafin::runtime {

struct NgramOptions {
  int n_min = 2;  // a 1-gram match is mostly noise on natural text; 1 is allowed
  int n_max = 4;
  // When the match is closer than max_tokens, the history ends before max_tokens ids: off, the
  // draft stops there; on, it continues the repeat (the ids between the match and the pending
  // one, cyclically), which is what a looping output does next.
  bool continue_repeats = false;
};

// Counters of the work done, so tests can bound it without timing anything.
struct NgramWork {
  uint64_t indexed_positions = 0;  // history positions inserted into the index
  uint64_t lookups = 0;            // index probes
  uint64_t rebuilds = 0;           // times the history was not an extension of the last one
};

class NgramDrafter final : public Drafter {
 public:
  // Options are clamped to 1 <= n_min <= n_max <= kMaxN.
  explicit NgramDrafter(NgramOptions options = {});

  static constexpr int kMaxN = 16;

  const char* name() const override { return "ngram"; }
  Draft propose(std::span<const int32_t> history, int max_tokens) override;
  void observe(int proposed, int accepted) override;

  // Forgets the indexed history (the next propose rebuilds); the acceptance learned is kept.
  void reset();

  const NgramWork& work() const { return work_; }
  // The n of the last proposal's match; 0 when it found none.
  int last_match_n() const { return last_n_; }
  // The current per-id acceptance estimate for a match of length n (what confidence reports).
  float acceptance(int n) const;

 private:
  uint64_t key(std::span<const int32_t> ids) const;
  bool is_extension(std::span<const int32_t> history) const;
  void index_up_to(std::span<const int32_t> history, size_t end_exclusive);

  NgramOptions options_;
  // One table per n: hash of the n ids ending at position p -> the latest such p.
  std::vector<std::unordered_map<uint64_t, int32_t>> tables_;
  std::vector<int32_t> seen_;  // the history the index describes (a copy: resets are detected)
  size_t indexed_ = 0;         // end positions [0, indexed_) are in the tables
  // Per n: accepted ids and failed positions seen through observe().
  std::vector<double> accepted_;
  std::vector<double> failed_;
  int last_n_ = 0;
  NgramWork work_;
};

}  // namespace deltafin::runtime
