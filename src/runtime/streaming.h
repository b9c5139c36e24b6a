// Sets a loaded model up for its memory budget: plans the tiers (memory_plan.h), installs the
// streaming expert store and the streamed spine where the plan says so, pre-faults the resident
// spine, wraps the store in a route trace on request, and reports byte and time counters.
#pragma once

#include <memory>

#include "deltafin/engine.h"
#include "experts/read_scheduler.h"
#include "model/model.h"
#include "model/streamed_spine.h"

namespace deltafin::runtime {

class Streaming {
 public:
  // Logs the decision. Throws base::Error when the budget cannot hold the model's minimum.
  static std::unique_ptr<Streaming> configure(model::Model& model, const EngineOptions& options);

  const MemoryPlanInfo& info() const { return info_; }
  StreamStats stats() const;

 private:
  Streaming() = default;

  model::Model* model_ = nullptr;
  std::shared_ptr<experts::ReadScheduler> scheduler_;
  const model::StreamedSpine* spine_ = nullptr;  // owned by the model
  MemoryPlanInfo info_;
};

}  // namespace deltafin::runtime
