// placement.json: {"version":1,"drives":[DIR...],"experts":[[layer,expert,nbytes,[holder...]]...]}
// (arrays, not objects: K3 has 82k experts and the file is read at every start).
#include "experts/placement.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
    if (j.at("version").get<int>() != 1)
      base::fail(path, ": field version: expected 1, got ", j.at("version").dump());
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
               "bytes,[holders]]...]}: ",
               e.what());
  }
  return p;
}

void write_placement(const std::string& model_dir, const Placement& placement) {
  const std::string path = placement_path(model_dir);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"version\":1,\"drives\":" << nlohmann::json(placement.dirs).dump()
        << ",\"experts\":[";
    bool first = true;
    for (size_t l = 0; l < placement.layers.size(); ++l) {
      for (size_t e = 0; e < placement.layers[l].size(); ++e) {
        const PlacedExpert& pe = placement.layers[l][e];
        if (pe.holders.empty()) continue;
        out << (first ? "\n" : ",\n") << "[" << l << "," << e << "," << pe.nbytes << ","
            << nlohmann::json(pe.holders).dump() << "]";
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
