// measure_read_ceiling: interleaved repetitions over (pages, queue, depth) configurations, each
// keeping exactly `depth` expert-sized reads in flight; write_bench_file makes its test file.
#include "io/read_ceiling.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>

#include "base/error.h"
#include "base/stopwatch.h"

namespace deltafin::io {
namespace {

using base::fail;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Random aligned offsets over several files, each file weighted by the positions it offers.
class OffsetPicker {
 public:
  OffsetPicker(const std::vector<DirectFile>& files, size_t read_bytes, uint64_t seed)
      : files_(files), rng_(seed) {
    for (const DirectFile& f : files) {
      positions_.push_back((f.size_bytes() - read_bytes) / kDirectAlignment + 1);
      total_ += positions_.back();
    }
  }

  // Sets *file and returns an offset.
  uint64_t pick(const DirectFile** file) {
    uint64_t k = std::uniform_int_distribution<uint64_t>(0, total_ - 1)(rng_);
    size_t i = 0;
    while (k >= positions_[i]) k -= positions_[i++];
    *file = &files_[i];
    return k * kDirectAlignment;
  }

 private:
  const std::vector<DirectFile>& files_;
  std::vector<uint64_t> positions_;
  uint64_t total_ = 0;
  std::mt19937_64 rng_;
};

// Keeps queue.depth() reads in flight until n_reads have completed; returns GB/s.
double timed_reads(ReadQueue& queue, uint8_t* buffer, size_t slot_bytes, size_t read_bytes,
                   int n_reads, OffsetPicker& picker) {
  std::vector<uint64_t> free_slots;
  for (int s = queue.depth() - 1; s >= 0; --s) free_slots.push_back(static_cast<uint64_t>(s));
  const base::Stopwatch watch;
  int submitted = 0, completed = 0;
  while (completed < n_reads) {
    while (submitted < n_reads && !free_slots.empty()) {
      ReadRequest r;
      r.offset = picker.pick(&r.file);
      r.length = read_bytes;
      r.user_tag = free_slots.back();
      r.dest = buffer + r.user_tag * slot_bytes;
      free_slots.pop_back();
      queue.submit(r);
      ++submitted;
    }
    ReadCompletion c;
    if (!queue.wait(&c)) fail("read queue ", queue.name(), " lost a request");
    if (!c.ok()) fail(c.message);
    if (c.bytes != read_bytes) fail("short read of ", c.bytes, " bytes from a bench file");
    free_slots.push_back(c.user_tag);
    ++completed;
  }
  const double seconds = watch.elapsed_seconds();
  return static_cast<double>(read_bytes) * n_reads / seconds / 1e9;
}

void summarize(CeilingPoint& p) {
  std::vector<double> v = p.gbps;
  std::sort(v.begin(), v.end());
  p.min_gbps = v.front();
  p.max_gbps = v.back();
  const size_t n = v.size();
  p.median_gbps = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

CeilingReport measure_read_ceiling(const std::vector<std::string>& paths,
                                   const CeilingOptions& options) {
  if (paths.empty()) fail("measure_read_ceiling needs at least one file");
  if (options.depths.empty() || options.repetitions < 1) fail("nothing to measure");
  CeilingReport report;
  report.paths = paths;
  report.read_bytes = round_up(options.read_bytes, kDirectAlignment);
  report.thp_mode = thp_mode();
  std::vector<DirectFile> files;
  for (const std::string& path : paths) {
    files.push_back(DirectFile::open(path));
    if (files.back().size_bytes() < report.read_bytes) {
      fail("file ", path, " has ", files.back().size_bytes(), " bytes, fewer than one ",
           report.read_bytes, "-byte read");
    }
    report.file_bytes += files.back().size_bytes();
    if (files.back().mode() == ReadMode::kBuffered) {
      report.notes.push_back(path + " refuses O_DIRECT: buffered reads, dropped after each read");
    }
  }
  report.mode = files.front().mode();

  const int max_depth = *std::max_element(options.depths.begin(), options.depths.end());
  const size_t slot_bytes = round_up(report.read_bytes, kHugePageBytes);
  std::vector<std::unique_ptr<ReadQueue>> queues;  // one per (queue kind, depth)
  std::vector<std::pair<PageKind, HugeBuffer>> buffers;
  std::vector<std::pair<size_t, size_t>> point_to;  // (queue index, buffer index)
  for (PageKind pages : options.pages) {
    buffers.emplace_back(pages, HugeBuffer(slot_bytes * max_depth, pages));
  }
  for (QueueKind kind : options.queues) {
    for (int depth : options.depths) {
      std::string why_not;
      auto queue = kind == QueueKind::kUring   ? make_uring_queue(depth, &why_not)
                   : kind == QueueKind::kPread ? make_pread_queue(depth)
                                               : make_read_queue(depth, kind);
      if (!queue) {
        if (depth == options.depths.front()) report.notes.push_back("io_uring skipped: " + why_not);
        continue;
      }
      for (size_t b = 0; b < buffers.size(); ++b) {
        CeilingPoint p;
        p.queue = queue->name();
        p.pages = buffers[b].first;
        p.depth = depth;
        p.buffer_bytes = slot_bytes * depth;
        report.points.push_back(p);
        point_to.emplace_back(queues.size(), b);
      }
      queues.push_back(std::move(queue));
    }
  }
  if (report.points.empty()) fail("no read queue could be started");

  OffsetPicker picker(files, report.read_bytes, options.seed);
  for (int rep = 0; rep < options.repetitions; ++rep) {
    for (size_t i = 0; i < report.points.size(); ++i) {
      CeilingPoint& p = report.points[i];
      const int n_reads = std::max<int>(
          2 * p.depth, static_cast<int>((options.bytes_per_repetition + report.read_bytes - 1) /
                                        report.read_bytes));
      p.gbps.push_back(timed_reads(*queues[point_to[i].first],
                                   buffers[point_to[i].second].second.data(), slot_bytes,
                                   report.read_bytes, n_reads, picker));
    }
  }
  for (size_t i = 0; i < report.points.size(); ++i) {
    CeilingPoint& p = report.points[i];
    summarize(p);
    const HugeBuffer& buffer = buffers[point_to[i].second].second;
    p.huge_backed_fraction = static_cast<double>(buffer.huge_backed_bytes()) / buffer.size();
    if (p.median_gbps > report.ceiling_gbps) {
      report.ceiling_gbps = p.median_gbps;
      report.best_point = static_cast<int>(i);
    }
  }
  return report;
}

void write_bench_file(const std::string& path, uint64_t size_bytes) {
  size_bytes = size_bytes / kDirectAlignment * kDirectAlignment;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create ", path, ": ", std::strerror(errno));
  constexpr size_t kChunkBytes = size_t{64} << 20;
  HugeBuffer chunk(kChunkBytes);
  auto* words = reinterpret_cast<uint64_t*>(chunk.data());
  std::mt19937_64 rng(0x6465'6c74'6166'696eULL);
  for (size_t i = 0; i < kChunkBytes / 8; ++i) words[i] = rng();
  for (uint64_t written = 0, chunk_index = 0; written < size_bytes; ++chunk_index) {
    // Stamp every 4 KiB block with its position so that no two blocks of the file are equal.
    for (size_t b = 0; b < kChunkBytes / kDirectAlignment; ++b) {
      words[b * (kDirectAlignment / 8)] = chunk_index << 32 | b;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, size_bytes - written));
    size_t done = 0;
    while (done < n) {
      const ssize_t w =
          ::pwrite(fd, chunk.data() + done, n - done, static_cast<off_t>(written + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(path.c_str());
        fail("cannot write ", path, " at offset ", written + done, ": ", std::strerror(err));
      }
      done += static_cast<size_t>(w);
    }
    written += n;
  }
  const int synced = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (synced != 0) fail("cannot sync ", path, ": ", std::strerror(err));
  drop_page_cache(path);
}

}  // namespace deltafin::io
