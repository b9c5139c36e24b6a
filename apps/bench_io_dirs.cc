// `deltafin bench-io --dirs D1,D2,...`: one test file per drive folder, each drive's ceiling
// (cached per drive, --remeasure), then least-expected-completion against round robin in the same
// run, interleaved; per drive: bytes, busy time, achieved GB/s and share of its ceiling.
#include "bench_io_dirs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/log.h"
#include "bench_common.h"
#include "io/drive.h"
#include "io/drive_bench.h"

namespace deltafin::apps {

int run_bench_io_dirs(const DirsBenchArgs& a) {
  std::vector<std::string> files, names;
  std::vector<io::DriveCeiling> ceilings;
  auto cleanup = [&] {
    if (!a.keep)
      for (const std::string& f : files) ::unlink(f.c_str());
  };
  try {
    for (const std::string& dir : a.dirs) {
      struct stat st {};
      if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        base::fail("deltafin bench-io: --dirs ", dir, " is not a directory");
      const std::string f = dir + "/deltafin-bench-io.bin";
      const uint64_t want = a.size_bytes / io::kDirectAlignment * io::kDirectAlignment;
      struct stat fs {};
      if (!(a.keep && ::stat(f.c_str(), &fs) == 0 && static_cast<uint64_t>(fs.st_size) == want)) {
        base::log_info("bench-io: writing ", want / 1e9, " GB to ", f);
        io::write_bench_file(f, a.size_bytes);
      }
      files.push_back(f);
      names.push_back(io::identify_drive(f).name);
      ceilings.push_back(io::drive_ceiling_of_file(f, a.remeasure));
      if (a.ceiling_override.size() == a.dirs.size())
        ceilings.back().gbps = a.ceiling_override[files.size() - 1];
    }
    const io::DriveBenchReport r = io::bench_drives(files, names, ceilings, a.options);
    cleanup();
    nlohmann::ordered_json out;
    out["dirs"] = a.dirs;
    nlohmann::ordered_json drives = nlohmann::ordered_json::array();
    for (size_t d = 0; d < files.size(); ++d)
      drives.push_back({{"dir", a.dirs[d]},
                        {"device", names[d]},
                        {"ceiling_gbps", ceilings[d].gbps},
                        {"latency_ms", ceilings[d].latency_ms}});
    out["drives"] = drives;
    out["read_bytes"] = a.options.read_bytes;
    out["reads_per_run"] = a.options.reads;
    out["window"] = a.options.window;
    out["depth_per_drive"] = a.options.depth;
    out["sum_ceiling_gbps"] = r.sum_ceiling_gbps;
    double medians[2] = {};
    for (io::DispatchPolicy p : {io::DispatchPolicy::kLeastEta, io::DispatchPolicy::kRoundRobin}) {
      std::vector<double> gbps;
      std::vector<const io::DriveBenchRun*> runs;
      for (const io::DriveBenchRun& run : r.runs)
        if (run.policy == p) {
          gbps.push_back(run.gbps);
          runs.push_back(&run);
        }
      const double med = median(gbps);
      medians[p == io::DispatchPolicy::kLeastEta ? 0 : 1] = med;
      // Per drive figures of the run closest to the median.
      const io::DriveBenchRun* mid = runs[0];
      for (const io::DriveBenchRun* run : runs)
        if (std::abs(run->gbps - med) < std::abs(mid->gbps - med)) mid = run;
      nlohmann::ordered_json per = nlohmann::ordered_json::array();
      for (size_t d = 0; d < mid->drives.size(); ++d) {
        const io::DriveStats& s = mid->drives[d];
        per.push_back({{"device", s.name},
                       {"bytes", s.bytes},
                       {"reads", s.reads},
                       {"busy_seconds", s.busy_seconds},
                       {"achieved_gbps", s.achieved_gbps()},
                       {"share_of_ceiling", s.share_of_ceiling()},
                       {"learned_gbps", s.bandwidth_gbps}});
      }
      out[io::dispatch_policy_name(p)] = {
          {"gbps", gbps},
          {"min_gbps", *std::min_element(gbps.begin(), gbps.end())},
          {"median_gbps", med},
          {"max_gbps", *std::max_element(gbps.begin(), gbps.end())},
          {"share_of_sum_of_ceilings", r.sum_ceiling_gbps > 0 ? med / r.sum_ceiling_gbps : 0.0},
          {"per_drive", per}};
    }
    out["least_eta_over_round_robin"] = medians[1] > 0 ? medians[0] / medians[1] : 0.0;
    if (a.json) {
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("%s\n", out.dump(2).c_str());
    }
  } catch (...) {
    cleanup();
    throw;
  }
  return 0;
}

}  // namespace deltafin::apps
