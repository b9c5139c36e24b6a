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
#include "runtime/spec_controller.h"

namespace deltafin::runtime {

// The widest verify pass: the pending id and the controller's widest draft. The memory plan
// budgets its tentative rows.
inline constexpr uint64_t kMaxVerifyRows = SpecController::kMaxDraft + 1;

class ScriptDrafter;  // speculator.cc

class Speculator {
 public:
  struct Plan {
    std::vector<int32_t> drafts;  // empty: a plain decode pass
    const char* decision = "";    // the controller's reason (stats)
  };
  // A generate call starts with these settings. The learned pass costs are kept across calls
  // with the same settings.
  void begin(const SpeculationOptions& options);
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
  std::unique_ptr<Drafter> drafter_;  // null: speculation off
  ScriptDrafter* script_ = nullptr;   // drafter_ when it is a script (told the position)
  std::unique_ptr<SpecController> controller_;
};

}  // namespace deltafin::runtime
