// placement.json, whole layout: {"version":1,"drives":[DIR...],"experts":[[layer,expert,nbytes,
// [holder...]]...]}; stripe: {"version":2,"layout":"stripe","drives":[...],"experts":[[layer,
// expert,nbytes,[[dir,piece bytes]...]]...]}, pieces in span order (offsets follow). Arrays, not
// objects: K3 has 82k experts (330k pieces over four drives) and the file is read at every start.
#include "experts/placement.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/memory_budget.h"

namespace deltafin::experts {

std::string placement_path(const std::string& model_dir) {
  return model_dir + "/" + kPlacementFile;
}

std::string placed_file(const std::string& dir, int layer, int expert) {
  char name[48];
  std::snprintf(name, sizeof name, "/L%03d-E%04d.bin", layer, expert);
  return dir + name;
}

const char* layout_name(Layout layout) { return layout == Layout::kStripe ? "stripe" : "whole"; }

std::string piece_file(const std::string& dir, int layer, int expert, uint64_t offset) {
  char name[64];
  std::snprintf(name, sizeof name, "/L%03d-E%04d-at%llu.bin", layer, expert,
                static_cast<unsigned long long>(offset));
  return dir + name;
}

namespace {

// A stripe entry's pieces, [[dir, bytes]...] in span order, checked: every folder known, every
// piece but the last a multiple of kPieceAlignment, the lengths adding up to the span.
std::vector<StripePiece> parse_pieces(const std::string& path, const nlohmann::json& list,
                                      int layer, int expert, uint64_t nbytes, size_t n_dirs) {
  std::vector<StripePiece> pieces;
  const auto bad = [&](size_t i, auto&&... why) {
    base::fail(path, ": field experts: layer ", layer, " expert ", expert, ": piece ", i, ": ",
               why...);
  };
  uint64_t at = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& p = list.at(i);
    if (!p.is_array() || p.size() != 2) bad(i, "expected [drive, bytes], got ", p.dump());
    StripePiece piece{p.at(0).get<int>(), at, p.at(1).get<uint64_t>()};
    if (piece.dir < 0 || static_cast<size_t>(piece.dir) >= n_dirs)
      bad(i, "drive ", piece.dir, " is not one of the ", n_dirs, " drives");
    if (piece.nbytes == 0) bad(i, "has no bytes");
    if (i + 1 < list.size() && piece.nbytes % kPieceAlignment != 0)
      bad(i, piece.nbytes, " bytes is not a multiple of ", kPieceAlignment,
          " (only the last piece may be)");
    at += piece.nbytes;
    pieces.push_back(piece);
  }
  if (pieces.empty())
    base::fail(path, ": field experts: layer ", layer, " expert ", expert, ": no pieces");
  if (at != nbytes)
    base::fail(path, ": field experts: layer ", layer, " expert ", expert, ": pieces add up to ",
               at, " bytes, the span has ", nbytes);
  return pieces;
}

}  // namespace

std::shared_ptr<const Placement> load_placement(const std::string& model_dir) {
  const std::string path = placement_path(model_dir);
  std::ifstream in(path);
  if (!in) return nullptr;
  std::stringstream text;
  text << in.rdbuf();
  auto p = std::make_shared<Placement>();
  p->manifest_path = path;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const std::exception& e) {
    base::fail(path, ": invalid JSON: ", e.what());
  }
  try {
    const int version = j.at("version").get<int>();
    if (version == 2) {
      const std::string layout = j.at("layout").get<std::string>();
      if (layout == "stripe") {
        p->layout = Layout::kStripe;
      } else if (layout != "whole") {
        base::fail(path, ": field layout: expected \"whole\" or \"stripe\", got \"", layout, "\"");
      }
    } else if (version != 1) {  // 1: the whole layout, written before striping existed
      base::fail(path, ": field version: expected 1 or 2, got ", j.at("version").dump());
    }
    for (const auto& d : j.at("drives")) p->dirs.push_back(d.get<std::string>());
    for (const auto& e : j.at("experts")) {
      const int layer = e.at(0).get<int>(), expert = e.at(1).get<int>();
      if (layer < 0 || expert < 0 || layer > 100000 || expert > 1000000)
        base::fail(path, ": field experts: layer ", layer, " expert ", expert, " out of range");
      if (p->layers.size() <= static_cast<size_t>(layer)) p->layers.resize(layer + 1);
      std::vector<PlacedExpert>& l = p->layers[layer];
      if (l.size() <= static_cast<size_t>(expert)) l.resize(expert + 1);
      PlacedExpert& pe = l[expert];
      pe.nbytes = e.at(2).get<uint64_t>();
      if (p->layout == Layout::kStripe) {
        pe.pieces = parse_pieces(path, e.at(3), layer, expert, pe.nbytes, p->dirs.size());
        continue;
      }
      for (const auto& h : e.at(3)) {
        const int hi = h.get<int>();
        if (hi < 0 || static_cast<size_t>(hi) >= p->dirs.size())
          base::fail(path, ": field experts: layer ", layer, " expert ", expert, ": holder ", hi,
                     " is not one of the ", p->dirs.size(), " drives");
        pe.holders.push_back(hi);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    base::fail(path,
               ": expected {\"version\":1,\"drives\":[...],\"experts\":[[layer,expert,"
               "bytes,[holders]]...]} or {\"version\":2,\"layout\":\"stripe\",...,"
               "\"experts\":[[layer,expert,bytes,[[drive,bytes]...]]...]}: ",
               e.what());
  }
  return p;
}

void write_placement(const std::string& model_dir, const Placement& placement) {
  const std::string path = placement_path(model_dir);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    const bool stripe = placement.layout == Layout::kStripe;
    out << (stripe ? "{\"version\":2,\"layout\":\"stripe\"" : "{\"version\":1")
        << ",\"drives\":" << nlohmann::json(placement.dirs).dump() << ",\"experts\":[";
    bool first = true;
    for (size_t l = 0; l < placement.layers.size(); ++l) {
      for (size_t e = 0; e < placement.layers[l].size(); ++e) {
        const PlacedExpert& pe = placement.layers[l][e];
        if (stripe ? pe.pieces.empty() : pe.holders.empty()) continue;
        out << (first ? "\n" : ",\n") << "[" << l << "," << e << "," << pe.nbytes << ",";
        if (stripe) {
          out << "[";
          for (size_t i = 0; i < pe.pieces.size(); ++i)
            out << (i ? ",[" : "[") << pe.pieces[i].dir << "," << pe.pieces[i].nbytes << "]";
          out << "]]";
        } else {
          out << nlohmann::json(pe.holders).dump() << "]";
        }
        first = false;
      }
    }
    out << "]}\n";
    if (!out) base::fail(path, ": cannot write ", tmp);
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    base::fail(path, ": cannot publish: ", std::strerror(errno));
}

uint64_t placed_bytes(uint64_t nbytes) { return (nbytes + 4095) / 4096 * 4096; }

std::vector<std::vector<PlacedExpert>> plan_placement(const PlanInput& in) {
  const size_t n = in.gbps.size();
  DF_ASSERT(n > 0 && in.budget_bytes.size() == n);
  std::vector<uint64_t> assigned(n, 0);
  std::vector<std::vector<PlacedExpert>> layers;
  // The folder with room whose share finishes first with this file added, among `allowed`.
  auto best = [&](uint64_t bytes, const std::vector<int>& exclude) {
    int b = -1;
    double b_eta = 0;
    for (size_t d = 0; d < n; ++d) {
      if (std::find(exclude.begin(), exclude.end(), static_cast<int>(d)) != exclude.end()) continue;
      if (assigned[d] + bytes > in.budget_bytes[d]) continue;
      const double eta = (assigned[d] + bytes) / in.gbps[d];
      if (b < 0 || eta < b_eta) {
        b = static_cast<int>(d);
        b_eta = eta;
      }
    }
    return b;
  };
  uint64_t needed = 0, budget = 0;
  for (const PlanInput::Expert& e : in.experts) needed += placed_bytes(e.nbytes);
  for (uint64_t b : in.budget_bytes) budget += b;
  for (const PlanInput::Expert& e : in.experts) {
    if (layers.size() <= static_cast<size_t>(e.layer)) layers.resize(e.layer + 1);
    if (layers[e.layer].size() <= static_cast<size_t>(e.expert))
      layers[e.layer].resize(e.expert + 1);
    const uint64_t bytes = placed_bytes(e.nbytes);
    const int d = best(bytes, {});
    if (d < 0)
      base::fail("place: one copy of every expert needs ", base::format_bytes(needed),
                 "; the drives hold ", base::format_bytes(budget),
                 " (--budget-per-drive, or free space)");
    assigned[d] += bytes;
    layers[e.layer][e.expert] = {e.nbytes, {d}};
  }
  // Most used first; ties in (layer, expert) order so the plan is reproducible.
  std::vector<std::pair<std::pair<int, int>, uint64_t>> hot(in.uses.begin(), in.uses.end());
  std::stable_sort(hot.begin(), hot.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [key, uses] : hot) {
    const auto [layer, expert] = key;
    if (uses == 0 || static_cast<size_t>(layer) >= layers.size() ||
        static_cast<size_t>(expert) >= layers[layer].size())
      continue;
    PlacedExpert& pe = layers[layer][expert];
    if (pe.holders.empty()) continue;
    const int d = best(placed_bytes(pe.nbytes), pe.holders);
    if (d < 0) continue;
    assigned[d] += placed_bytes(pe.nbytes);
    pe.holders.push_back(d);
  }
  return layers;
}

std::vector<StripePiece> stripe_pieces(uint64_t nbytes, const std::vector<double>& gbps,
                                       size_t rotate) {
  const size_t n = gbps.size();
  DF_ASSERT(n > 0 && nbytes > 0);
  double total = 0;
  for (double g : gbps) total += g;
  const uint64_t blocks = (nbytes + kPieceAlignment - 1) / kPieceAlignment;
  std::vector<StripePiece> pieces;
  double cum = 0;
  uint64_t prev = 0;  // blocks assigned so far
  for (size_t k = 0; k < n; ++k) {
    const int d = static_cast<int>((k + rotate) % n);
    cum += gbps[d];
    // Cumulative boundaries: each piece is within one block of its share, and the rounding
    // never adds up along the span.
    uint64_t b = k + 1 == n ? blocks : static_cast<uint64_t>(std::llround(blocks * cum / total));
    b = std::clamp(b, prev, blocks);
    if (b == prev) continue;
    const uint64_t begin = prev * kPieceAlignment;
    pieces.push_back({d, begin, std::min(b * kPieceAlignment, nbytes) - begin});
    prev = b;
  }
  return pieces;
}

std::vector<std::vector<PlacedExpert>> plan_stripes(const PlanInput& in) {
  const size_t n = in.gbps.size();
  DF_ASSERT(n > 0 && in.budget_bytes.size() == n && in.uses.empty());
  std::vector<uint64_t> assigned(n, 0);
  std::vector<std::vector<PlacedExpert>> layers;
  for (size_t i = 0; i < in.experts.size(); ++i) {
    const PlanInput::Expert& e = in.experts[i];
    if (layers.size() <= static_cast<size_t>(e.layer)) layers.resize(e.layer + 1);
    if (layers[e.layer].size() <= static_cast<size_t>(e.expert))
      layers[e.layer].resize(e.expert + 1);
    PlacedExpert& pe = layers[e.layer][e.expert];
    pe.nbytes = e.nbytes;
    pe.pieces =
        stripe_pieces(e.nbytes, in.gbps, e.ordinal >= 0 ? static_cast<size_t>(e.ordinal) : i);
    for (const StripePiece& p : pe.pieces) assigned[p.dir] += placed_bytes(p.nbytes);
  }
  for (size_t d = 0; d < n; ++d) {
    if (assigned[d] <= in.budget_bytes[d]) continue;
    const std::string name =
        d < in.names.size() ? in.names[d] : base::str_cat("drive folder ", d + 1);
    base::fail("place: the stripe layout puts ", base::format_bytes(assigned[d]), " on ", name,
               " (its share of the bandwidth); it holds ", base::format_bytes(in.budget_bytes[d]),
               " (--budget-per-drive, or free space)");
  }
  return layers;
}

std::map<std::pair<int, int>, uint64_t> count_routes(const std::string& path) {
  std::ifstream in(path);
  if (!in) base::fail("--from-trace ", path, ": cannot open: ", std::strerror(errno));
  std::map<std::pair<int, int>, uint64_t> uses;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      const int layer = j.at("layer").get<int>();
      for (const auto& e : j.at("experts")) ++uses[{layer, e.get<int>()}];
    } catch (const std::exception& e) {
      base::fail("--from-trace ", path, ":", number,
                 ": expected a --trace-routes line {\"layer\":L,\"experts\":[...]}: ", e.what());
    }
  }
  return uses;
}

}  // namespace deltafin::experts
