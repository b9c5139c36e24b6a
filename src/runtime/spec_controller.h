// Decides, per decode step, whether to verify drafted ids and how many: the width that maximizes
// expected accepted tokens per second, from pass costs learned online and per-request acceptance,
// backing off when drafts keep failing. Deterministic given its inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/drafter.h"

namespace deltafin::runtime {

enum class SpecMode : uint8_t {
  kOff,     // never draft
  kAuto,    // draft when the cost model says it pays
  kAlways,  // verify every proposed id up to draft_max (measuring the engine, not for users)
};

struct SpecOptions {
  SpecMode mode = SpecMode::kAuto;
  int draft_max = 7;  // clamped to [1, kMaxDraft]
  // Force: verify at least this many drafted ids whenever the drafter proposes them (tests use it
  // to make every step speculate). 0 = let the controller decide.
  int draft_min = 0;
};

// Why a step got its width; recorded for --stats.
enum class SpecReason : uint8_t {
  kOff,       // mode off
  kBackoff,   // drafts kept failing: this step skips drafting
  kNoDraft,   // the drafter proposed nothing
  kNotWorth,  // the best expected rate is plain decode (starts a back-off)
  kBest,      // the width with the best expected rate
  kProbe,     // a back-off ended: one cheap narrow verify to see whether drafts work again
  kForced,    // draft_min
  kMeasure,   // the 1-row cost is not measured yet: every rate is relative to it
  kAlways,    // mode always
};
const char* spec_reason_name(SpecReason reason);

struct SpecStep {
  int16_t width = 0;      // drafted ids verified (0 = plain decode; the pass has width + 1 rows)
  int16_t proposed = 0;   // ids the drafter offered (0 when it was not asked)
  int16_t accepted = -1;  // drafted ids accepted; -1 until recorded (and for plain steps)
  SpecReason reason = SpecReason::kOff;
};

struct SpecTotals {
  uint64_t steps = 0;
  uint64_t passes = 0;    // target passes recorded (record_pass)
  uint64_t proposed = 0;  // ids drafters offered
  uint64_t drafted = 0;   // drafted ids verified
  uint64_t accepted = 0;  // drafted ids accepted
  uint64_t tokens = 0;    // tokens the passes produced: one per pass plus the accepted ids
  double seconds = 0.0;
  uint64_t bytes = 0;
  double tokens_per_pass() const { return passes ? static_cast<double>(tokens) / passes : 0.0; }
  double bytes_per_token() const { return tokens ? static_cast<double>(bytes) / tokens : 0.0; }
};

class SpecController {
 public:
  static constexpr int kMaxDraft = 16;
  // Until a width is measured, a pass of w rows is assumed to cost 1 + kPriorRowCost * (w - 1)
  // times a 1-row pass (an extra row re-reads nothing of a streamed spine, it only computes).
  static constexpr double kPriorRowCost = 0.22;

  explicit SpecController(SpecOptions options = {});

  // A new request: clears the per-request stats, restarts the acceptance estimates from a prior
  // that keeps a little of the last request's, probes at once if the last one was backing off,
  // and keeps the learned pass costs.
  void begin_request();

  // Step protocol: draft_budget(); if > 0, propose up to that many ids and call choose_width();
  // run the pass of width + 1 rows; record_pass(); if width > 0, record_acceptance(width, n).
  //
  // How many ids to ask the drafter for this step; 0 = decode plainly (the step is recorded).
  int draft_budget();
  // The verify width for this draft: 0 = plain decode, else verify [pending + k drafted ids].
  // `drafter` names whose acceptance applies (an index the caller keeps, from 0).
  int choose_width(const Draft& draft, int drafter = 0);
  // A target decode or verify pass of w_rows rows took `seconds` and read `bytes`.
  void record_pass(int w_rows, double seconds, uint64_t bytes);
  // Of the `proposed` ids verified at the last choose_width, the first `accepted` were accepted.
  void record_acceptance(int proposed, int accepted);
  // A proposal of `drafter` took `seconds` (a model drafter's forward; n-gram lookup is ~free).
  // Every drafted width then has to pay for it too.
  void record_draft(int drafter, double seconds);
  // Mean seconds of a proposal of `drafter` (0 until one is recorded).
  double draft_cost(int drafter) const;

  // The cost model: seconds of a pass of w_rows rows (relative to 1.0 before anything is measured):
  // the 1-row cost times a relative cost that pools the measured widths' slopes with a prior,
  // never below their bytes' ratio nor below 1 + 0.01 per extra row.
  double pass_cost(int w_rows) const;
  // Mean bytes read by a measured pass of w_rows rows (0 when not measured): for stats.
  double pass_bytes(int w_rows) const;
  // Per-position acceptance estimate of a drafter this request.
  double acceptance(int drafter = 0) const;
  // Expected tokens per second of verifying k ids with per-position acceptance `a` each.
  double expected_rate(int k, double a) const;

  const SpecOptions& options() const { return options_; }
  const std::vector<SpecStep>& steps() const { return steps_; }
  const SpecTotals& totals() const { return totals_; }
  int backoff_level() const { return level_; }

 private:
  struct Acceptance {
    double hits = 0.0;    // accepted ids
    double misses = 0.0;  // passes that stopped before the end of their draft
  };
  Acceptance& stats_of(int drafter);
  double slope() const;
  double relative_cost(int w_rows) const;
  double one_row_cost() const;
  void start_backoff();
  int push_step(int width, int proposed, SpecReason reason);

  SpecOptions options_;
  // Per rows (index 1..kMaxDraft + 1): running mean of seconds and bytes, and samples in it.
  std::vector<double> cost_s_;
  std::vector<double> cost_bytes_;
  std::vector<int> cost_n_;
  std::vector<Acceptance> acceptance_;
  std::vector<double> draft_s_;  // per drafter: running mean seconds of a proposal
  std::vector<int> draft_n_;
  int cap_ = 2;        // widest width allowed now: starts narrow, widens on full acceptance
  int budget_ = 0;     // the last draft_budget()
  int level_ = 0;      // back-off level: a back-off skips 2^level - 1 steps
  int skip_left_ = 0;  // steps still to skip
  bool probe_due_ = false;
  bool last_was_probe_ = false;
  bool held_since_backoff_ = true;  // a verify accepted something since the last back-off began
  int last_drafter_ = 0;
  std::vector<SpecStep> steps_;
  SpecTotals totals_;
};

}  // namespace deltafin::runtime
