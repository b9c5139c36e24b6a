// The in-memory expert store: every expert's span is already addressable (the checkpoint's mmap),
// so a batch hands experts out in request order without waiting.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "experts/expert_store.h"

namespace deltafin::experts {

// Maps a span of a shard file to memory that stays valid for the store's lifetime.
using SpanResolver = std::function<const uint8_t*(const format::ExpertSpan&)>;

class MappedExpertStore : public ExpertStore {
 public:
  MappedExpertStore(ExpertCatalog catalog, SpanResolver resolve);

  std::unique_ptr<ExpertBatch> request(int layer, std::span<const int32_t> experts) override;
  ExpertStoreStats stats() const override;  // experts_requested only: the page cache reads

  // The weights of one expert, its MXFP4 scales checked the first time it is used.
  ExpertWeights get(int layer, int32_t expert);

 private:
  ExpertCatalog catalog_;
  SpanResolver resolve_;
  mutable std::mutex mu_;
  std::vector<std::vector<bool>> checked_;  // [layer][expert]: scales validated
  uint64_t requested_ = 0;
};

}  // namespace deltafin::experts
