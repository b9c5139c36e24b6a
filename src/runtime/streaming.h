// Builds a model for its memory budget: plans the tiers (memory_plan.h) from the opened plan, then
// constructs the model in one step with the streaming expert store and the streamed spine where
// the plan says so (reading the resident spine into memory it owns; with everything mapped, it
// warms the mapping in the background), the store wrapped in a route trace on request; and
// reports byte and time counters.
#pragma once

#include <memory>
#include <vector>

#include "deltafin/engine.h"
#include "experts/expert_fetcher.h"
#include "io/page_cache_warmer.h"
#include "io/read_scheduler.h"
#include "model/model.h"
#include "model/streamed_spine.h"
#include "runtime/memory_plan.h"

namespace deltafin::runtime {

class Streaming {
 public:
  // Loads options.model_dir (its experts from options.expert_source when set) and logs the
  // decision. Throws base::Error naming what does not fit, when the budget cannot hold the
  // model's minimum, or when the experts come from an expert source (a streaming install, whose
  // experts are always streamed) and options ask for mapped experts. `options` come resolved by the
  // engine: chunk >= 1, the prefill group a multiple of it, a read depth >= 1.
  // `drafters`: the model drafters the plan may load (memory_plan.h); those it chose are named in
  // info().drafters, in the same order.
  static std::unique_ptr<Streaming> load(const EngineOptions& options,
                                         std::vector<DrafterCost> drafters = {});

  model::Model& model() { return *model_; }
  const MemoryPlanInfo& info() const { return info_; }
  StreamStats stats() const;

 private:
  Streaming() = default;
  // Model::build's factory: plans the tiers for the opened model and makes the stores they ask
  // for; fills info_, scheduler_ and spine_, and what the warm-up needs.
  model::ModelStores make_stores(const model::ModelPlan& plan, const format::Checkpoint& ckpt,
                                 const experts::ExpertCatalog& catalog,
                                 const EngineOptions& options,
                                 const std::vector<DrafterCost>& drafters);

  std::unique_ptr<model::Model> model_;
  std::shared_ptr<io::ReadScheduler> scheduler_;
  const model::StreamedSpine* spine_ = nullptr;  // owned by the model
  MemoryPlanInfo info_;
  // What the warm-up of a wholly mapped model reads, in the order a pass needs it: set by
  // make_stores when the plan asks for it.
  std::vector<model::SpineLayerReads> warm_reads_;
  std::vector<const format::TensorInfo*> warm_globals_;
  // Set when the whole model is mapped; stops before the model (and its mapping) goes away, being
  // declared after it.
  std::unique_ptr<io::PageCacheWarmer> warmer_;
};

}  // namespace deltafin::runtime
