// `deltafin bench-io --dirs`: the several-drive benchmark (apps/bench_io_dirs.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/drive_bench.h"

namespace deltafin::apps {

struct DirsBenchArgs {
  std::vector<std::string> dirs;
  uint64_t size_bytes = 0;  // of each drive's test file
  bool keep = false, json = false, remeasure = false;
  std::vector<double> ceiling_override;  // --ceilings: GB/s per drive instead of measuring
  io::DriveBenchOptions options;
};

int run_bench_io_dirs(const DirsBenchArgs& args);

}  // namespace deltafin::apps
