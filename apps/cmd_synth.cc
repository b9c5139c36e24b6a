// `deltafin synth`: a seeded random model in the exact K3 release layout (demo size, or K3's real
// per-layer sizes for benchmarks larger than RAM), with its DSpark and Qwen3 drafters unless
// --no-drafters, optionally with planted cycles of known greedy continuations (--plant-cycles, for
// measuring speculation). Prints one JSON summary line on stdout.
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "command.h"
#include "format/schema.h"
#include "synth/synth.h"

namespace deltafin::apps {
namespace {

void optional_count(Args& args, const char* name, std::optional<int>& out) {
  if (!args.has(name)) return;
  const long long v = args.get_int(name, 0);
  if (v < 1 || v > std::numeric_limits<int>::max()) base::fail("--", name, " must be at least 1");
  out = static_cast<int>(v);
}

int run_synth(Args& args) {
  synth::SynthOptions options;
  options.out_dir = args.required("out");
  options.preset = args.required("preset");
  optional_count(args, "layers", options.layers);
  optional_count(args, "experts", options.experts);
  const long long seed = args.get_int("seed", 0);
  if (seed < 0) base::fail("--seed must be a non-negative integer");
  options.seed = static_cast<uint64_t>(seed);
  options.drafters = !args.flag("no-drafters");
  const std::string qwen = args.get("qwen", "0.6b");
  if (qwen != "0.6b" && qwen != "1.7b") base::fail("--qwen must be 0.6b or 1.7b, not '", qwen, "'");
  options.qwen = qwen == "1.7b" ? synth::QwenSize::k1_7b : synth::QwenSize::k0_6b;
  if (args.has("plant-cycles"))
    options.plant_cycles = synth::parse_cycle_lengths(args.get("plant-cycles", ""));
  args.check_done();

  const synth::SynthReport r = synth::synthesize(options);
  nlohmann::ordered_json summary = {
      {"out", options.out_dir},
      {"preset", options.preset},
      {"layers", r.dims.num_hidden_layers},
      {"experts", r.dims.num_experts},
      {"vocab_size", r.dims.vocab_size()},
      {"shards", r.n_shards},
      {"expert_bytes", format::expert_span_bytes(r.config)},
      {"total_size", r.tensor_bytes},
      {"file_bytes", r.file_bytes},
      {"seconds", r.seconds},
      {"gb_per_s", r.seconds > 0 ? r.file_bytes / 1e9 / r.seconds : 0.0}};
  if (r.drafters) {
    summary["drafters"] = {{"dspark", r.drafter.dspark_dir},
                           {"dspark_bytes", r.drafter.dspark_bytes},
                           {"qwen", r.drafter.qwen_dir},
                           {"qwen_bytes", r.drafter.qwen_bytes}};
  }
  if (!r.planted.empty()) summary["planted_cycles"] = r.planted.cycles;
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(
    synth, "synth",
    "write a seeded random model in the K3 layout: --out DIR --preset demo|k3-scale "
    "[--layers N] [--experts N] [--seed S] [--no-drafters] [--qwen 0.6b|1.7b] "
    "[--plant-cycles 4,64] (drafters in DIR/drafters/; planted cycles: greedy next ids follow a "
    "known permutation, listed in DIR/planted_cycles.json)",
    run_synth);

}  // namespace deltafin::apps
