// Streaming flags and per-pass statistics for the inference commands.
#include "stream_flags.h"

#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "base/memory_budget.h"
#include "base/stopwatch.h"
#include "base/timeline.h"
#include "io/direct_file.h"

namespace deltafin::apps {

void read_stream_flags(Args& args, EngineOptions* options) {
  options->memory_budget = args.get("memory-budget", options->memory_budget);
  if (!options->memory_budget.empty()) base::parse_byte_size(options->memory_budget);
  // auto|cpu|cuda[:N], checked by Engine::load (which knows whether CUDA is built in).
  options->device = args.get("device", options->device);
  options->vram_budget = args.get("vram-budget", options->vram_budget);
  if (!options->vram_budget.empty()) base::parse_byte_size(options->vram_budget);
  const std::string expert_math = args.get("gpu-expert-math", "exact");
  if (expert_math == "exact") {
    options->gpu_expert_math = GpuExpertMath::kExact;
  } else if (expert_math == "tensor") {
    options->gpu_expert_math = GpuExpertMath::kTensorCores;  // an opt-in (docs/CUDA.md)
  } else {
    base::fail("--gpu-expert-math must be exact or tensor, got '", expert_math, "'");
  }
  const long long vram_layers = args.get_int("vram-spine-layers", -1);
  if (vram_layers < -1 || vram_layers > 1'000'000)
    base::fail("--vram-spine-layers must be a layer count (omit it: from the budget), got ",
               vram_layers);
  options->vram_spine_layers = static_cast<int>(vram_layers);
  const long long vram_slots = args.get_int("vram-expert-slots", 0);
  if (vram_slots < 0 || vram_slots > 10'000'000)
    base::fail("--vram-expert-slots must be 0 (from the budget) or a slot count, got ", vram_slots);
  options->vram_expert_slots = static_cast<int>(vram_slots);
  const std::string experts = args.get("experts", "auto");
  if (experts == "auto") {
    options->experts = ExpertMode::kAuto;
  } else if (experts == "mapped") {
    options->experts = ExpertMode::kMapped;
  } else if (experts == "stream") {
    options->experts = ExpertMode::kStream;
  } else {
    base::fail("--experts must be auto, mapped or stream, got '", experts, "'");
  }
  const std::string spine = args.get("spine", "auto");
  if (spine == "auto") {
    options->spine = SpineMode::kAuto;
  } else if (spine == "stream") {
    options->spine = SpineMode::kStream;
  } else {
    base::fail("--spine must be auto or stream, got '", spine, "'");
  }
  const std::string spine_dtype = args.get("spine-dtype", "bf16");
  if (spine_dtype == "bf16") {
    options->spine_dtype = SpineDType::kBf16;
  } else if (spine_dtype == "int8") {
    options->spine_dtype = SpineDType::kInt8;  // lossy: an explicit opt-in (docs/QUALITY.md)
  } else {
    base::fail("--spine-dtype must be bf16 or int8, got '", spine_dtype, "'");
  }
  const long long slots = args.get_int("expert-slots", 0);
  if (slots < 0 || slots == 1 || slots > 1'000'000)
    base::fail("--expert-slots must be 0 (from the budget) or at least 2, got ", slots);
  options->expert_slots = static_cast<int>(slots);
  options->prefetch = !args.flag("no-prefetch");
  const long long depth = args.get_int("read-depth", 0);
  if (depth < 0 || depth > 256)
    base::fail("--read-depth must be 0 (default ", kDefaultReadDepth, ") or 1..256, got ", depth);
  options->read_depth = static_cast<int>(depth);
  const std::string piece = args.get("read-piece", "");
  if (!piece.empty()) {
    const uint64_t bytes = base::parse_byte_size(piece);
    if (bytes % io::kDirectAlignment != 0 || bytes > (uint64_t{1} << 30)) {  // ReadJob's rule
      base::fail(
          "--read-piece must be 0 (one request per expert) or a multiple of 4K up to 1G, "
          "got '",
          piece, "'");
    }
    options->read_piece_bytes = static_cast<int64_t>(bytes);
  }
  const long long group = args.get_int("prefill-group", 0);
  if (group < 0 || group > 65536) {
    base::fail("--prefill-group must be 0 (default ", kDefaultPrefillGroup, ") or 1..65536, got ",
               group);
  }
  options->prefill_group_tokens = static_cast<int>(group);
  const std::string cache = args.get("cache", "lfu");
  if (cache == "lfu") {
    options->cache = ExpertCachePolicy::kLfu;
  } else if (cache == "lru") {
    options->cache = ExpertCachePolicy::kLru;
  } else {
    base::fail("--cache must be lfu or lru, got '", cache, "'");
  }
  const std::string threads = args.get("layer-threads", "auto");
  if (threads == "auto") {
    options->layer_threads = 0;
  } else if (threads == "all") {
    options->layer_threads = -1;
  } else {
    const long long n = args.get_int("layer-threads", 0);
    if (n < 1 || n > 4096)
      base::fail("--layer-threads must be auto, all or 1..4096, got '", threads, "'");
    options->layer_threads = static_cast<int>(n);
  }
  options->trace_routes = args.get("trace-routes", "");
  const std::string timeline = args.get("trace-timeline", "");
  if (!timeline.empty()) base::timeline::begin(timeline);  // main() writes it at the end
  const long long context = args.get_int("max-context", 0);
  if (context < 0) base::fail("--max-context must be positive (0: the default), got ", context);
  options->max_context_tokens = context;
}

long long read_positive_flag(Args& args, const char* command, const char* name, long long fallback,
                             long long max) {
  const long long v = args.get_int(name, fallback);
  if (v < 1 || v > max)
    base::fail("deltafin ", command, ": --", name, " must be between 1 and ", max);
  return v;
}

void read_chunk_flag(Args& args, const char* command, EngineOptions* options) {
  options->attention_chunk_tokens = static_cast<int>(
      read_positive_flag(args, command, "chunk", options->attention_chunk_tokens, 1 << 16));
}

double read_number_flag(Args& args, const char* command, const char* name, double fallback,
                        double min, double max) {
  const double v = args.get_double(name, fallback);
  if (!std::isfinite(v) || v < min || v > max)
    base::fail("deltafin ", command, ": --", name, " must be a number from ", min, " to ", max,
               ", got '", args.get(name), "'");
  return v;
}

PassFigures pass_figures(const StreamStats& a, const StreamStats& b, double wall_seconds) {
  PassFigures f;
  f.wall_seconds = wall_seconds;
  f.expert_wait_seconds = b.expert_wait_seconds - a.expert_wait_seconds;
  f.spine_wait_seconds = b.spine_wait_seconds - a.spine_wait_seconds;
  f.io_wait_seconds = f.expert_wait_seconds + f.spine_wait_seconds;
  f.busy_seconds = b.disk_busy_seconds - a.disk_busy_seconds;
  f.expert_bytes = b.expert_bytes_read - a.expert_bytes_read;
  f.spine_bytes = b.spine_bytes_read - a.spine_bytes_read;
  f.needed_bytes = b.needed_bytes - a.needed_bytes;
  f.requested = b.experts_requested - a.experts_requested;
  f.cache_hits = b.cache_hits - a.cache_hits;
  f.prefetch_hits = b.prefetch_hits - a.prefetch_hits;
  f.demand_reads = b.demand_reads - a.demand_reads;
  f.predicted_actual = b.predicted_actual - a.predicted_actual;
  f.predicted_matched = b.predicted_matched - a.predicted_matched;
  f.prefetch_reads = b.prefetch_reads - a.prefetch_reads;
  f.layer_threads = b.layer_threads;
  f.gpu_passes = b.gpu_passes - a.gpu_passes;
  f.gpu_resident_spine_bytes = b.gpu_resident_spine_bytes - a.gpu_resident_spine_bytes;
  f.gpu_streamed_spine_bytes = b.gpu_streamed_spine_bytes - a.gpu_streamed_spine_bytes;
  f.gpu_expert_hits = b.gpu_expert_hits - a.gpu_expert_hits;
  f.gpu_expert_misses = b.gpu_expert_misses - a.gpu_expert_misses;
  f.gpu_expert_hit_bytes = b.gpu_expert_hit_bytes - a.gpu_expert_hit_bytes;
  f.gpu_expert_miss_bytes = b.gpu_expert_miss_bytes - a.gpu_expert_miss_bytes;
  f.gpu_expert_ram_hits = b.gpu_expert_ram_hits - a.gpu_expert_ram_hits;
  f.gpu_expert_ram_hit_bytes = b.gpu_expert_ram_hit_bytes - a.gpu_expert_ram_hit_bytes;
  f.gpu_expert_disk_reads = b.gpu_expert_disk_reads - a.gpu_expert_disk_reads;
  f.gpu_expert_disk_bytes = b.gpu_expert_disk_bytes - a.gpu_expert_disk_bytes;
  f.gpu_spine_h2d_seconds = b.gpu_spine_h2d_seconds - a.gpu_spine_h2d_seconds;
  f.gpu_expert_h2d_seconds = b.gpu_expert_h2d_seconds - a.gpu_expert_h2d_seconds;
  f.gpu_spine_fill_wait_seconds = b.gpu_spine_fill_wait_seconds - a.gpu_spine_fill_wait_seconds;
  f.gpu_expert_source_wait_seconds =
      b.gpu_expert_source_wait_seconds - a.gpu_expert_source_wait_seconds;
  for (size_t d = 0; d < b.drives.size(); ++d) {
    DriveFigures x = b.drives[d];
    if (d < a.drives.size()) {
      x.bytes -= a.drives[d].bytes;
      x.busy_seconds -= a.drives[d].busy_seconds;
    }
    f.drives.push_back(x);
  }
  return f;
}

std::string describe_pass(const PassFigures& f) {
  char line[512];
  const double recall =
      f.predicted_actual ? static_cast<double>(f.predicted_matched) / f.predicted_actual : 0.0;
  std::snprintf(
      line, sizeof line,
      "wall %.1f ms, compute %.1f ms, I/O wait %.1f ms (experts %.1f, spine %.1f), "
      "read %s (spine %s, experts %s), cache hits %llu/%llu, prefetch recall %.2f "
      "(%llu reads, %llu used), %.2f GB/s while busy (%.1f ms), layers on %d thread%s",
      1e3 * f.wall_seconds, 1e3 * (f.wall_seconds - f.io_wait_seconds), 1e3 * f.io_wait_seconds,
      1e3 * f.expert_wait_seconds, 1e3 * f.spine_wait_seconds,
      base::format_bytes(f.read_bytes()).c_str(), base::format_bytes(f.spine_bytes).c_str(),
      base::format_bytes(f.expert_bytes).c_str(), static_cast<unsigned long long>(f.cache_hits),
      static_cast<unsigned long long>(f.requested), recall,
      static_cast<unsigned long long>(f.prefetch_reads),
      static_cast<unsigned long long>(f.prefetch_hits),
      f.busy_seconds > 0 ? f.read_bytes() / f.busy_seconds / 1e9 : 0.0, 1e3 * f.busy_seconds,
      f.layer_threads, f.layer_threads == 1 ? "" : "s");
  std::string out = line;
  if (f.gpu_passes > 0) {  // the GPU backend: what each VRAM tier gave
    std::snprintf(line, sizeof line,
                  "; VRAM: spine resident %s, streamed in %s, experts %llu hits (%s), %llu "
                  "misses copied in (%s)",
                  base::format_bytes(f.gpu_resident_spine_bytes).c_str(),
                  base::format_bytes(f.gpu_streamed_spine_bytes).c_str(),
                  static_cast<unsigned long long>(f.gpu_expert_hits),
                  base::format_bytes(f.gpu_expert_hit_bytes).c_str(),
                  static_cast<unsigned long long>(f.gpu_expert_misses),
                  base::format_bytes(f.gpu_expert_miss_bytes).c_str());
    out += line;
    const auto gbps = [](uint64_t bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0.0; };
    std::snprintf(line, sizeof line,
                  " (from RAM %llu (%s), from disk %llu (%s), waited %.1f ms); H2D busy: spine "
                  "%.1f ms (%.2f GB/s, ring waits %.1f ms), experts %.1f ms (%.2f GB/s)",
                  static_cast<unsigned long long>(f.gpu_expert_ram_hits),
                  base::format_bytes(f.gpu_expert_ram_hit_bytes).c_str(),
                  static_cast<unsigned long long>(f.gpu_expert_disk_reads),
                  base::format_bytes(f.gpu_expert_disk_bytes).c_str(),
                  1e3 * f.gpu_expert_source_wait_seconds, 1e3 * f.gpu_spine_h2d_seconds,
                  gbps(f.gpu_streamed_spine_bytes, f.gpu_spine_h2d_seconds),
                  1e3 * f.gpu_spine_fill_wait_seconds, 1e3 * f.gpu_expert_h2d_seconds,
                  gbps(f.gpu_expert_miss_bytes, f.gpu_expert_h2d_seconds));
    out += line;
  }
  // Per drive only where there are several: bytes, achieved rate and its share of the ceiling,
  // and the floor of perfect balance, the bytes over the sum of the ceilings.
  if (f.drives.size() > 1) {
    double sum_ceiling = 0;
    bool all_known = true;
    out += "; drives:";
    for (const DriveFigures& d : f.drives) {
      const double gbps = d.busy_seconds > 0 ? d.bytes / d.busy_seconds / 1e9 : 0.0;
      char part[160];
      if (d.ceiling_gbps > 0) {
        std::snprintf(part, sizeof part, " %s %s %.2f GB/s (%.0f%% of %.2f),", d.name.c_str(),
                      base::format_bytes(d.bytes).c_str(), gbps, 100 * gbps / d.ceiling_gbps,
                      d.ceiling_gbps);
      } else {
        std::snprintf(part, sizeof part, " %s %s %.2f GB/s (ceiling not measured),", d.name.c_str(),
                      base::format_bytes(d.bytes).c_str(), gbps);
      }
      out += part;
      if (d.bytes == 0) continue;  // the floor counts the drives this pass read
      sum_ceiling += d.ceiling_gbps;
      all_known = all_known && d.ceiling_gbps > 0;
    }
    out.pop_back();
    if (all_known && sum_ceiling > 0) {
      char floor[96];
      std::snprintf(floor, sizeof floor, "; I/O floor %.1f ms (needed bytes / sum of ceilings)",
                    1e3 * f.needed_bytes / (sum_ceiling * 1e9));
      out += floor;
    }
  }
  return out;
}

TokenStatsPrinter::TokenStatsPrinter(const Engine& engine)
    : engine_(engine),
      last_(engine.stream_stats()),
      lossy_(engine.info().lossy ? " [" + engine.info().spine_dtype + " spine, lossy]" : "") {}

void TokenStatsPrinter::mark(const std::string& label) {
  const double wall = since_last_.lap_seconds();
  const StreamStats s = engine_.stream_stats();
  const PassFigures f = pass_figures(last_, s, wall);
  std::fprintf(stderr, "%s%s: %s\n", label.c_str(), lossy_.c_str(), describe_pass(f).c_str());
  last_ = s;
}

}  // namespace deltafin::apps
