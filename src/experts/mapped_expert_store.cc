// MappedExpertStore: resolves spans through the checkpoint's mapping, checks each expert's MXFP4
// scales once, and serves batches in request order.
#include "experts/mapped_expert_store.h"

#include <utility>

#include "base/error.h"

namespace deltafin::experts {
namespace {

class MappedBatch : public ExpertBatch {
 public:
  MappedBatch(MappedExpertStore* store, int layer, std::span<const int32_t> experts)
      : store_(store), layer_(layer), experts_(experts.begin(), experts.end()) {}

  size_t size() const override { return experts_.size(); }

  ReadyExpert acquire_next() override {
    DF_ASSERT(next_ < experts_.size());
    const size_t i = next_++;
    return {i, experts_[i], store_->get(layer_, experts_[i])};
  }

  void release(size_t index) override { DF_ASSERT(index < experts_.size()); }

 private:
  MappedExpertStore* store_;
  int layer_;
  std::vector<int32_t> experts_;
  size_t next_ = 0;
};

}  // namespace

MappedExpertStore::MappedExpertStore(ExpertCatalog catalog, SpanResolver resolve)
    : catalog_(std::move(catalog)), resolve_(std::move(resolve)) {
  checked_.resize(catalog_.layers.size());
  for (size_t l = 0; l < catalog_.layers.size(); ++l)
    checked_[l].assign(catalog_.layers[l].spans.size(), false);
}

ExpertWeights MappedExpertStore::get(int layer, int32_t expert) {
  DF_ASSERT(layer >= 0 && static_cast<size_t>(layer) < catalog_.layers.size());
  const ExpertCatalog::Layer& l = catalog_.layers[layer];
  DF_ASSERT(expert >= 0 && static_cast<size_t>(expert) < l.spans.size());
  const ExpertWeights w = view_expert(l.layout, resolve_(l.spans[expert]));
  std::lock_guard<std::mutex> lock(mu_);
  if (!checked_[layer][expert]) {
    check_expert_scales(w, layer, expert);
    checked_[layer][expert] = true;
  }
  return w;
}

std::unique_ptr<ExpertBatch> MappedExpertStore::request(int layer,
                                                        std::span<const int32_t> experts) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    requested_ += experts.size();
  }
  return std::make_unique<MappedBatch>(this, layer, experts);
}

ExpertStoreStats MappedExpertStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ExpertStoreStats s;
  s.experts_requested = requested_;
  return s;
}

}  // namespace deltafin::experts
