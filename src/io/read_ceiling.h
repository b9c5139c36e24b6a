// The device's read ceiling measured the way the engine reads experts: one K3-expert-sized
// O_DIRECT request per read, into 2 MiB-aligned buffers, at a bounded queue depth. `deltafin
// bench-io` prints it; `deltafin bench decode` measures it in the same process for its ratio.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/direct_file.h"
#include "io/huge_buffer.h"
#include "io/read_queue.h"

namespace deltafin::io {

// One K3 routed expert: its six tensors (gate/up/down MXFP4 blocks and E8M0 scales), contiguous.
inline constexpr size_t kK3ExpertSpanBytes = 17'547'264;

struct CeilingOptions {
  size_t read_bytes = kK3ExpertSpanBytes;  // rounded up to kDirectAlignment
  std::vector<int> depths = {1, 2, 4, 8};
  // Queues that cannot start here (io_uring without liburing, or refused) are skipped with a note.
  std::vector<QueueKind> queues = {QueueKind::kUring, QueueKind::kPread};
  std::vector<PageKind> pages = {PageKind::kHuge, PageKind::kSmall};
  int repetitions = 3;
  uint64_t bytes_per_repetition = uint64_t{1} << 30;  // per configuration, at least 2*depth reads
  uint64_t seed = 1;
};

struct CeilingPoint {
  std::string queue;  // "io_uring" or "pread"
  PageKind pages = PageKind::kHuge;
  int depth = 1;
  std::vector<double> gbps;  // one per repetition; GB = 1e9 bytes
  double min_gbps = 0, median_gbps = 0, max_gbps = 0;
  size_t buffer_bytes = 0;          // the read buffers of this configuration
  double huge_backed_fraction = 0;  // of the page kind's buffer, backed by huge pages at the end
};

struct CeilingReport {
  std::vector<std::string> paths;
  ReadMode mode = ReadMode::kDirect;  // of the first file; kBuffered means page-cache figures
  uint64_t file_bytes = 0;            // all files together
  size_t read_bytes = 0;
  std::string thp_mode;
  std::vector<CeilingPoint> points;
  std::vector<std::string> notes;  // skipped queues, buffered fallback
  double ceiling_gbps = 0;         // the best median over all points
  int best_point = -1;             // index into points
};

// Reads random kDirectAlignment-aligned spans spread over `paths` (weighted by size). The
// configurations are interleaved within each repetition so drift in the device affects all of
// them alike. Throws base::Error naming the file and offset when a read fails, or when a file is
// smaller than one read.
CeilingReport measure_read_ceiling(const std::vector<std::string>& paths,
                                   const CeilingOptions& options = {});

// Creates `path` with size_bytes of incompressible, never-repeating data (so neither a
// deduplicating nor a compressing virtual disk can shortcut reads), written with O_DIRECT where
// possible, synced and dropped from the page cache.
void write_bench_file(const std::string& path, uint64_t size_bytes);

}  // namespace deltafin::io
