// Flags shared by the commands that load a model for inference: the device (--device,
// --vram-budget, --vram-spine-layers, --vram-expert-slots, --gpu-expert-math), the memory budget
// and the tiers
// (--memory-budget, --experts, --spine,
// --expert-slots, --no-prefetch, --read-depth, --read-piece,
// --cache, --layer-threads, --trace-routes, --trace-timeline, --max-context, --prefill-group,
// --spine-dtype), and the per-token --stats line built from Engine::stream_stats() (labelled
// "[int8 spine, lossy]" when the int8 spine is on).
#pragma once

#include <string>

#include "base/stopwatch.h"
#include "command.h"
#include "deltafin/engine.h"

namespace deltafin::apps {

// Reads the flags above into `options` (leaving defaults where absent).
void read_stream_flags(Args& args, EngineOptions* options);

// --NAME as an integer in 1..max (else a user error naming `command`): serve, run and generate
// share it, so that --chunk 0 or a negative count is refused alike.
long long read_positive_flag(Args& args, const char* command, const char* name, long long fallback,
                             long long max);
// --chunk N: the attention chunk, 1..65536, into options->attention_chunk_tokens.
void read_chunk_flag(Args& args, const char* command, EngineOptions* options);
// --NAME as a finite number in min..max (NaN and infinities are refused, naming `command`).
double read_number_flag(Args& args, const char* command, const char* name, double fallback,
                        double min, double max);

// Per-pass figures between two snapshots of an engine's counters.
struct PassFigures {
  double wall_seconds = 0, io_wait_seconds = 0, expert_wait_seconds = 0, spine_wait_seconds = 0,
         busy_seconds = 0;
  uint64_t expert_bytes = 0, spine_bytes = 0, needed_bytes = 0;
  uint64_t requested = 0, cache_hits = 0, prefetch_hits = 0, demand_reads = 0;
  uint64_t predicted_actual = 0, predicted_matched = 0, prefetch_reads = 0;
  int layer_threads = 0;             // threads the pass's layers ran on
  std::vector<DriveFigures> drives;  // this pass's share of each drive
  uint64_t gpu_passes = 0, gpu_resident_spine_bytes = 0, gpu_streamed_spine_bytes = 0;
  uint64_t gpu_expert_hits = 0, gpu_expert_misses = 0, gpu_expert_hit_bytes = 0,
           gpu_expert_miss_bytes = 0;  // the GPU's VRAM tiers (StreamStats' gpu_* fields)
  uint64_t gpu_expert_ram_hits = 0, gpu_expert_ram_hit_bytes = 0, gpu_expert_disk_reads = 0,
           gpu_expert_disk_bytes = 0;
  double gpu_spine_h2d_seconds = 0, gpu_expert_h2d_seconds = 0, gpu_spine_fill_wait_seconds = 0,
         gpu_expert_source_wait_seconds = 0;
  uint64_t read_bytes() const { return expert_bytes + spine_bytes; }
};
PassFigures pass_figures(const StreamStats& before, const StreamStats& after, double wall_seconds);
// One line: wall, compute, I/O wait, bytes read (spine, experts), cache hits, prefetch recall,
// GB/s while the disk was busy, threads the layers ran on; on the GPU, each VRAM tier's share.
std::string describe_pass(const PassFigures& f);

// Times passes and prints describe_pass() per token to stderr.
class TokenStatsPrinter {
 public:
  explicit TokenStatsPrinter(const Engine& engine);
  void mark(const std::string& label);  // the pass since the previous mark (or construction)

 private:
  const Engine& engine_;
  StreamStats last_;
  std::string lossy_;  // " [int8 spine, lossy]" or ""
  base::Stopwatch since_last_;
};

}  // namespace deltafin::apps
