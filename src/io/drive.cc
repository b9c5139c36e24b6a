// Drive identity from /sys, the ceiling cache file, the drive measurement, and DriveTable's
// bookkeeping: queued bytes, busy time, and bandwidth over windows of busy time (single reads
// are too noisy to learn from: blk-throttle and NVMe both make them bimodal).
#include "io/drive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/log.h"
#include "io/read_ceiling.h"

namespace deltafin::io {
namespace {

namespace fs = std::filesystem;

std::string read_line(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  if (in) std::getline(in, s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

DriveIdentity identify_device(uint64_t dev) {
  DriveIdentity id;
  id.dev = dev;
  const unsigned maj = major(static_cast<dev_t>(dev)), min = minor(static_cast<dev_t>(dev));
  const std::string mm = base::str_cat(maj, ":", min);
  const fs::path sys = fs::path("/sys/dev/block") / mm;
  std::error_code ec;
  const fs::path real = fs::canonical(sys, ec);
  if (ec) {  // tmpfs, overlay: no block device behind it
    id.name = "dev " + mm;
    id.key = id.name;
    return id;
  }
  id.name = real.filename().string();
  // A partition's serial sits on its parent disk.
  std::string serial = read_line(real / "device/serial");
  if (serial.empty()) serial = read_line(real.parent_path() / "device/serial");
  if (serial.empty()) serial = read_line(real / "wwid");
  if (serial.empty()) serial = read_line(real.parent_path() / "wwid");
  const std::string backing = read_line(real / "loop/backing_file");
  id.key = base::str_cat(id.name, "|", read_line(real / "size"), "|", serial, "|", backing);
  return id;
}

DriveIdentity identify_drive(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    base::fail("drive ", path, ": cannot stat: ", std::strerror(errno));
  return identify_device(st.st_dev);
}

std::string drive_cache_path() {
  if (const char* p = std::getenv("DELTAFIN_DRIVE_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/deltafin/drives.tsv";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/deltafin/drives.tsv";
  return "/tmp/deltafin-drives.tsv";
}

std::optional<DriveCeiling> cached_ceiling(const std::string& key) {
  std::ifstream in(drive_cache_path());
  std::string line;
  while (std::getline(in, line)) {
    const size_t t1 = line.find('\t');
    if (t1 == std::string::npos || line.compare(0, t1, key) != 0 || t1 != key.size()) continue;
    std::istringstream rest(line.substr(t1 + 1));
    DriveCeiling c;
    if (rest >> c.gbps >> c.latency_ms && c.gbps > 0) return c;
  }
  return std::nullopt;
}

void store_ceiling(const std::string& key, const DriveCeiling& ceiling) {
  const std::string path = drive_cache_path();
  std::vector<std::string> lines;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line))
      if (line.compare(0, key.size() + 1, key + "\t") != 0) lines.push_back(line);
  }
  lines.push_back(base::str_cat(key, "\t", ceiling.gbps, "\t", ceiling.latency_ms));
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    for (const std::string& l : lines) out << l << "\n";
    if (!out) {
      base::log_warn("drive cache ", path, ": cannot write; the measurement is not kept");
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) base::log_warn("drive cache ", path, ": ", ec.message());
}

DriveCeiling measure_file_ceiling(const std::string& path, double seconds) {
  CeilingOptions o;
  o.depths = {4};
  o.queues = {QueueKind::kPread};
  o.pages = {PageKind::kHuge};
  o.repetitions = 1;
  // A short probe sizes the real measurement: a fixed byte count would be 36 ms on a 7 GB/s
  // NVMe and all burst allowance on a throttled device (blk-throttle lets the first slice
  // through fast: 533 MB/s measured for a 400 MB/s limit over 256 MB).
  o.bytes_per_repetition = uint64_t{64} << 20;
  const double probe_gbps = measure_read_ceiling({path}, o).ceiling_gbps;
  o.depths = {1, 4};
  o.bytes_per_repetition =
      std::clamp<uint64_t>(static_cast<uint64_t>(probe_gbps * 1e9 * seconds / 2),
                           uint64_t{64} << 20, uint64_t{64} << 30);
  const CeilingReport r = measure_read_ceiling({path}, o);
  DriveCeiling c;
  c.gbps = r.ceiling_gbps;
  // The depth-1 read time beyond what the ceiling's rate explains is the per-request overhead.
  for (const CeilingPoint& p : r.points) {
    if (p.depth == 1 && p.median_gbps > 0 && c.gbps > 0) {
      const double t1 = r.read_bytes / (p.median_gbps * 1e9);
      c.latency_ms = std::max(0.0, (t1 - r.read_bytes / (c.gbps * 1e9)) * 1e3);
    }
  }
  return c;
}

DriveCeiling measure_drive(const std::string& dir, uint64_t size_bytes) {
  const std::string file = base::str_cat(dir, "/.deltafin-drive-probe-", ::getpid());
  write_bench_file(file, size_bytes);
  DriveCeiling c;
  try {
    c = measure_file_ceiling(file);
  } catch (...) {
    ::unlink(file.c_str());
    throw;
  }
  ::unlink(file.c_str());
  return c;
}

DriveCeiling drive_ceiling_of_file(const std::string& file, bool remeasure) {
  const DriveIdentity id = identify_drive(file);
  if (!remeasure) {
    if (std::optional<DriveCeiling> c = cached_ceiling(id.key)) return *c;
  }
  const DriveCeiling c = measure_file_ceiling(file);
  base::log_info("drive ", id.name, ": ", c.gbps, " GB/s, ", c.latency_ms, " ms per request");
  store_ceiling(id.key, c);
  return c;
}

DriveCeiling drive_ceiling(const std::string& dir, bool remeasure) {
  const DriveIdentity id = identify_drive(dir);
  if (!remeasure) {
    if (std::optional<DriveCeiling> c = cached_ceiling(id.key)) return *c;
  }
  base::log_info("drive ", id.name, " (", dir, "): measuring its read ceiling");
  const DriveCeiling c = measure_drive(dir);
  base::log_info("drive ", id.name, ": ", c.gbps, " GB/s, ", c.latency_ms, " ms per request");
  store_ceiling(id.key, c);
  return c;
}

DriveTable::DriveTable(Clock clock) : clock_(clock ? std::move(clock) : Clock(steady_seconds)) {}

int DriveTable::add(Drive d) {
  d.bandwidth_gbps = d.ceiling.gbps > 0 ? d.ceiling.gbps : kDefaultGbps;
  if (d.ceiling.latency_ms <= 0) d.ceiling.latency_ms = kDefaultLatencyMs;
  d.stats.name = d.id.name;
  d.stats.ceiling_gbps = d.ceiling.gbps;
  drives_.push_back(std::move(d));
  return static_cast<int>(drives_.size()) - 1;
}

int DriveTable::drive_of_device(uint64_t dev) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < drives_.size(); ++i)
    if (drives_[i].id.dev == dev) return static_cast<int>(i);
  Drive d;
  d.id = identify_device(dev);
  if (std::optional<DriveCeiling> c = cached_ceiling(d.id.key)) d.ceiling = *c;
  const int i = add(std::move(d));
  const Drive& r = drives_[i];
  if (r.ceiling.gbps > 0) {
    base::log_info("drive ", i, ": ", r.id.name, ", ceiling ", r.ceiling.gbps, " GB/s (cached)");
  } else {
    base::log_info("drive ", i, ": ", r.id.name,
                   ", ceiling not measured yet (`deltafin bench-io --dirs` or `deltafin place` "
                   "measures it); learning it from reads");
  }
  return i;
}

int DriveTable::drive_of_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    base::fail("drive ", path, ": cannot stat: ", std::strerror(errno));
  return drive_of_device(st.st_dev);
}

int DriveTable::drive_of_fd(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -1;
  return drive_of_device(st.st_dev);
}

int DriveTable::add_drive(std::string name, const DriveCeiling& ceiling) {
  std::lock_guard<std::mutex> lock(mu_);
  Drive d;
  d.id.dev = ~uint64_t{0} - drives_.size();  // never a real device
  d.id.name = name;
  d.id.key = std::move(name);
  d.ceiling = ceiling;
  return add(std::move(d));
}

int DriveTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(drives_.size());
}

double DriveTable::eta(const Drive& d, uint64_t bytes) const {
  return static_cast<double>(d.queued + bytes) / (d.bandwidth_gbps * 1e9) +
         d.ceiling.latency_ms / 1e3;
}

double DriveTable::expected_seconds(int drive, uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return eta(drives_.at(drive), bytes);
}

int DriveTable::pick(const std::vector<int>& holders, uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  int best = -1;
  double best_eta = 0;
  for (int h : holders) {
    if (h < 0 || h >= static_cast<int>(drives_.size()) || drives_[h].failed) continue;
    const double e = eta(drives_[h], bytes);
    if (best < 0 || e < best_eta) {
      best = h;
      best_eta = e;
    }
  }
  return best;
}

void DriveTable::on_queued(int drive, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  drives_.at(drive).queued += bytes;
}

void DriveTable::on_issued(int drive) {
  std::lock_guard<std::mutex> lock(mu_);
  Drive& d = drives_.at(drive);
  const double t = now();
  if (d.in_flight > 0) {
    d.window_busy += t - d.busy_since;
    d.stats.busy_seconds += t - d.busy_since;
  }
  d.busy_since = t;
  ++d.in_flight;
}

void DriveTable::on_completed(int drive, uint64_t queued_bytes, uint64_t bytes_read, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  Drive& d = drives_.at(drive);
  const double t = now();
  if (d.in_flight > 0) {
    d.window_busy += t - d.busy_since;
    d.stats.busy_seconds += t - d.busy_since;
    d.busy_since = t;
    --d.in_flight;
  }
  d.queued -= std::min(d.queued, queued_bytes);
  d.stats.bytes += bytes_read;
  ++d.stats.reads;
  if (!ok) ++d.stats.errors;
  d.window_bytes += bytes_read;
  if (d.window_busy >= kWindowSeconds) {
    const double sample = d.window_bytes / d.window_busy / 1e9;
    // Half weight: a drive that slows down (another reader, thermal limits) is followed within
    // a second or two, one noisy window moves the estimate only half way.
    if (sample > 0) d.bandwidth_gbps = 0.5 * d.bandwidth_gbps + 0.5 * sample;
    d.window_busy = 0;
    d.window_bytes = 0;
  }
}

void DriveTable::on_dropped(int drive, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Drive& d = drives_.at(drive);
  d.queued -= std::min(d.queued, bytes);
}

bool DriveTable::mark_failed(int drive) {
  std::lock_guard<std::mutex> lock(mu_);
  Drive& d = drives_.at(drive);
  const bool first = !d.failed;
  d.failed = true;
  return first;
}

bool DriveTable::failed(int drive) const {
  std::lock_guard<std::mutex> lock(mu_);
  return drives_.at(drive).failed;
}

uint64_t DriveTable::queued_bytes(int drive) const {
  std::lock_guard<std::mutex> lock(mu_);
  return drives_.at(drive).queued;
}

int DriveTable::in_flight(int drive) const {
  std::lock_guard<std::mutex> lock(mu_);
  return drives_.at(drive).in_flight;
}

DriveStats DriveTable::stats(int drive) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Drive& d = drives_.at(drive);
  DriveStats s = d.stats;
  if (d.in_flight > 0) s.busy_seconds += now() - d.busy_since;
  s.bandwidth_gbps = d.bandwidth_gbps;
  return s;
}

std::vector<DriveStats> DriveTable::stats() const {
  std::vector<DriveStats> out;
  for (int i = 0; i < size(); ++i) out.push_back(stats(i));
  return out;
}

}  // namespace deltafin::io
