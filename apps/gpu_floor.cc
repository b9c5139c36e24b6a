// The GPU backend's floor and its JSON for `bench decode` (gpu_floor.h).
#include "gpu_floor.h"

#include <sstream>

#include "bench_common.h"

namespace deltafin::apps {
namespace {

// Field by field: op(a.f, b.f) for every counter f.
template <typename Op>
GpuStats combine(const GpuStats& a, const GpuStats& b, Op op) {
  GpuStats r;
  r.passes = op(a.passes, b.passes);
  r.rows = op(a.rows, b.rows);
  r.spine_bytes = op(a.spine_bytes, b.spine_bytes);
  r.expert_bytes = op(a.expert_bytes, b.expert_bytes);
  r.experts = op(a.experts, b.experts);
  r.head_bytes = op(a.head_bytes, b.head_bytes);
  r.embed_bytes = op(a.embed_bytes, b.embed_bytes);
  r.attention_cache_bytes = op(a.attention_cache_bytes, b.attention_cache_bytes);
  r.kda_state_bytes = op(a.kda_state_bytes, b.kda_state_bytes);
  r.launches = op(a.launches, b.launches);
  r.copies = op(a.copies, b.copies);
  r.syncs = op(a.syncs, b.syncs);
  r.expert_batch_splits = op(a.expert_batch_splits, b.expert_batch_splits);
  r.device_seconds = op(a.device_seconds, b.device_seconds);
  return r;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

// "name":{"min":..,"median":..,"max":..}
void put_spread(std::ostringstream& o, const char* name, const std::vector<double>& samples) {
  const Spread s = spread(samples);
  o << '"' << name << "\":{\"min\":" << s.min << ",\"median\":" << s.median << ",\"max\":" << s.max
    << '}';
}

// The bytes by part and the operations of `s`, each divided by `per`.
void put_parts(std::ostringstream& o, const GpuStats& s, double per) {
  const auto b = [&](uint64_t v) { return static_cast<double>(v) / per; };
  o << "\"bytes\":{\"spine\":" << b(s.spine_bytes) << ",\"experts\":" << b(s.expert_bytes)
    << ",\"lm_head\":" << b(s.head_bytes) << ",\"embedding\":" << b(s.embed_bytes)
    << ",\"attention_cache\":" << b(s.attention_cache_bytes)
    << ",\"kda_state\":" << b(s.kda_state_bytes) << ",\"total\":" << b(s.touched_bytes())
    << "},\"experts\":" << b(s.experts) << ",\"launches\":" << b(s.launches)
    << ",\"copies\":" << b(s.copies) << ",\"syncs\":" << b(s.syncs);
}

}  // namespace

GpuStats stats_difference(const GpuStats& after, const GpuStats& before) {
  return combine(after, before, [](auto x, auto y) { return x - y; });
}

double read_floor_seconds(const GpuStats& pass, const GpuCosts& costs) {
  return costs.read_gbps > 0 ? static_cast<double>(pass.touched_bytes()) / (costs.read_gbps * 1e9)
                             : 0;
}

double op_overhead_seconds(const GpuStats& pass, const GpuCosts& costs) {
  return static_cast<double>(pass.launches) * costs.launch_seconds +
         static_cast<double>(pass.copies) * costs.copy_seconds +
         static_cast<double>(pass.syncs) * costs.sync_seconds;
}

GpuDecodeFigures decode_figures(const std::vector<GpuPass>& decode, const GpuCosts& costs) {
  GpuDecodeFigures f;
  std::vector<double> read_floor, overhead, floor, device;
  double wall = 0;
  for (const GpuPass& p : decode) {
    const double n = static_cast<double>(p.ids);
    const double r = read_floor_seconds(p.stats, costs) / n;
    const double ov = op_overhead_seconds(p.stats, costs) / n;
    f.seconds_per_token.push_back(p.wall_seconds / n);
    f.pass_ratio.push_back(ratio(p.wall_seconds / n, r + ov));
    read_floor.push_back(r);
    overhead.push_back(ov);
    floor.push_back(r + ov);
    device.push_back(p.stats.device_seconds / n);
    f.total = combine(f.total, p.stats, [](auto x, auto y) { return x + y; });
    f.tokens += n;
    wall += p.wall_seconds;
  }
  f.read_floor = median(read_floor);
  f.op_overhead = median(overhead);
  f.floor = median(floor);
  f.ratio = ratio(median(f.seconds_per_token), f.floor);
  f.device_seconds = median(device);
  f.device_share = ratio(f.total.device_seconds, wall);
  return f;
}

std::string gpu_json(const std::vector<GpuPass>& decode, const GpuStats& prompt,
                     int64_t prompt_tokens, double prompt_seconds, const GpuCosts& costs) {
  const GpuDecodeFigures f = decode_figures(decode, costs);
  std::ostringstream o;
  o.precision(6);
  o << "{\"read_gbps\":" << costs.read_gbps << ",\"read_probe_bytes\":" << costs.read_bytes
    << ",\"launch_seconds\":" << costs.launch_seconds << ",\"copy_seconds\":" << costs.copy_seconds
    << ",\"sync_seconds\":" << costs.sync_seconds
    << ",\"pinned_h2d_gbps\":" << costs.pinned_h2d_gbps << ",\"decode\":{\"tokens\":" << f.tokens
    << ",";
  put_spread(o, "seconds_per_token", f.seconds_per_token);
  o << ",";
  put_parts(o, f.total, f.tokens > 0 ? f.tokens : 1);
  o << ",\"read_floor_seconds_per_token\":" << f.read_floor
    << ",\"op_overhead_seconds_per_token\":" << f.op_overhead
    << ",\"floor_seconds_per_token\":" << f.floor << ",\"ratio\":" << f.ratio << ",";
  put_spread(o, "pass_ratio", f.pass_ratio);
  o << ",\"device_seconds_per_token\":" << f.device_seconds
    << ",\"device_share_of_wall\":" << f.device_share << "}";
  const double prompt_floor =
      read_floor_seconds(prompt, costs) + op_overhead_seconds(prompt, costs);
  o << ",\"prompt\":{\"tokens\":" << prompt_tokens << ",\"seconds\":" << prompt_seconds
    << ",\"tokens_per_second\":" << ratio(static_cast<double>(prompt_tokens), prompt_seconds)
    << ",\"passes\":" << prompt.passes << ",";
  put_parts(o, prompt, 1);
  o << ",\"read_floor_seconds\":" << read_floor_seconds(prompt, costs)
    << ",\"op_overhead_seconds\":" << op_overhead_seconds(prompt, costs)
    << ",\"floor_seconds\":" << prompt_floor << ",\"ratio\":" << ratio(prompt_seconds, prompt_floor)
    << ",\"device_seconds\":" << prompt.device_seconds
    << ",\"device_share_of_wall\":" << ratio(prompt.device_seconds, prompt_seconds) << "}}";
  return o.str();
}

}  // namespace deltafin::apps
