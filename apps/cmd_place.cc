// `deltafin place`: copies a model's routed experts (a full install's, or the cache files a
// streaming install has fetched) onto several drives, bytes in proportion
// to each drive's measured bandwidth: striped (every expert split over all the drives) or whole
// (one span file per (layer, expert), hot experts replicated from a route trace); resumable,
// every file checked against the source before it is published, and MODEL/placement.json written
// last so inference finds the copies by itself.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_budget.h"
#include "command.h"
#include "experts/placement.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/inventory.h"
#include "io/direct_file.h"
#include "io/drive.h"
#include "io/huge_buffer.h"
#include "setup/expert_source.h"
#include "setup/install.h"
#include "setup/streaming_experts.h"

namespace deltafin::apps {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    if (comma > at) out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

void write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) base::fail("place: writing ", path, ": ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// One file the plan puts on a drive folder: a whole expert's span, or one stripe piece of it.
// A stripe is one file per (layer, expert, drive) rather than one pack per (layer, drive): each
// file is written, checked and published (or kept on a rerun) on its own, exactly as a whole
// copy is, and a read opens only the piece it needs; K3 over four drives is 82k files a folder,
// which ext4 (hashed directories) and xfs look up without trouble.
struct Copy {
  int layer, expert;
  const std::string* source;  // the shard
  uint64_t offset, nbytes;    // in the shard
  std::string path;
};

struct Progress {
  std::atomic<uint64_t> files{0}, bytes{0}, written{0}, kept{0}, rewritten{0};
};

// Whether `path` holds exactly the span's bytes (read back with O_DIRECT where the filesystem
// allows it, so a cached copy cannot stand in for what the disk holds).
bool same_bytes(const std::string& path, const uint8_t* want, size_t n, io::HugeBuffer& scratch) {
  io::DirectFile f = io::DirectFile::open(path);
  if (f.size_bytes() != n) return false;
  const size_t at = io::read_span(f, 0, n, scratch.data(), scratch.size());
  return std::memcmp(scratch.data() + at, want, n) == 0;
}

// Copies one drive folder's share; throws base::Error naming the file on any failure.
void place_drive(const std::vector<Copy>& copies, bool verify, size_t buffer_bytes,
                 Progress* progress) {
  io::HugeBuffer source(buffer_bytes), check(buffer_bytes);
  std::map<std::string, io::DirectFile> shards;
  for (const Copy& c : copies) {
    std::error_code ec;
    const bool exists = fs::file_size(c.path, ec) == c.nbytes && !ec;
    if (exists && !verify) {  // resuming: published files were checked when written
      ++progress->kept;
    } else {
      auto it = shards.find(*c.source);
      if (it == shards.end()) it = shards.emplace(*c.source, io::DirectFile::open(*c.source)).first;
      const size_t at = io::read_span(it->second, c.offset, c.nbytes, source.data(), source.size());
      const uint8_t* want = source.data() + at;
      if (exists && same_bytes(c.path, want, c.nbytes, check)) {
        ++progress->kept;
      } else {
        if (exists) ++progress->rewritten;
        const std::string tmp = c.path + ".tmp";
        const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) base::fail("place: cannot create ", tmp, ": ", std::strerror(errno));
        write_all(fd, want, c.nbytes, tmp);
        if (::fsync(fd) != 0) base::fail("place: fsync ", tmp, ": ", std::strerror(errno));
        ::close(fd);
        if (!same_bytes(tmp, want, c.nbytes, check))
          base::fail("place: ", tmp, " does not read back as layer ", c.layer, " expert ", c.expert,
                     " of ", *c.source, " (the drive returned other bytes)");
        if (std::rename(tmp.c_str(), c.path.c_str()) != 0)
          base::fail("place: cannot publish ", c.path, ": ", std::strerror(errno));
        ++progress->written;
      }
    }
    ++progress->files;
    progress->bytes += c.nbytes;
  }
  if (!copies.empty()) fsync_path(fs::path(copies.front().path).parent_path().string());
}

// The experts `place` lays out: every span of a full install's shards; for a streaming install,
// the cache files already fetched (the rest stay remote, fetched on demand as before; placing
// again after more fetches adds them). The ordinals are each expert's position in the model, so
// a stripe cuts it the same whatever else is local.
struct ExpertSources {
  std::vector<format::ExpertSpan> spans;
  std::vector<int64_t> ordinals;
  uint64_t remote = 0;  // experts of a streaming install not fetched yet
};

ExpertSources expert_sources(const std::string& model, const format::ModelConfig& config) {
  ExpertSources out;
  if (!setup::is_streaming_install(model)) {
    out.spans = format::locate_experts(format::Checkpoint::open(model), config);
    for (size_t i = 0; i < out.spans.size(); ++i) out.ordinals.push_back(static_cast<int64_t>(i));
    return out;
  }
  const setup::ExpertManifest manifest = setup::load_expert_manifest(model);
  const experts::ExpertCatalog catalog = setup::catalog_from_manifest(manifest, config, model);
  const setup::ExpertLocator local = setup::ExpertLocator::open(model);
  int64_t ordinal = 0;
  for (const experts::ExpertCatalog::Layer& layer : catalog.layers) {
    for (const format::ExpertSpan& span : layer.spans) {
      if (local.find(span.layer, span.expert)) {
        out.spans.push_back(span);
        out.ordinals.push_back(ordinal);
      } else {
        ++out.remote;
      }
      ++ordinal;
    }
  }
  return out;
}

int run_place(Args& args) {
  const std::string model = args.required("model");
  const std::vector<std::string> drives_arg = split_commas(args.required("drives"));
  const std::string budget_arg = args.get("budget-per-drive");
  const std::string trace = args.get("from-trace");
  const std::string gbps_arg = args.get("gbps");  // skip measuring (tests, known drives)
  const std::string layout_arg = args.get("layout");
  const bool dry_run = args.flag("dry-run");
  const bool verify = args.flag("verify");
  const bool remeasure = args.flag("remeasure");
  args.check_done();
  if (drives_arg.empty()) base::fail("place: --drives needs at least one folder");
  // Stripe by default: it is what balances every route over the drives (docs/DRIVES.md). Hot
  // replicas are whole copies, so a trace asks for the whole layout.
  experts::Layout layout = trace.empty() ? experts::Layout::kStripe : experts::Layout::kWhole;
  if (layout_arg == "whole") {
    layout = experts::Layout::kWhole;
  } else if (layout_arg == "stripe") {
    if (!trace.empty())
      base::fail(
          "place: --from-trace adds hot replicas, which only the whole layout has (a "
          "striped expert is already read from every drive); use --layout whole or drop "
          "--from-trace");
    layout = experts::Layout::kStripe;
  } else if (!layout_arg.empty()) {
    base::fail("place: --layout ", layout_arg, ": expected stripe or whole");
  }
  uint64_t budget_flag = 0;
  if (!budget_arg.empty()) {
    try {
      budget_flag = base::parse_byte_size(budget_arg);
    } catch (const base::Error& e) {
      base::fail("place: --budget-per-drive ", budget_arg, ": expected a size like 900G or 512M");
    }
  }

  const format::ModelConfig config = format::load_config(model);
  const ExpertSources sources = expert_sources(model, config);
  const std::vector<format::ExpertSpan>& spans = sources.spans;
  if (spans.empty() && sources.remote > 0)
    base::fail("place: ", model, " is a streaming install with none of its ", sources.remote,
               " experts fetched yet; place lays out the fetched ones (`deltafin fetch-experts`, "
               "`deltafin warm --from-trace FILE --fetch`, or a run, fetch them)");
  if (spans.empty()) base::fail("place: ", model, " has no routed experts to place");
  const std::string model_name = fs::canonical(model).filename().string();

  std::vector<std::string> dirs;
  std::set<std::string> seen;
  for (const std::string& d : drives_arg) {
    if (!fs::is_directory(d)) base::fail("place: --drives ", d, ": not a folder");
    if (!seen.insert(fs::canonical(d).string()).second)
      base::fail("place: --drives names ", d, " twice");
    dirs.push_back((fs::absolute(d) / ("deltafin-" + model_name)).lexically_normal().string());
  }
  experts::PlanInput in;
  for (size_t i = 0; i < spans.size(); ++i)
    in.experts.push_back({static_cast<int>(spans[i].layer), static_cast<int>(spans[i].expert),
                          spans[i].nbytes, sources.ordinals[i]});
  // Bandwidth per folder: folders on one device share its ceiling.
  std::vector<io::DriveIdentity> ids;
  for (const std::string& d : drives_arg) ids.push_back(io::identify_drive(d));
  const std::vector<std::string> gbps_list = split_commas(gbps_arg);
  if (!gbps_arg.empty() && gbps_list.size() != dirs.size())
    base::fail("place: --gbps gives ", gbps_list.size(), " rates for ", dirs.size(), " drives");
  for (size_t i = 0; i < dirs.size(); ++i) {
    double g = 0;
    if (!gbps_arg.empty()) {
      g = std::atof(gbps_list[i].c_str());
      if (g <= 0) base::fail("place: --gbps ", gbps_list[i], ": expected a positive GB/s figure");
    } else {
      g = io::drive_ceiling(drives_arg[i], remeasure && (i == 0 || ids[i].dev != ids[i - 1].dev))
              .gbps;
      int sharing = 0;
      for (const io::DriveIdentity& o : ids) sharing += o.dev == ids[i].dev;
      g /= sharing;
    }
    in.gbps.push_back(g);
    uint64_t budget = 0;
    if (!budget_arg.empty()) {
      budget = budget_flag;
    } else {
      struct statvfs v {};
      if (::statvfs(drives_arg[i].c_str(), &v) != 0)
        base::fail("place: --drives ", drives_arg[i], ": ", std::strerror(errno));
      int sharing = 0;  // folders on one device share its free space
      for (const io::DriveIdentity& o : ids) sharing += o.dev == ids[i].dev;
      budget = static_cast<uint64_t>(v.f_bavail) * v.f_frsize / 100 * 90 / sharing;
      std::error_code ec;  // a resumed placement's own files count as room
      for (const auto& f : fs::directory_iterator(dirs[i], ec)) budget += f.file_size(ec);
    }
    in.budget_bytes.push_back(budget);
    in.names.push_back(dirs[i]);
  }
  if (!trace.empty()) in.uses = experts::count_routes(trace);
  experts::Placement placement;
  placement.layout = layout;
  placement.dirs = dirs;
  placement.layers =
      layout == experts::Layout::kStripe ? experts::plan_stripes(in) : experts::plan_placement(in);

  // The plan per folder.
  std::vector<std::vector<Copy>> copies(dirs.size());
  size_t buffer_bytes = 0;
  uint64_t replicas = 0;
  for (const format::ExpertSpan& s : spans) {
    const int layer = static_cast<int>(s.layer), expert = static_cast<int>(s.expert);
    const experts::PlacedExpert* pe = placement.find(layer, expert);
    DF_ASSERT(pe != nullptr);
    if (!pe->holders.empty()) replicas += pe->holders.size() - 1;
    for (int h : pe->holders)
      copies[h].push_back({layer, expert, &s.file, s.offset, s.nbytes,
                           experts::placed_file(dirs[h], layer, expert)});
    for (const experts::StripePiece& p : pe->pieces)
      copies[p.dir].push_back({layer, expert, &s.file, s.offset + p.offset, p.nbytes,
                               experts::piece_file(dirs[p.dir], layer, expert, p.offset)});
    buffer_bytes = std::max(buffer_bytes, io::align_span(s.offset, s.nbytes).read_length);
  }
  double total_gbps = 0;
  for (double g : in.gbps) total_gbps += g;
  nlohmann::ordered_json summary = {
      {"model", model},          {"layout", experts::layout_name(layout)},
      {"experts", spans.size()}, {"remote_not_placed", sources.remote},
      {"replicas", replicas},    {"dry_run", dry_run}};
  nlohmann::ordered_json per_drive = nlohmann::ordered_json::array();
  uint64_t total_bytes = 0;
  for (size_t d = 0; d < dirs.size(); ++d)
    for (const Copy& c : copies[d]) total_bytes += c.nbytes;
  for (size_t d = 0; d < dirs.size(); ++d) {
    uint64_t bytes = 0;
    for (const Copy& c : copies[d]) bytes += c.nbytes;
    per_drive.push_back({{"dir", dirs[d]},
                         {"device", ids[d].name},
                         {"gbps", in.gbps[d]},
                         {"files", copies[d].size()},
                         {"bytes", bytes},
                         {"share_of_bytes", total_bytes ? double(bytes) / total_bytes : 0.0},
                         {"share_of_bandwidth", in.gbps[d] / total_gbps}});
    std::fprintf(stderr, "place: %s (%s, %.2f GB/s): %zu files, %s\n", dirs[d].c_str(),
                 ids[d].name.c_str(), in.gbps[d], copies[d].size(),
                 base::format_bytes(bytes).c_str());
  }
  summary["drives"] = per_drive;
  if (dry_run) {
    std::printf("%s\n", summary.dump().c_str());
    return 0;
  }

  for (const std::string& d : dirs) fs::create_directories(d);
  Progress progress;
  std::vector<std::thread> threads;
  std::mutex error_mu;
  std::string error;
  for (size_t d = 0; d < dirs.size(); ++d) {
    threads.emplace_back([&, d] {
      try {
        place_drive(copies[d], verify, buffer_bytes, &progress);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error.empty()) error = e.what();
      }
    });
  }
  uint64_t want_files = 0;
  for (const auto& c : copies) want_files += c.size();
  for (;;) {
    const uint64_t f = progress.files;
    std::fprintf(stderr, "\rplace: %llu/%llu files, %s of %s", (unsigned long long)f,
                 (unsigned long long)want_files, base::format_bytes(progress.bytes).c_str(),
                 base::format_bytes(total_bytes).c_str());
    bool failed;
    {
      std::lock_guard<std::mutex> lock(error_mu);
      failed = !error.empty();
    }
    if (f >= want_files || failed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  for (std::thread& t : threads) t.join();
  std::fprintf(stderr, "\n");
  if (!error.empty()) base::fail(error, " (run place again to resume)");

  // Files of an earlier plan that this one no longer puts there.
  uint64_t removed = 0;
  for (size_t d = 0; d < dirs.size(); ++d) {
    std::set<std::string> keep;
    for (const Copy& c : copies[d]) keep.insert(c.path);
    for (const auto& f : fs::directory_iterator(dirs[d])) {
      const std::string name = f.path().filename().string();
      if (name.size() > 4 && name[0] == 'L' && !keep.contains(f.path().string()) &&
          (name.ends_with(".bin") || name.ends_with(".bin.tmp"))) {
        fs::remove(f.path());
        ++removed;
      }
    }
  }
  experts::write_placement(model, placement);
  summary["written"] = progress.written.load();
  summary["kept"] = progress.kept.load();
  summary["rewritten"] = progress.rewritten.load();
  summary["removed"] = removed;
  summary["manifest"] = experts::placement_path(model);
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(place, "place",
                 "lay a model's experts out over several drives: --model DIR --drives "
                 "D1,D2,... [--layout stripe|whole] [--budget-per-drive SIZE] [--from-trace "
                 "routes.jsonl (whole layout)] [--dry-run] [--verify] [--remeasure] "
                 "[--gbps G1,G2,...]",
                 run_place);

}  // namespace deltafin::apps
