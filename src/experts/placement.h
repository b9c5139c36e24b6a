// A placed install: routed experts laid out over several drives by `deltafin place`, described by
// MODEL/placement.json so the engine finds them from the model folder alone. Two layouts: whole
// (one span file per (layer, expert) in each holder's folder, hot experts replicated) and stripe
// (every expert split over all the folders in pieces sized by bandwidth, docs/DRIVES.md). The
// shards stay the copy of last resort.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace deltafin::experts {

enum class Layout {
  kWhole,   // each expert whole on one folder (plus hot replicas): a route's 16 experts land
            // unevenly on the drives, and the busiest one sets the pace
  kStripe,  // each expert split over every folder by bandwidth: every route is balanced
};
const char* layout_name(Layout layout);

// Stripe pieces start at multiples of this in the span, so each lands at an O_DIRECT-aligned
// address of the expert's buffer and is read from offset 0 of its own file (io::kDirectAlignment).
inline constexpr uint64_t kPieceAlignment = 4096;

// One piece of a striped expert: bytes [offset, offset + nbytes) of its span, in one file.
struct StripePiece {
  int dir = 0;          // index into Placement::dirs
  uint64_t offset = 0;  // a multiple of kPieceAlignment
  uint64_t nbytes = 0;  // > 0; a multiple of kPieceAlignment unless it is the span's last piece
  bool operator==(const StripePiece&) const = default;
};

struct PlacedExpert {
  uint64_t nbytes = 0;       // the span's length: a copy of another length is not this expert
  std::vector<int> holders;  // whole: indices into Placement::dirs, primary first
  std::vector<StripePiece> pieces;  // stripe: in span order, covering it exactly once
  bool placed() const { return !holders.empty() || !pieces.empty(); }
};

struct Placement {
  std::string manifest_path;
  Layout layout = Layout::kWhole;
  std::vector<std::string> dirs;                  // absolute folders holding the span files
  std::vector<std::vector<PlacedExpert>> layers;  // [layer][expert]
  // nullptr when the expert is not placed (the shards only).
  const PlacedExpert* find(int layer, int expert) const {
    if (layer < 0 || static_cast<size_t>(layer) >= layers.size()) return nullptr;
    const std::vector<PlacedExpert>& l = layers[layer];
    if (expert < 0 || static_cast<size_t>(expert) >= l.size() || !l[expert].placed())
      return nullptr;
    return &l[expert];
  }
};

inline constexpr const char* kPlacementFile = "placement.json";
std::string placement_path(const std::string& model_dir);
// Whole layout: DIR/L003-E0042.bin
std::string placed_file(const std::string& dir, int layer, int expert);
// Stripe layout: DIR/L003-E0042-at4476928.bin, the piece starting at that span offset. The offset
// in the name keeps a resumed or re-planned placement from taking a piece of the right size
// for the wrong bytes.
std::string piece_file(const std::string& dir, int layer, int expert, uint64_t offset);

// nullptr when the model folder has no placement.json; throws base::Error naming the file and
// field when it exists and is not a valid placement.
std::shared_ptr<const Placement> load_placement(const std::string& model_dir);
// Writes MODEL/placement.json atomically (tmp, fsync, rename): version 1 for the whole layout (as
// before striping, so older builds still read it), version 2 for stripe. Throws base::Error.
void write_placement(const std::string& model_dir, const Placement& placement);

// What plan_placement lays out: every expert's span size, and per drive folder its bandwidth and
// the bytes it may hold.
struct PlanInput {
  struct Expert {
    int layer = 0, expert = 0;
    uint64_t nbytes = 0;
    // The expert's position among all the model's experts, which rotates its stripe: a plan over
    // a subset (a streaming install's local experts) then cuts each expert as the whole model's
    // plan would, so a later plan over more of them keeps the pieces already written. -1: its
    // position in `experts`.
    int64_t ordinal = -1;
  };
  std::vector<Expert> experts;
  std::vector<double> gbps;            // per drive folder, > 0
  std::vector<uint64_t> budget_bytes;  // per drive folder
  std::vector<std::string> names;      // per drive folder, for messages (may be empty)
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

// One expert of `nbytes` split over the folders in proportion to gbps: cumulative boundaries
// rounded to kPieceAlignment blocks, so each piece is within a block of its share; folders whose
// share rounds to nothing get no piece. `rotate` shifts which folder comes first in the span, so
// that the rounding (and the short last piece) falls on each folder in turn across experts.
std::vector<StripePiece> stripe_pieces(uint64_t nbytes, const std::vector<double>& gbps,
                                       size_t rotate);
// Every expert striped over all the folders (stripe_pieces, rotated by the expert's ordinal).
// `in.uses` must be empty: replicas are a whole-layout feature. Throws base::Error naming the
// folder when its pieces do not fit its budget (a stripe cannot move bytes elsewhere without
// unbalancing every read).
std::vector<std::vector<PlacedExpert>> plan_stripes(const PlanInput& in);

// Uses per (layer, expert) in a --trace-routes file. Throws base::Error naming the file and line.
std::map<std::pair<int, int>, uint64_t> count_routes(const std::string& path);

}  // namespace deltafin::experts
