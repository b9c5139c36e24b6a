// Sets a loaded model up for its memory budget: plans the tiers (memory_plan.h), installs the
// streaming expert store and the streamed spine where the plan says so, pre-faults the resident
// spine (or, with everything mapped, warms the mapping in the background), wraps the store in a
// route trace on request, and reports byte and time counters. In a streaming install (a fetcher for
// experts not local yet) the experts are always streamed.
#pragma once

#include <memory>

#include "deltafin/engine.h"
#include "experts/expert_fetcher.h"
#include "io/read_scheduler.h"
#include "io/page_cache_warmer.h"
#include "model/model.h"
#include "model/streamed_spine.h"

namespace deltafin::runtime {

class Streaming {
 public:
  // Logs the decision. Throws base::Error when the budget cannot hold the model's minimum, or
  // when `fetcher` is set (the model's experts may not be local yet) and options ask for mapped
  // experts. `options` come resolved by the engine: chunk >= 1, the prefill group a multiple of
  // it, a read depth >= 1.
  static std::unique_ptr<Streaming> configure(
      model::Model& model, const EngineOptions& options,
      std::shared_ptr<experts::ExpertFetcher> fetcher = nullptr);

  const MemoryPlanInfo& info() const { return info_; }
  StreamStats stats() const;

 private:
  Streaming() = default;

  model::Model* model_ = nullptr;
  std::shared_ptr<io::ReadScheduler> scheduler_;
  const model::StreamedSpine* spine_ = nullptr;  // owned by the model
  MemoryPlanInfo info_;
  // Set when the whole model is mapped; stops before the model (and its mapping) goes away, since
  // the engine destroys this object first.
  std::unique_ptr<io::PageCacheWarmer> warmer_;
};

}  // namespace deltafin::runtime
