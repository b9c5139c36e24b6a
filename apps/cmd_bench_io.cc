// `deltafin bench-io`: the device's read ceiling, measured the way the engine reads experts
// (17,547,264-byte O_DIRECT requests into huge-page buffers, queue depths 1-8, io_uring and the
// pread pool, huge vs 4 KiB pages). Creates and deletes its own test file unless --file is given.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_load.h"
#include "base/stopwatch.h"
#include "bench_io_dirs.h"
#include "command.h"
#include "io/read_ceiling.h"

namespace deltafin::apps {
namespace {

using base::fail;

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// What ran beside the reads: --memory-load's copying threads (0: none).
struct LoadFigures {
  int threads = 0;
  double gbps = 0;  // bytes copied per second over the measurement
};

void print_json(const io::CeilingReport& r, int repetitions, const LoadFigures& load) {
  std::printf("{\"paths\":[");
  for (size_t i = 0; i < r.paths.size(); ++i) {
    std::printf("%s%s", i ? "," : "", json_string(r.paths[i]).c_str());
  }
  std::printf("],\"mode\":%s,\"file_bytes\":%llu,\"read_bytes\":%zu,\"thp_mode\":%s,",
              json_string(io::read_mode_name(r.mode)).c_str(),
              static_cast<unsigned long long>(r.file_bytes), r.read_bytes,
              json_string(r.thp_mode).c_str());
  std::printf("\"repetitions\":%d,\"memory_load_threads\":%d,\"memory_load_gbps\":%.4f,",
              repetitions, load.threads, load.gbps);
  std::printf("\"points\":[");
  for (size_t i = 0; i < r.points.size(); ++i) {
    const io::CeilingPoint& p = r.points[i];
    std::printf("%s{\"queue\":%s,\"pages\":%s,\"depth\":%d,\"gbps\":[", i ? "," : "",
                json_string(p.queue).c_str(), json_string(io::page_kind_name(p.pages)).c_str(),
                p.depth);
    for (size_t k = 0; k < p.gbps.size(); ++k) std::printf("%s%.4f", k ? "," : "", p.gbps[k]);
    std::printf("],\"min_gbps\":%.4f,\"median_gbps\":%.4f,\"max_gbps\":%.4f,", p.min_gbps,
                p.median_gbps, p.max_gbps);
    std::printf("\"huge_backed_fraction\":%.3f}", p.huge_backed_fraction);
  }
  std::printf("],\"notes\":[");
  for (size_t i = 0; i < r.notes.size(); ++i) {
    std::printf("%s%s", i ? "," : "", json_string(r.notes[i]).c_str());
  }
  const io::CeilingPoint& best = r.points[r.best_point];
  std::printf("],\"ceiling_gbps\":%.4f,\"best\":{\"queue\":%s,\"pages\":%s,\"depth\":%d}}\n",
              r.ceiling_gbps, json_string(best.queue).c_str(),
              json_string(io::page_kind_name(best.pages)).c_str(), best.depth);
}

void print_table(const io::CeilingReport& r, int repetitions, double gb_per_rep,
                 const LoadFigures& load) {
  std::printf("files: ");
  for (size_t i = 0; i < r.paths.size(); ++i)
    std::printf("%s%s", i ? ", " : "", r.paths[i].c_str());
  std::printf(" (%.2f GB, %s)\n", r.file_bytes / 1e9, io::read_mode_name(r.mode));
  std::printf(
      "reads: %zu bytes each, random 4 KiB-aligned offsets; %d repetitions of %.2f GB "
      "per configuration, interleaved; THP mode: %s\n",
      r.read_bytes, repetitions, gb_per_rep, r.thp_mode.c_str());
  for (const std::string& note : r.notes) std::printf("note: %s\n", note.c_str());
  if (load.threads > 0) {
    std::printf("memory load: %d threads copying memory throughout, %.1f GB/s copied\n",
                load.threads, load.gbps);
  }
  std::printf("%-9s %-6s %5s %9s %9s %9s %12s\n", "queue", "pages", "depth", "min GB/s", "median",
              "max", "huge-backed");
  for (const io::CeilingPoint& p : r.points) {
    std::printf("%-9s %-6s %5d %9.3f %9.3f %9.3f %11.0f%%\n", p.queue.c_str(),
                io::page_kind_name(p.pages), p.depth, p.min_gbps, p.median_gbps, p.max_gbps,
                100 * p.huge_backed_fraction);
  }
  const io::CeilingPoint& best = r.points[r.best_point];
  std::printf("ceiling: %.3f GB/s (median; %s, %s pages, depth %d)\n", r.ceiling_gbps,
              best.queue.c_str(), io::page_kind_name(best.pages), best.depth);
}

constexpr const char* kUsage =
    "usage: deltafin bench-io --dir DIR [--size-gb 4] [--keep] [--json] [--reps 3]\n"
    "                         [--gb-per-rep 1] [--depths 1,2,4,8] [--queue uring|pread|both]\n"
    "                         [--pages huge|4k|both] [--read-bytes 17547264]\n"
    "                         [--memory-load N]\n"
    "       deltafin bench-io --file PATH[,PATH...] [same options]\n"
    "       deltafin bench-io --dirs D1,D2,... [--size-gb 1] [--reads 96] [--window 16]\n"
    "                         [--depth 2] [--reps 3] [--remeasure] [--ceilings G1,G2,...]\n"
    "--dirs: one test file per drive folder, each drive's ceiling (cached, --remeasure), then\n"
    "least expected completion against round robin over the drives, interleaved (JSON).\n"
    "Writes a test file of --size-gb GB (1e9 bytes) in DIR (deleted afterwards unless --keep),\n"
    "then reads random aligned spans of --read-bytes with O_DIRECT for every combination of\n"
    "queue, page size and depth, interleaving the repetitions. Prints GB/s (1e9 bytes/s).\n"
    "--memory-load N: N threads copy memory (128 MiB buffers) while the reads run, the way\n"
    "the engine's GEMVs stream weights; on some machines that slows the disk.\n";

int run_bench_io(Args& args) {
  if (args.flag("help")) {
    std::fputs(kUsage, stderr);
    return 0;
  }
  const std::string dir = args.get("dir");
  const std::string file_list = args.get("file");
  if (args.has("dirs")) {
    DirsBenchArgs d;
    d.dirs = split_commas(args.get("dirs"));
    d.size_bytes = static_cast<uint64_t>(args.get_double("size-gb", 1.0) * 1e9);
    d.keep = args.flag("keep");
    d.json = args.flag("json");
    d.remeasure = args.flag("remeasure");
    for (const std::string& g : split_commas(args.get("ceilings"))) {
      d.ceiling_override.push_back(std::atof(g.c_str()));
      if (d.ceiling_override.back() <= 0)
        fail("deltafin bench-io: --ceilings ", g, ": expected GB/s > 0");
    }
    d.options.reads = static_cast<int>(args.get_int("reads", 96));
    d.options.window = static_cast<int>(args.get_int("window", 16));
    d.options.depth = static_cast<int>(args.get_int("depth", 2));
    d.options.repetitions = static_cast<int>(args.get_int("reps", 3));
    d.options.read_bytes = static_cast<size_t>(args.get_int("read-bytes", io::kK3ExpertSpanBytes));
    args.check_done();
    if (d.dirs.empty() || !dir.empty() || !file_list.empty())
      fail(
          "deltafin bench-io: --dirs takes a comma-separated list of folders, without "
          "--dir/--file");
    if (!d.ceiling_override.empty() && d.ceiling_override.size() != d.dirs.size())
      fail("deltafin bench-io: --ceilings gives ", d.ceiling_override.size(), " figures for ",
           d.dirs.size(), " --dirs");
    if (d.options.reads < 1 || d.options.window < 1 || d.options.depth < 1 ||
        d.options.repetitions < 1 || d.options.read_bytes == 0 || d.size_bytes == 0)
      fail(
          "deltafin bench-io: --reads, --window, --depth, --reps, --read-bytes and --size-gb must "
          "be positive");
    return run_bench_io_dirs(d);
  }
  const double size_gb = args.get_double("size-gb", 4.0);
  const bool keep = args.flag("keep");
  const bool json = args.flag("json");
  io::CeilingOptions options;
  options.repetitions = static_cast<int>(args.get_int("reps", 3));
  const double gb_per_rep = args.get_double("gb-per-rep", 1.0);
  options.bytes_per_repetition = static_cast<uint64_t>(gb_per_rep * 1e9);
  options.read_bytes = static_cast<size_t>(args.get_int("read-bytes", io::kK3ExpertSpanBytes));
  if (args.has("depths")) {
    options.depths.clear();
    for (const std::string& d : split_commas(args.get("depths"))) {
      char* end = nullptr;
      const long depth = std::strtol(d.c_str(), &end, 10);
      if (*end != '\0' || depth < 1 || depth > 256) {
        fail("deltafin bench-io: --depths takes numbers from 1 to 256, got '", d, "'");
      }
      options.depths.push_back(static_cast<int>(depth));
    }
  }
  const std::string queue = args.get("queue", "both");
  if (queue == "uring") {
    options.queues = {io::QueueKind::kUring};
  } else if (queue == "pread") {
    options.queues = {io::QueueKind::kPread};
  } else if (queue != "both") {
    fail("deltafin bench-io: --queue must be uring, pread or both, got '", queue, "'");
  }
  const long long load_threads = args.get_int("memory-load", 0);
  if (load_threads < 0 || load_threads > 1024)
    fail("deltafin bench-io: --memory-load must be 0..1024 threads, got ", load_threads);
  const std::string pages = args.get("pages", "both");
  if (pages == "huge") {
    options.pages = {io::PageKind::kHuge};
  } else if (pages == "4k") {
    options.pages = {io::PageKind::kSmall};
  } else if (pages != "both") {
    fail("deltafin bench-io: --pages must be huge, 4k or both, got '", pages, "'");
  }
  args.check_done();
  if (options.repetitions < 1 || options.read_bytes == 0 || gb_per_rep <= 0) {
    fail("deltafin bench-io: --reps, --read-bytes and --gb-per-rep must be positive");
  }
  if (dir.empty() == file_list.empty()) {
    fail(
        "deltafin bench-io: give either --dir DIR (a test file is created there) or --file "
        "PATH[,PATH...] (existing files are read)");
  }

  std::vector<std::string> paths = split_commas(file_list);
  std::string created;
  if (!dir.empty()) {
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      fail("deltafin bench-io: --dir ", dir, " is not a directory");
    }
    if (size_gb <= 0) fail("deltafin bench-io: --size-gb must be positive");
    const auto size_bytes = static_cast<uint64_t>(size_gb * 1e9);
    created = dir + "/deltafin-bench-io.bin";
    if (keep && stat(created.c_str(), &st) == 0 &&
        static_cast<uint64_t>(st.st_size) ==
            size_bytes / io::kDirectAlignment * io::kDirectAlignment) {
      base::log_info("bench-io: reusing ", created);
    } else {
      base::log_info("bench-io: writing ", size_gb, " GB to ", created);
      const base::Stopwatch write_time;
      io::write_bench_file(created, size_bytes);
      const double s = write_time.elapsed_seconds();
      base::log_info("bench-io: wrote it in ", s, " s (", size_bytes / s / 1e9, " GB/s)");
    }
    paths = {created};
  }

  io::CeilingReport report;
  LoadFigures load_figures;
  try {
    std::unique_ptr<base::MemoryLoad> load;
    if (load_threads > 0) load = std::make_unique<base::MemoryLoad>(static_cast<int>(load_threads));
    report = io::measure_read_ceiling(paths, options);
    if (load) {
      load->stop();
      load_figures = {load->threads(), load->gbps()};
    }
  } catch (...) {
    if (!created.empty() && !keep) ::unlink(created.c_str());
    throw;
  }
  if (!created.empty() && !keep) ::unlink(created.c_str());
  if (json) {
    print_json(report, options.repetitions, load_figures);
  } else {
    print_table(report, options.repetitions, gb_per_rep, load_figures);
  }
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(bench_io, "bench-io",
                 "measure the disk's read ceiling the way experts are read (--dir DIR; --help)",
                 run_bench_io);

}  // namespace deltafin::apps
