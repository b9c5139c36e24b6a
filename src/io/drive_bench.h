// The multi-drive benchmark behind `deltafin bench-io --dirs`: expert-sized O_DIRECT reads, each
// of which any drive could serve (every drive holds a copy), dispatched through one ReadScheduler
// with per-drive queues by least expected completion or by round robin, a window of reads in
// flight the way a K3 layer's experts are; per-drive bytes, busy time and share of ceiling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/drive.h"
#include "io/read_ceiling.h"

namespace deltafin::io {

enum class DispatchPolicy { kLeastEta, kRoundRobin };
const char* dispatch_policy_name(DispatchPolicy p);

struct DriveBenchOptions {
  size_t read_bytes = kK3ExpertSpanBytes;
  int depth = 2;    // per drive
  int window = 16;  // reads outstanding at once (a K3 layer routes 16 experts)
  int reads = 96;   // per run
  int repetitions = 3;
  uint64_t seed = 1;
};

struct DriveBenchRun {
  DispatchPolicy policy = DispatchPolicy::kLeastEta;
  double seconds = 0;
  double gbps = 0;  // all bytes / wall time
  std::vector<DriveStats> drives;
};

struct DriveBenchReport {
  std::vector<std::string> files;  // one per drive
  std::vector<std::string> names;
  std::vector<DriveCeiling> ceilings;
  double sum_ceiling_gbps = 0;
  std::vector<DriveBenchRun> runs;  // repetitions interleaved: eta, rr, eta, rr, ...
};

// Reads `files` (one per drive, each at least read_bytes) with each policy in turn. Throws
// base::Error naming the file on a failed read.
DriveBenchReport bench_drives(const std::vector<std::string>& files,
                              const std::vector<std::string>& names,
                              const std::vector<DriveCeiling>& ceilings,
                              const DriveBenchOptions& options);

}  // namespace deltafin::io
