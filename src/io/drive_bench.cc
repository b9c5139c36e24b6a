// bench_drives: one scheduler per run (fresh figures), a window of reads kept outstanding; each
// new read's drive is chosen when it is submitted, so least-ETA sees the queues as they are.
#include "io/drive_bench.h"

#include <condition_variable>
#include <mutex>
#include <random>

#include "base/error.h"
#include "base/stopwatch.h"
#include "io/huge_buffer.h"
#include "io/read_scheduler.h"

namespace deltafin::io {

const char* dispatch_policy_name(DispatchPolicy p) {
  return p == DispatchPolicy::kLeastEta ? "least_eta" : "round_robin";
}

namespace {

DriveBenchRun run_once(const std::vector<DirectFile>& files, const std::vector<std::string>& names,
                       const std::vector<DriveCeiling>& ceilings, const DriveBenchOptions& o,
                       DispatchPolicy policy, std::mt19937_64& rng) {
  const int n = static_cast<int>(files.size());
  ReadScheduler sched(o.depth, QueueKind::kAuto, n);
  std::vector<int> all;
  for (int d = 0; d < n; ++d) all.push_back(sched.drives().add_drive(names[d], ceilings[d]));
  const size_t length = (o.read_bytes + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
  HugeBuffer buf(length * static_cast<size_t>(o.window));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> free_slots;
  for (int i = 0; i < o.window; ++i) free_slots.push_back(i);
  int done = 0;
  std::string error;
  const base::Stopwatch wall;
  for (int i = 0; i < o.reads; ++i) {
    int slot;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !free_slots.empty(); });
      slot = free_slots.back();
      free_slots.pop_back();
    }
    const int d = policy == DispatchPolicy::kRoundRobin ? i % n : sched.drives().pick(all, length);
    const DirectFile& f = files[d];
    const uint64_t positions = (f.size_bytes() - length) / kDirectAlignment + 1;
    ReadJob job;
    job.file = &f;
    job.offset = std::uniform_int_distribution<uint64_t>(0, positions - 1)(rng) * kDirectAlignment;
    job.length = length;
    job.dest = buf.data() + static_cast<size_t>(slot) * length;
    job.drive = d;
    job.done = [&, slot](const ReadCompletion& c) {
      std::lock_guard<std::mutex> lock(mu);
      if (!c.ok() && error.empty()) error = c.message;
      free_slots.push_back(slot);
      ++done;
      cv.notify_all();
    };
    sched.submit(std::move(job));
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == o.reads; });
  }
  DriveBenchRun r;
  r.policy = policy;
  r.seconds = wall.elapsed_seconds();
  r.drives = sched.drives().stats();
  uint64_t bytes = 0;
  for (const DriveStats& s : r.drives) bytes += s.bytes;
  r.gbps = r.seconds > 0 ? bytes / r.seconds / 1e9 : 0;
  if (!error.empty()) base::fail("bench-io --dirs: ", error);
  return r;
}

}  // namespace

DriveBenchReport bench_drives(const std::vector<std::string>& paths,
                              const std::vector<std::string>& names,
                              const std::vector<DriveCeiling>& ceilings,
                              const DriveBenchOptions& options) {
  DF_ASSERT(!paths.empty() && names.size() == paths.size() && ceilings.size() == paths.size());
  DriveBenchReport report;
  report.files = paths;
  report.names = names;
  report.ceilings = ceilings;
  std::vector<DirectFile> files;
  for (const std::string& p : paths) {
    files.push_back(DirectFile::open(p));
    if (files.back().size_bytes() < options.read_bytes + kDirectAlignment)
      base::fail("bench-io --dirs: ", p, " is smaller than one read (", options.read_bytes,
                 " bytes)");
  }
  for (const DriveCeiling& c : ceilings) report.sum_ceiling_gbps += c.gbps;
  std::mt19937_64 rng(options.seed);
  for (int rep = 0; rep < options.repetitions; ++rep) {
    for (DispatchPolicy p : {DispatchPolicy::kLeastEta, DispatchPolicy::kRoundRobin})
      report.runs.push_back(run_once(files, names, ceilings, options, p, rng));
  }
  return report;
}

}  // namespace deltafin::io
