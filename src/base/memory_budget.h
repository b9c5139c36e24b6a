// How much memory deltafin may use: the cgroup limit or what the machine has available, minus a
// reserve for the kernel and everything else, unless --memory-budget says otherwise. Also the
// RSS readers that check the budget is kept.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deltafin::base {

// What the system says, read once. All figures in bytes; 0 where absent.
struct MemorySnapshot {
  uint64_t cgroup_limit_bytes = 0;   // the tightest memory limit on our cgroup and its ancestors
  std::string cgroup_source;         // the file it came from, for the startup message
  uint64_t mem_total_bytes = 0;      // /proc/meminfo MemTotal
  uint64_t mem_available_bytes = 0;  // /proc/meminfo MemAvailable
  uint64_t rss_bytes = 0;            // this process, /proc/self/status VmRSS
};

struct MemoryBudget {
  uint64_t budget_bytes = 0;     // what tiers may fill
  uint64_t limit_bytes = 0;      // the ceiling it was derived from (before the reserve)
  uint64_t reserve_bytes = 0;    // held back for the kernel, page tables, other processes
  bool overridden = false;       // from --memory-budget
  std::string source;            // "cgroup v2 <path>", "MemAvailable + RSS" or "--memory-budget"
  std::string describe() const;  // one line for the startup message
};

// fs_root is prepended to every /proc and /sys path (tests point it at a fake tree).
MemorySnapshot read_memory_snapshot(const std::string& fs_root = "");

// limit = min(cgroup limit, MemAvailable + RSS); reserve = max(1 GiB, 5% of limit);
// budget = limit - reserve (0 when the reserve does not fit).
MemoryBudget compute_memory_budget(const MemorySnapshot& snapshot);

// The process's budget: parse_byte_size(override_spec) when it is not empty, else computed from
// the live snapshot. Throws base::Error for a malformed or zero override.
MemoryBudget memory_budget(std::string_view override_spec = {});

// "24G", "512M", "1.5G", "64GiB", "100000" (bytes). K/M/G/T are binary (1024-based), with an
// optional "B" or "iB". Throws base::Error naming the text when it is not a size.
uint64_t parse_byte_size(std::string_view text);
// "22.4 GiB", "512.0 MiB", "900 B".
std::string format_bytes(uint64_t bytes);

// /proc/self/status VmRSS and VmHWM (peak), in bytes; 0 when unreadable.
uint64_t current_rss_bytes();
uint64_t peak_rss_bytes();

}  // namespace deltafin::base
