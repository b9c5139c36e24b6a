// A store decorator that records routes: one JSON line per forward pass and MoE layer with the
// experts the layer asked for, e.g. {"position":17,"rows":1,"layer":3,"experts":[5,811,40]}. For
// a decode step (rows 1) that is the token's route in rank order; for a prefill pass it is the
// union of its rows' routes in order of first use. Cache and prefetch policies are measured on
// these files (tools/route_cache_sim.py).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "experts/expert_store.h"

namespace deltafin::experts {

class RouteTracingStore : public ExpertStore {
 public:
  // Creates (truncates) `path`; throws base::Error naming it when that fails.
  RouteTracingStore(std::unique_ptr<ExpertStore> inner, const std::string& path);
  ~RouteTracingStore() override;

  std::unique_ptr<ExpertBatch> request(int layer, std::span<const int32_t> experts) override;
  void begin_pass(int64_t position, int64_t n_rows) override;
  void prefetch(int layer, std::span<const int32_t> experts) override;
  ExpertStoreStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<ExpertStore> inner_;
  std::string path_;
  std::FILE* out_ = nullptr;
  int64_t position_ = 0;
  int64_t rows_ = 0;
};

}  // namespace deltafin::experts
