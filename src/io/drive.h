// Drives as objects: each block device the process reads from (found by st_dev), its name and
// identity from /sys/dev/block, its read ceiling and latency, the bytes queued on it, and its
// bandwidth learned from completions over windows. DriveTable picks, among the drives holding a
// copy, the one expected to finish a read first.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace deltafin::io {

// What /sys says about the device a file lives on.
struct DriveIdentity {
  uint64_t dev = 0;  // st_dev
  std::string name;  // "nvme0n1p2", "loop3"; "dev 0:45" when /sys has no block device for it
  std::string key;   // stable across boots where /sys allows: name, size, serial or backing file
};

// The device `path` (a file or a directory) lives on. Throws base::Error naming the path when it
// cannot be stat'ed.
DriveIdentity identify_drive(const std::string& path);
DriveIdentity identify_device(uint64_t dev);

// A drive's measured figures, cached per DriveIdentity::key.
struct DriveCeiling {
  double gbps = 0;        // GB = 1e9 bytes
  double latency_ms = 0;  // per-request overhead beyond bytes / ceiling
};

// The cache file: DELTAFIN_DRIVE_CACHE, else $XDG_CACHE_HOME/deltafin/drives.tsv, else
// ~/.cache/deltafin/drives.tsv. Lines: key TAB gbps TAB latency_ms.
std::string drive_cache_path();
std::optional<DriveCeiling> cached_ceiling(const std::string& key);
// Replaces the key's line, atomically (tmp + rename). Failures to write are logged, not thrown:
// the cache only saves a measurement.
void store_ceiling(const std::string& key, const DriveCeiling& ceiling);
// Measures the drive holding `dir` with a scratch file written there (size_bytes, deleted after),
// O_DIRECT reads of K3-expert size at depths 1 and 4.
DriveCeiling measure_drive(const std::string& dir, uint64_t size_bytes = uint64_t{512} << 20);
// Measures the drive behind an existing file of at least two reads (no scratch file), for
// about `seconds` at depth 4 (the ceiling) plus the same bytes at depth 1 (the latency).
DriveCeiling measure_file_ceiling(const std::string& path, double seconds = 3.0);
// The cached figures, or a fresh measurement (stored) when there are none or `remeasure`.
DriveCeiling drive_ceiling(const std::string& dir, bool remeasure);
// The same with `file` (on that drive) measured instead of a scratch file.
DriveCeiling drive_ceiling_of_file(const std::string& file, bool remeasure);

// Cumulative per-drive figures.
struct DriveStats {
  std::string name;
  uint64_t bytes = 0;         // completed
  uint64_t reads = 0;         // requests completed
  uint64_t errors = 0;        // requests that failed
  double busy_seconds = 0;    // time with at least one request in flight
  double ceiling_gbps = 0;    // cached/measured; 0 when unknown
  double bandwidth_gbps = 0;  // the current estimate dispatch uses
  double achieved_gbps() const { return busy_seconds > 0 ? bytes / busy_seconds / 1e9 : 0; }
  double share_of_ceiling() const { return ceiling_gbps > 0 ? achieved_gbps() / ceiling_gbps : 0; }
};

class DriveTable {
 public:
  // Seconds on some monotonic clock; tests pass a fake one.
  using Clock = std::function<double()>;
  static constexpr double kWindowSeconds = 0.3;  // of busy time per bandwidth sample
  static constexpr double kDefaultGbps = 1.0;    // before anything is known
  static constexpr double kDefaultLatencyMs = 0.2;

  explicit DriveTable(Clock clock = {});

  // The drive index for a device, registering it (named, ceiling from the cache) on first sight.
  int drive_of_device(uint64_t dev);
  int drive_of_path(const std::string& path);  // throws base::Error naming an unreadable path
  int drive_of_fd(int fd);                     // -1 when fstat fails
  // A drive that is not a device (tests): fixed figures, no /sys lookup.
  int add_drive(std::string name, const DriveCeiling& ceiling);
  int size() const;

  // The holder with the least expected completion, (queued + bytes) / bandwidth + latency; ties
  // go to the earlier holder in the list. Holders marked failed are skipped; -1 when none is left.
  int pick(const std::vector<int>& holders, uint64_t bytes) const;
  double expected_seconds(int drive, uint64_t bytes) const;

  // Accounting from the read path: a request queued/issued (counts in queued bytes until it
  // completes), then completed with the bytes it placed. Busy time runs while a drive has a
  // request issued.
  void on_queued(int drive, uint64_t bytes);
  void on_issued(int drive);
  void on_completed(int drive, uint64_t queued_bytes, uint64_t bytes_read, bool ok);
  // Queued bytes that will never be issued (a cancel, a failed job's remaining pieces).
  void on_dropped(int drive, uint64_t bytes);
  // A drive reported unusable (missing files, errors): pick() avoids it from now on. True the
  // first time, so the caller reports it once.
  bool mark_failed(int drive);
  bool failed(int drive) const;

  uint64_t queued_bytes(int drive) const;
  int in_flight(int drive) const;
  std::vector<DriveStats> stats() const;
  DriveStats stats(int drive) const;

 private:
  struct Drive {
    DriveIdentity id;
    DriveCeiling ceiling;       // gbps 0: unknown
    double bandwidth_gbps = 0;  // learned; starts at the ceiling
    uint64_t queued = 0;        // bytes queued or in flight
    int in_flight = 0;
    bool failed = false;
    double busy_since = 0;   // valid while in_flight > 0
    double window_busy = 0;  // busy seconds and bytes of the window being filled
    uint64_t window_bytes = 0;
    DriveStats stats;
  };
  int add(Drive d);  // caller holds mu_
  double now() const { return clock_(); }
  double eta(const Drive& d, uint64_t bytes) const;

  Clock clock_;
  mutable std::mutex mu_;
  std::vector<Drive> drives_;
};

}  // namespace deltafin::io
