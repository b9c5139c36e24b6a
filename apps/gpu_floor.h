// `bench decode`'s figures for the GPU backend: per pass, the bytes it touched in VRAM at the
// device's read rate plus its stream operations at their measured costs (the floor), and the
// "gpu" object of the JSON that sets them beside the wall time, for decode and for the prompt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deltafin/engine.h"

namespace deltafin::apps {

// What the device did in the same run (cuda/device_probe.h).
struct GpuCosts {
  uint64_t read_bytes = 0;                                        // the pure read's buffer
  double read_gbps = 0;                                           // its best repetition
  double launch_seconds = 0, copy_seconds = 0, sync_seconds = 0;  // per operation
  double pinned_h2d_gbps = 0;  // expert-sized copies from pinned host memory, best repetition
};

GpuStats stats_difference(const GpuStats& after, const GpuStats& before);
// The pass's touched bytes at the read rate.
double read_floor_seconds(const GpuStats& pass, const GpuCosts& costs);
// Each kernel launch, copy and host wait of the pass at its measured cost.
double op_overhead_seconds(const GpuStats& pass, const GpuCosts& costs);

// One decode or verify pass: what the GPU model counted, its wall time, the ids it produced.
struct GpuPass {
  GpuStats stats;
  double wall_seconds = 0;
  int64_t ids = 1;
};

// Per token over the decode passes: the floor = read floor + operation overhead, and the ratio
// of the median s/token to the median floor.
struct GpuDecodeFigures {
  double tokens = 0;
  std::vector<double> seconds_per_token, pass_ratio;  // per pass
  GpuStats total;                                     // the passes' counters, summed
  double read_floor = 0, op_overhead = 0, floor = 0;  // medians, seconds per token
  double ratio = 0;
  double device_seconds = 0;  // median per token
  double device_share = 0;    // the passes' device time over their wall time
};
GpuDecodeFigures decode_figures(const std::vector<GpuPass>& decode, const GpuCosts& costs);

// The JSON object: the costs; per token over the decode passes (min, median and max for time
// and ratio) the bytes by part, the operations, the floor, the ratio and the device's share of
// the wall time; the same for the prompt whole.
std::string gpu_json(const std::vector<GpuPass>& decode, const GpuStats& prompt,
                     int64_t prompt_tokens, double prompt_seconds, const GpuCosts& costs);

}  // namespace deltafin::apps
