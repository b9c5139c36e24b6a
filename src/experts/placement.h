// A placed install: copies of routed experts laid out over several drives by `deltafin place`,
// one span file per (layer, expert) in each holder's folder, described by MODEL/placement.json
// so the engine finds them from the model folder alone. The shards stay the copy of last resort.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace deltafin::experts {

struct PlacedExpert {
  uint64_t nbytes = 0;       // the span's length: a copy of another length is not this expert
  std::vector<int> holders;  // indices into Placement::dirs, primary first; empty: shards only
};

struct Placement {
  std::string manifest_path;
  std::vector<std::string> dirs;                  // absolute folders holding the span files
  std::vector<std::vector<PlacedExpert>> layers;  // [layer][expert]
  const PlacedExpert* find(int layer, int expert) const {
    if (layer < 0 || static_cast<size_t>(layer) >= layers.size()) return nullptr;
    const std::vector<PlacedExpert>& l = layers[layer];
    if (expert < 0 || static_cast<size_t>(expert) >= l.size() || l[expert].holders.empty())
      return nullptr;
    return &l[expert];
  }
};

inline constexpr const char* kPlacementFile = "placement.json";
std::string placement_path(const std::string& model_dir);
// DIR/L003-E0042.bin
std::string placed_file(const std::string& dir, int layer, int expert);

// nullptr when the model folder has no placement.json; throws base::Error naming the file and
// field when it exists and is not a valid placement.
std::shared_ptr<const Placement> load_placement(const std::string& model_dir);
// Writes MODEL/placement.json atomically (tmp, fsync, rename). Throws base::Error naming it.
void write_placement(const std::string& model_dir, const Placement& placement);

// What plan_placement lays out: every expert's span size, and per drive folder its bandwidth and
// the bytes it may hold.
struct PlanInput {
  struct Expert {
    int layer = 0, expert = 0;
    uint64_t nbytes = 0;
  };
  std::vector<Expert> experts;
  std::vector<double> gbps;            // per drive folder, > 0
  std::vector<uint64_t> budget_bytes;  // per drive folder
  // Recorded uses per (layer, expert) (count_routes): the most used get extra copies where
  // room remains. Empty: one copy each.
  std::map<std::pair<int, int>, uint64_t> uses;
};
// Bytes a span file takes on disk (4 KiB blocks): what budgets count.
uint64_t placed_bytes(uint64_t nbytes);
// One copy of every expert on the folder expected to finish its share first, (assigned bytes +
// this) / bandwidth, so bytes end up in proportion to bandwidth; then replicas of the most used
// experts, by the same rule among the folders not holding them, while any has room. Throws
// base::Error when one copy of everything does not fit the budgets (saying by how much).
std::vector<std::vector<PlacedExpert>> plan_placement(const PlanInput& in);

// Uses per (layer, expert) in a --trace-routes file. Throws base::Error naming the file and line.
std::map<std::pair<int, int>, uint64_t> count_routes(const std::string& path);

}  // namespace deltafin::experts
