// Memory budget: cgroup limits (v2 memory.max, v1 memory.limit_in_bytes, walked up through the
// ancestors because a parent's limit binds too), /proc/meminfo, size parsing, RSS readers.
#include "base/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/log.h"

namespace deltafin::base {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
// cgroup v1 writes "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712); anything this large
// is not a real limit.
constexpr uint64_t kNoLimit = uint64_t{1} << 60;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The value of a "Key:   1234 kB" line, in bytes (kB is KiB in procfs); 0 when absent.
uint64_t proc_kib_field(const std::string& text, std::string_view key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':') {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

struct CgroupMount {
  std::string mount_point;
  std::string root;  // the cgroup path the mount shows as its top (not "/" in a namespace)
};

// Finds the cgroup2 mount and the v1 mount that carries the memory controller.
void find_cgroup_mounts(const std::string& mountinfo, CgroupMount* v2, CgroupMount* v1) {
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    // "36 25 0:32 / /sys/fs/cgroup/memory rw,relatime shared:15 - cgroup cgroup rw,memory"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, dev, root, mount_point, fstype, source, super_options;
    head >> id >> parent >> dev >> root >> mount_point;
    tail >> fstype >> source >> super_options;
    if (fstype == "cgroup2" && v2->mount_point.empty()) {
      *v2 = {mount_point, root};
    } else if (fstype == "cgroup" && v1->mount_point.empty()) {
      std::istringstream opts(super_options);
      std::string opt;
      while (std::getline(opts, opt, ',')) {
        if (opt == "memory") *v1 = {mount_point, root};
      }
    }
  }
}

// Our cgroup path for the v2 hierarchy ("0::/path") or the v1 memory controller.
std::string cgroup_path(const std::string& proc_cgroup, bool v2) {
  std::istringstream in(proc_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    if (v2 ? (line.compare(0, c1, "0") == 0 && controllers.empty())
           : ("," + controllers + ",").find(",memory,") != std::string::npos) {
      return line.substr(c2 + 1);
    }
  }
  return {};
}

// The smallest limit in `file` from our cgroup up to the top of the mount (0: none).
uint64_t walk_limits(const std::string& fs_root, const CgroupMount& mount, std::string path,
                     const char* file, std::string* source) {
  if (mount.mount_point.empty()) return 0;
  // Inside a cgroup namespace the mount's top is not "/": express our path relative to it.
  if (mount.root != "/" && path.rfind(mount.root, 0) == 0) path = path.substr(mount.root.size());
  if (path.empty() || path[0] != '/') path = "/" + path;
  uint64_t best = 0;
  for (;;) {
    const std::string dir = fs_root + mount.mount_point + (path == "/" ? "" : path);
    const std::string text = read_text(dir + "/" + file);
    if (!text.empty() && text.rfind("max", 0) != 0) {
      const uint64_t limit = std::strtoull(text.c_str(), nullptr, 10);
      if (limit > 0 && limit < kNoLimit && (best == 0 || limit < best)) {
        best = limit;
        *source = dir.substr(fs_root.size()) + "/" + file;
      }
    }
    if (path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

MemorySnapshot read_memory_snapshot(const std::string& fs_root) {
  MemorySnapshot s;
  const std::string meminfo = read_text(fs_root + "/proc/meminfo");
  s.mem_total_bytes = proc_kib_field(meminfo, "MemTotal");
  s.mem_available_bytes = proc_kib_field(meminfo, "MemAvailable");
  s.rss_bytes = proc_kib_field(read_text(fs_root + "/proc/self/status"), "VmRSS");

  CgroupMount v2, v1;
  find_cgroup_mounts(read_text(fs_root + "/proc/self/mountinfo"), &v2, &v1);
  const std::string proc_cgroup = read_text(fs_root + "/proc/self/cgroup");
  std::string v2_source, v1_source;
  const uint64_t v2_limit =
      walk_limits(fs_root, v2, cgroup_path(proc_cgroup, true), "memory.max", &v2_source);
  const uint64_t v1_limit = walk_limits(fs_root, v1, cgroup_path(proc_cgroup, false),
                                        "memory.limit_in_bytes", &v1_source);
  if (v2_limit != 0 && (v1_limit == 0 || v2_limit <= v1_limit)) {
    s.cgroup_limit_bytes = v2_limit;
    s.cgroup_source = "cgroup v2 " + v2_source;
  } else if (v1_limit != 0) {
    s.cgroup_limit_bytes = v1_limit;
    s.cgroup_source = "cgroup v1 " + v1_source;
  }
  return s;
}

MemoryBudget compute_memory_budget(const MemorySnapshot& s) {
  MemoryBudget b;
  // Memory this process already holds is ours to keep using, so it counts as available.
  b.limit_bytes = s.mem_available_bytes + s.rss_bytes;
  b.source = "MemAvailable + RSS";
  if (s.cgroup_limit_bytes != 0 && s.cgroup_limit_bytes < b.limit_bytes) {
    b.limit_bytes = s.cgroup_limit_bytes;
    b.source = s.cgroup_source;
  }
  b.reserve_bytes = std::max(kGiB, b.limit_bytes / 20);
  b.budget_bytes = b.limit_bytes > b.reserve_bytes ? b.limit_bytes - b.reserve_bytes : 0;
  return b;
}

MemoryBudget memory_budget(std::string_view override_spec) {
  MemoryBudget computed = compute_memory_budget(read_memory_snapshot());
  if (override_spec.empty()) return computed;
  const uint64_t bytes = parse_byte_size(override_spec);
  if (bytes == 0) fail("--memory-budget must be larger than zero, got '", override_spec, "'");
  if (bytes > computed.limit_bytes) {
    log_warn("--memory-budget ", format_bytes(bytes), " exceeds what is available (",
             format_bytes(computed.limit_bytes), " from ", computed.source, ")");
  }
  MemoryBudget b;
  b.budget_bytes = bytes;
  b.limit_bytes = computed.limit_bytes;
  b.overridden = true;
  b.source = "--memory-budget";
  return b;
}

std::string MemoryBudget::describe() const {
  if (overridden) {
    return str_cat("memory budget ", format_bytes(budget_bytes), " (", source, "; ",
                   format_bytes(limit_bytes), " available)");
  }
  return str_cat("memory budget ", format_bytes(budget_bytes), " (", format_bytes(limit_bytes),
                 " from ", source, " minus a ", format_bytes(reserve_bytes), " reserve)");
}

uint64_t parse_byte_size(std::string_view text) {
  const std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i);
  std::string unit = s.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  double scale = -1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else {
    const std::string prefixes = "KMGT";
    const size_t p = prefixes.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (p != std::string::npos && (rest.empty() || rest == "B" || rest == "IB")) {
      scale = std::ldexp(1.0, 10 * static_cast<int>(p + 1));
    }
  }
  if (value < 0 || end == nullptr || *end != '\0' || scale < 0) {
    fail("'", text, "' is not a size: expected a number with an optional K, M, G or T suffix, ",
         "like 24G, 512M or 1.5G");
  }
  const double bytes = std::round(value * scale);
  if (bytes >= 0x1p63) fail("size '", text, "' is too large");
  return static_cast<uint64_t>(bytes);
}

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

uint64_t current_rss_bytes() { return proc_kib_field(read_text("/proc/self/status"), "VmRSS"); }
uint64_t peak_rss_bytes() { return proc_kib_field(read_text("/proc/self/status"), "VmHWM"); }

}  // namespace deltafin::base
