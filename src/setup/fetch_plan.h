// `deltafin fetch-experts`: which experts of a streaming install are still remote (for the layers
// asked), and fetching them through the expert source with a bounded number in flight.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "setup/expert_source.h"

namespace deltafin::setup {

class Progress;

// "1-40,50": inclusive ranges of layer indices as in the tensor names (K3's MoE layers are 1..92).
// Empty: every layer.
struct LayerRanges {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  bool contains(int64_t layer) const;
  static LayerRanges parse(const std::string& spec);  // throws base::Error naming the bad part
};

struct ExpertFetchPlan {
  struct LayerCount {
    int64_t n_experts = 0;
    int64_t n_missing = 0;
    uint64_t missing_bytes = 0;
  };
  std::vector<std::pair<int64_t, int64_t>> missing;  // (layer, expert), in layer then id order
  std::map<int64_t, LayerCount> layers;              // the selected MoE layers
  uint64_t missing_bytes = 0;
  int64_t n_selected = 0;
};
ExpertFetchPlan plan_expert_fetch(const RemoteExpertSource& source, const LayerRanges& layers);

// Fetches the plan's experts, keeping 2 per connection in flight. On the first failure it stops
// starting new ones, waits for those running, and rethrows; what was fetched stays (a rerun skips
// it). `progress` advances by each expert's bytes as it lands.
void fetch_planned(RemoteExpertSource& source, const ExpertFetchPlan& plan, int n_in_flight,
                   Progress* progress);

}  // namespace deltafin::setup
