// A session's speculation: the drafter that proposes the ids after the pending one and the
// controller that decides how many of them each verify pass checks (spec_controller.h), set up
// from each generate call's SpeculationOptions.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "deltafin/generate.h"
#include "runtime/drafter.h"
#include "runtime/session_drafter.h"
#include "runtime/spec_controller.h"

namespace deltafin::runtime {

// The widest verify pass: the pending id and the controller's widest draft. The memory plan
// budgets its tentative rows.
inline constexpr uint64_t kMaxVerifyRows = SpecController::kMaxDraft + 1;

class ScriptDrafter;  // speculator.cc

// A session's model drafters that can propose for its sequence now (null: none).
struct SessionModelDrafters {
  SessionDrafter* dspark = nullptr;
  SessionDrafter* qwen = nullptr;
};

class Speculator {
 public:
  Speculator();
  ~Speculator();  // ScriptDrafter is complete only in speculator.cc
  struct Plan {
    std::vector<int32_t> drafts;  // empty: a plain decode pass
    const char* decision = "";    // the controller's reason (stats)
    const char* drafter = "";     // who proposed (empty when nobody was asked)
    double draft_ms = 0.0;        // the proposal's wall time
  };
  using ModelDrafters = SessionModelDrafters;
  // A generate call starts with these settings and picks its drafter (kAuto: DSpark for chat,
  // Qwen3 for raw text, where the session has them; n-gram lookup else). The learned pass costs
  // are kept across calls with the same settings.
  void begin(const SpeculationOptions& options, ModelDrafters models = {});
  // The drafter this call uses ("" when speculation is off).
  const char* drafter_name() const { return active_ ? active_->name() : ""; }
  // The ids to verify after history's last (pending) id, the `generated`-th id of this call; at
  // most `room` of them.
  Plan plan(std::span<const int32_t> history, int generated, int room);
  // After the pass of the last plan: of `drafted` ids, the first `accepted` were the model's own.
  void observe(int drafted, int accepted);
  // A decode or verify pass of `rows` rows took `seconds`.
  void record_pass(int rows, double seconds);

 private:
  SpeculationOptions options_;
  bool configured_ = false;
  std::unique_ptr<Drafter> ngram_;
  std::unique_ptr<ScriptDrafter> script_;
  Drafter* active_ = nullptr;  // this call's drafter; null: speculation off
  int active_index_ = 0;       // its acceptance statistics in the controller
  std::unique_ptr<SpecController> controller_;
};

}  // namespace deltafin::runtime
