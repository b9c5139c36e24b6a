// The speculation policy (see spec_controller.h and docs/SPECULATION.md, "Controller").
#include "runtime/spec_controller.h"

#include <algorithm>
#include <cmath>

namespace deltafin::runtime {
namespace {

// Acceptance prior: per position, worth kPriorWeight observed positions. Below 0.5 on purpose: on
// text where drafts fail the first passes are pure loss, and this makes two misses enough to stop.
constexpr double kPriorAcceptance = 0.4;
constexpr double kPriorWeight = 2.0;
// The acceptance estimate follows about the last this many observed positions, so that it can
// recover when the text changes (a long failing stretch must not outweigh a new regime).
constexpr double kAcceptanceWindow = 32.0;
// Drafting must promise this much more than plain decoding: near break-even the estimate's noise
// decides, and a wrong guess costs a wider pass for nothing.
constexpr double kMinGain = 0.02;
// What a new request keeps of the last one's acceptance, in observed positions.
constexpr double kCarriedWeight = 2.0;
// The cost means follow the last this many passes of a width (the machine's load changes).
constexpr int kCostWindow = 16;
// Weight of kPriorRowCost in the learned slope, in measured passes.
constexpr double kSlopePriorWeight = 2.0;
// The least an extra verified row is assumed to cost, whatever the timings say: with it, a drafter
// whose acceptance has fallen to the window's floor (0.8 / 34) is not worth a wider pass.
constexpr double kMinRowCost = 0.01;
// The longest back-off skips 2^6 - 1 = 63 steps: a failing 2-row probe every 64 steps costs
// about 0.22 / 64 = 0.3% of plain decoding.
constexpr int kMaxLevel = 6;
constexpr int kInitialCap = 2;

}  // namespace

const char* spec_reason_name(SpecReason reason) {
  switch (reason) {
    case SpecReason::kOff:
      return "off";
    case SpecReason::kBackoff:
      return "backoff";
    case SpecReason::kNoDraft:
      return "no_draft";
    case SpecReason::kNotWorth:
      return "not_worth";
    case SpecReason::kBest:
      return "best";
    case SpecReason::kProbe:
      return "probe";
    case SpecReason::kForced:
      return "forced";
    case SpecReason::kAlways:
      return "always";
    case SpecReason::kMeasure:
      return "measure";
  }
  return "unknown";
}

SpecController::SpecController(SpecOptions options) : options_(options) {
  options_.draft_max = std::clamp(options_.draft_max, 1, kMaxDraft);
  options_.draft_min = std::clamp(options_.draft_min, 0, options_.draft_max);
  cost_s_.assign(kMaxDraft + 2, 0.0);
  cost_bytes_.assign(kMaxDraft + 2, 0.0);
  cost_n_.assign(kMaxDraft + 2, 0);
  cap_ = std::min(kInitialCap, options_.draft_max);
}

void SpecController::begin_request() {
  for (Acceptance& a : acceptance_) {
    const double seen = a.hits + a.misses;
    const double keep = seen > kCarriedWeight ? kCarriedWeight / seen : 1.0;
    a.hits *= keep;
    a.misses *= keep;
  }
  cap_ = std::min(kInitialCap, options_.draft_max);
  // A new request may be other text: probe it at once, but a failing probe goes straight back to
  // the wait the last request reached (short requests on failing text pay one probe each).
  level_ = std::max(0, level_ - 1);
  skip_left_ = 0;
  probe_due_ = level_ > 0;
  last_was_probe_ = false;
  steps_.clear();
  totals_ = {};
}

SpecController::Acceptance& SpecController::stats_of(int drafter) {
  drafter = std::max(drafter, 0);
  if (static_cast<size_t>(drafter) >= acceptance_.size()) acceptance_.resize(drafter + 1);
  return acceptance_[drafter];
}

double SpecController::acceptance(int drafter) const {
  Acceptance a;
  if (drafter >= 0 && static_cast<size_t>(drafter) < acceptance_.size()) a = acceptance_[drafter];
  return (a.hits + kPriorAcceptance * kPriorWeight) / (a.hits + a.misses + kPriorWeight);
}

double SpecController::one_row_cost() const {
  if (cost_n_[1] > 0) return cost_s_[1];
  for (int w = 2; w <= kMaxDraft + 1; ++w) {
    if (cost_n_[w] > 0) return cost_s_[w] / (1.0 + kPriorRowCost * (w - 1));
  }
  return 1.0;
}

double SpecController::slope() const {
  if (cost_n_[1] == 0) return kPriorRowCost;
  const double c1 = cost_s_[1];
  double sum = kPriorRowCost * kSlopePriorWeight;
  double weight = kSlopePriorWeight;
  for (int w = 2; w <= kMaxDraft + 1; ++w) {
    if (cost_n_[w] == 0 || c1 <= 0.0) continue;
    sum += cost_n_[w] * (cost_s_[w] / c1 - 1.0) / (w - 1);
    weight += cost_n_[w];
  }
  return std::max(0.0, sum / weight);
}

double SpecController::relative_cost(int w_rows) const {
  if (w_rows <= 1) return 1.0;
  // The slope model, pooled over every measured width and shrunk to the prior.
  const double model = 1.0 + slope() * (w_rows - 1);
  double r = model;
  if (cost_n_[w_rows] > 0 && cost_n_[1] > 0 && cost_s_[1] > 0.0) {
    // This width's own mean, trusted as its samples grow: one pass timed on a drifting disk can
    // look cheaper than the 1-row passes timed minutes before it.
    const double n = cost_n_[w_rows];
    const double measured = cost_s_[w_rows] / cost_s_[1];
    r = (n * measured + kSlopePriorWeight * model) / (n + kSlopePriorWeight);
  }
  // Bytes do not drift with the disk: where a wider pass reads more (the union of the rows'
  // experts), it costs at least that much more on a machine bound by its reads, and a machine
  // bound by compute does more work per row. Either way a row is never free.
  if (cost_n_[w_rows] > 0 && cost_n_[1] > 0 && cost_bytes_[1] > 0.0) {
    r = std::max(r, cost_bytes_[w_rows] / cost_bytes_[1]);
  }
  return std::max(r, 1.0 + kMinRowCost * (w_rows - 1));
}

double SpecController::pass_cost(int w_rows) const {
  w_rows = std::clamp(w_rows, 1, kMaxDraft + 1);
  return one_row_cost() * relative_cost(w_rows);
}

double SpecController::pass_bytes(int w_rows) const {
  if (w_rows < 1 || w_rows > kMaxDraft + 1) return 0.0;
  return cost_bytes_[w_rows];
}

double SpecController::expected_rate(int k, double a) const {
  // Expected tokens from verifying k ids: the target's own token plus each accepted prefix.
  double tokens = 1.0;
  double p = 1.0;
  for (int i = 0; i < k; ++i) {
    p *= a;
    tokens += p;
  }
  return tokens / pass_cost(k + 1);
}

int SpecController::push_step(int width, int proposed, SpecReason reason) {
  SpecStep step;
  step.width = static_cast<int16_t>(width);
  step.proposed = static_cast<int16_t>(proposed);
  step.reason = reason;
  steps_.push_back(step);
  ++totals_.steps;
  totals_.proposed += proposed;
  totals_.drafted += width;
  return width;
}

void SpecController::start_backoff() {
  held_since_backoff_ = false;
  level_ = std::clamp(level_ + 1, 1, kMaxLevel);
  skip_left_ = (1 << level_) - 1;
  probe_due_ = true;
}

int SpecController::draft_budget() {
  budget_ = 0;
  if (options_.mode == SpecMode::kOff) return push_step(0, 0, SpecReason::kOff);
  if (options_.mode == SpecMode::kAlways) return budget_ = options_.draft_max;
  if (skip_left_ > 0 && options_.draft_min == 0) {
    --skip_left_;
    return push_step(0, 0, SpecReason::kBackoff);
  }
  budget_ = std::max(cap_, options_.draft_min);
  return budget_;
}

int SpecController::choose_width(const Draft& draft, int drafter) {
  last_drafter_ = std::max(drafter, 0);
  last_was_probe_ = false;
  const int budget = budget_ > 0 ? budget_ : options_.draft_max;
  const int n = std::min(static_cast<int>(draft.ids.size()), budget);
  if (n == 0) return push_step(0, 0, SpecReason::kNoDraft);
  if (options_.mode == SpecMode::kAlways) return push_step(n, n, SpecReason::kAlways);

  // The drafter's confidence can only lower the estimate: the per-request acceptance already
  // measures how often this drafter is right, so taking the higher would count it twice.
  const double a_hat = acceptance(last_drafter_);
  // A drafted width pays for the proposal as well as its pass: a drafter that costs more than its
  // accepted ids save is not worth running, even though this proposal's time is spent already.
  const double proposal_s = draft_cost(last_drafter_);
  int best_k = 0;
  double best_rate = expected_rate(0, a_hat);
  double tokens = 1.0;
  double p = 1.0;
  for (int k = 1; k <= std::min(n, cap_); ++k) {
    double a = a_hat;
    if (static_cast<size_t>(k - 1) < draft.confidence.size()) {
      a = std::min(a, static_cast<double>(std::clamp(draft.confidence[k - 1], 0.0f, 1.0f)));
    }
    p *= a;
    tokens += p;
    const double rate = tokens / (pass_cost(k + 1) + proposal_s);
    // Strictly better by a margin, so that ties and rounding never widen the pass.
    if (rate > best_rate * (1.0 + 1e-9)) {
      best_rate = rate;
      best_k = k;
    }
  }

  if (best_k > 0 && best_rate < expected_rate(0, a_hat) * (1.0 + kMinGain)) best_k = 0;

  const int forced = std::min(options_.draft_min, n);
  if (forced == 0 && cost_n_[1] == 0) return push_step(0, n, SpecReason::kMeasure);
  if (forced > best_k) return push_step(forced, n, SpecReason::kForced);
  if (best_k > 0) {
    // Drafting pays again: the next back-off starts short, but only once a draft has held since
    // the back-off began; a pick made on noisy costs alone keeps the wait it had reached.
    if (held_since_backoff_) level_ = 0;
    probe_due_ = false;
    return push_step(best_k, n, SpecReason::kBest);
  }
  if (probe_due_) {
    probe_due_ = false;
    last_was_probe_ = true;
    return push_step(1, n, SpecReason::kProbe);
  }
  start_backoff();
  return push_step(0, n, SpecReason::kNotWorth);
}

void SpecController::record_pass(int w_rows, double seconds, uint64_t bytes) {
  ++totals_.passes;
  ++totals_.tokens;
  totals_.seconds += seconds;
  totals_.bytes += bytes;
  if (w_rows < 1 || w_rows > kMaxDraft + 1 || !(seconds >= 0.0) || !std::isfinite(seconds)) return;
  int& n = cost_n_[w_rows];
  n = std::min(n + 1, kCostWindow);
  cost_s_[w_rows] += (seconds - cost_s_[w_rows]) / n;
  cost_bytes_[w_rows] += (static_cast<double>(bytes) - cost_bytes_[w_rows]) / n;
}

void SpecController::record_draft(int drafter, double seconds) {
  drafter = std::max(drafter, 0);
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return;
  if (static_cast<size_t>(drafter) >= draft_s_.size()) {
    draft_s_.resize(drafter + 1, 0.0);
    draft_n_.resize(drafter + 1, 0);
  }
  int& n = draft_n_[drafter];
  n = std::min(n + 1, kCostWindow);
  draft_s_[drafter] += (seconds - draft_s_[drafter]) / n;
}

double SpecController::draft_cost(int drafter) const {
  if (drafter < 0 || static_cast<size_t>(drafter) >= draft_s_.size()) return 0.0;
  return draft_s_[drafter];
}

void SpecController::record_acceptance(int proposed, int accepted) {
  if (proposed <= 0) return;
  accepted = std::clamp(accepted, 0, proposed);
  totals_.accepted += accepted;
  totals_.tokens += accepted;
  if (!steps_.empty() && steps_.back().width > 0) steps_.back().accepted = accepted;

  Acceptance& a = stats_of(last_drafter_);
  a.hits += accepted;
  if (accepted > 0) held_since_backoff_ = true;
  if (accepted < proposed) a.misses += 1.0;
  // A probe that holds after a back-off: the misses that caused it describe other text.
  if (last_was_probe_ && accepted > 0) a.misses = std::min(a.misses, 2.0);
  const double seen = a.hits + a.misses;
  if (seen > kAcceptanceWindow) {
    a.hits *= kAcceptanceWindow / seen;
    a.misses *= kAcceptanceWindow / seen;
  }

  // The back-off level is not reset here: a probe that succeeds only counts once the next step
  // finds drafting worth it (choose_width); where the pass costs are what make speculation lose, a
  // reset on success would probe every other step.
  if (accepted == proposed) {
    cap_ = std::min(options_.draft_max, 2 * cap_);
  } else if (accepted == 0) {
    cap_ = std::max(std::min(kInitialCap, options_.draft_max), cap_ / 2);
    // A failed probe: drafts still do not work, wait twice as long before the next.
    if (last_was_probe_) start_backoff();
  }
  last_was_probe_ = false;
}

}  // namespace deltafin::runtime
