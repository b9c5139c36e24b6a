// Speculator: which drafter a generate call's settings pick, and the step protocol of
// SpecController around it (budget, proposal, width, pass, acceptance).
#include "runtime/speculator.h"

#include <algorithm>

#include "base/error.h"
#include "base/stopwatch.h"
#include "base/timeline.h"
#include "runtime/ngram_drafter.h"

namespace deltafin::runtime {

// Proposes the script's ids after the g-th generated id (Speculation::kScript).
class ScriptDrafter final : public Drafter {
 public:
  explicit ScriptDrafter(std::vector<int32_t> script) : script_(std::move(script)) {}
  const char* name() const override { return "script"; }
  void at(int generated) { generated_ = generated; }
  Draft propose(std::span<const int32_t>, int max_tokens) override {
    Draft d;
    const size_t from = std::min<size_t>(generated_, script_.size());
    const size_t n = std::min<size_t>(max_tokens, script_.size() - from);
    d.ids.assign(script_.begin() + from, script_.begin() + from + n);
    return d;
  }

 private:
  std::vector<int32_t> script_;
  int generated_ = 0;
};

namespace {

bool same_settings(const SpeculationOptions& a, const SpeculationOptions& b) {
  return a.mode == b.mode && a.draft_max == b.draft_max && a.draft_min == b.draft_min &&
         a.script == b.script;
}

}  // namespace

Speculator::Speculator() = default;
Speculator::~Speculator() = default;

void Speculator::begin(const SpeculationOptions& options, ModelDrafters models) {
  if (options.draft_max < 0 || options.draft_min < 0)
    base::fail("speculation: draft_max and draft_min must be >= 0");
  if (!configured_ || !same_settings(options, options_)) {
    options_ = options;
    configured_ = true;
    ngram_.reset();
    script_.reset();
    controller_.reset();
    if (options.mode != Speculation::kOff && options.draft_max > 0) {
      if (options.mode == Speculation::kScript) {
        script_ = std::make_unique<ScriptDrafter>(options.script);
      } else {
        ngram_ = std::make_unique<NgramDrafter>();
      }
      SpecOptions spec;
      // A script is the measurement of a width: every pass verifies what the script proposes.
      spec.mode = options.mode == Speculation::kScript ? SpecMode::kAlways : SpecMode::kAuto;
      spec.draft_max = std::max(options.draft_max, options.draft_min);
      spec.draft_min = options.draft_min;
      controller_ = std::make_unique<SpecController>(spec);
    }
  }
  options_.chat = options.chat;
  active_ = nullptr;
  active_index_ = 0;
  if (!controller_) return;
  controller_->begin_request();
  // Acceptance is tracked per drafter: each index is one drafter's statistics.
  enum : int { kNgramIndex = 0, kDsparkIndex = 1, kQwenIndex = 2, kScriptIndex = 3 };
  SessionDrafter* wanted = nullptr;
  int wanted_index = kNgramIndex;
  switch (options.mode) {
    case Speculation::kScript:
      active_ = script_.get();
      active_index_ = kScriptIndex;
      return;
    case Speculation::kDspark:
      wanted = models.dspark, wanted_index = kDsparkIndex;
      break;
    case Speculation::kQwen:
      wanted = models.qwen, wanted_index = kQwenIndex;
      break;
    case Speculation::kAuto:
      if (options.chat && models.dspark) {
        wanted = models.dspark, wanted_index = kDsparkIndex;
      } else if (!options.chat && models.qwen) {
        wanted = models.qwen, wanted_index = kQwenIndex;
      }
      break;
    case Speculation::kNgram:
    case Speculation::kOff:
      break;
  }
  // A model drafter that cannot propose here (not in the folder, or its range passed) leaves the
  // request to n-gram lookup: speculation never changes the output, only who guesses.
  if (wanted) {
    active_ = wanted;
    active_index_ = wanted_index;
  } else {
    active_ = ngram_.get();
    active_index_ = kNgramIndex;
  }
}

Speculator::Plan Speculator::plan(std::span<const int32_t> history, int generated, int room) {
  Plan p;
  if (!controller_ || !active_) return p;
  const int asked = controller_->draft_budget();
  if (asked == 0) {  // the controller decided on a plain pass (and recorded why)
    p.decision = spec_reason_name(controller_->steps().back().reason);
    return p;
  }
  const int budget = std::min(asked, std::max(room, 0));
  Draft draft;
  if (budget > 0) {
    if (active_ == script_.get()) script_->at(generated);
    const base::Stopwatch draft_time;
    {
      base::timeline::Phase phase("draft");
      draft = active_->propose(history, budget);
    }
    p.draft_ms = draft_time.elapsed_ms();
    p.drafter = active_->name();
    controller_->record_draft(active_index_, p.draft_ms / 1000.0);
    // draft_min: pad to the forced width with the pending id, so every pass verifies.
    const int forced = std::min(options_.draft_min, budget);
    while (static_cast<int>(draft.ids.size()) < forced) {
      draft.ids.push_back(history.back());
      if (!draft.confidence.empty()) draft.confidence.push_back(0.0f);
    }
  }
  const int width = controller_->choose_width(draft, active_index_);
  p.drafts.assign(draft.ids.begin(), draft.ids.begin() + std::min<size_t>(width, draft.ids.size()));
  p.decision = spec_reason_name(controller_->steps().back().reason);
  return p;
}

void Speculator::observe(int drafted, int accepted) {
  if (!controller_ || drafted == 0) return;
  controller_->record_acceptance(drafted, accepted);
  active_->observe(drafted, accepted);
}

void Speculator::record_pass(int rows, double seconds) {
  if (controller_) controller_->record_pass(rows, seconds, 0);
}

}  // namespace deltafin::runtime
