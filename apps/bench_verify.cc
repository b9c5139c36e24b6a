// `deltafin bench verify --model DIR [--widths 1,2,4,8] [--tokens N] [--accept K] [--reps R]
// [--json]` plus the streaming flags: the cost curve of a verify pass. A plain greedy run gives
// the model's own continuation; each width then decodes it again with that continuation as the
// drafts (every draft accepted, or only the first K of each pass with --accept K), so the passes
// are of known width. Per width, interleaved over repetitions: wall time per pass, bytes read
// (spine, experts) and experts requested per MoE layer, the I/O floor (the bytes the pass needed
// over the device's read ceiling, measured in the same run, or the rate the passes' reads reached
// when that is higher) and time per generated id, each against the 1-row pass.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/stopwatch.h"
#include "bench_common.h"
#include "bench_verify.h"
#include "deltafin/engine.h"
#include "format/config.h"
#include "io/read_ceiling.h"
#include "load_engine.h"
#include "stream_flags.h"
#include "token_ids.h"

namespace deltafin::apps {
namespace {

using base::fail;

struct PassSample {
  double wall_seconds = 0;
  int rows = 0;    // rows the pass ran
  double ids = 0;  // ids the pass generated
  PassFigures figures;
};

std::vector<int> parse_widths(const std::string& text) {
  std::vector<int> widths;
  for (const int32_t w : parse_token_ids(text)) {
    if (w < 1 || w > 17) fail("deltafin bench verify: each --widths entry must be in 1..17");
    widths.push_back(w);
  }
  if (widths.empty()) fail("deltafin bench verify: --widths is empty");
  return widths;
}

// The passes of one generate call over the prompt with the given speculation.
std::vector<PassSample> timed_passes(Engine& engine, const std::vector<int32_t>& prompt,
                                     int n_tokens, const SpeculationOptions& speculation,
                                     std::vector<int32_t>* ids) {
  std::unique_ptr<Session> session = engine.new_session();
  GenerateOptions gen;
  gen.max_new_tokens = n_tokens + 1;  // the first id comes from the prompt's pass
  gen.stop_at_eos = false;
  gen.speculation = speculation;
  std::vector<PassSample> passes;
  StreamStats last;
  base::Stopwatch time;
  bool prompt_done = false;
  gen.on_pass = [&](const PassReport& report) {
    const double wall = time.elapsed_seconds();
    const StreamStats now = engine.stream_stats();
    passes.push_back({wall, report.rows, report.accepted + 1.0, pass_figures(last, now, wall)});
    last = now;
    time.restart();
  };
  const GenerateResult result = session->generate(prompt, gen, [&](int32_t) {
    if (!prompt_done) {
      prompt_done = true;
      last = engine.stream_stats();
      time.restart();
    }
    return true;
  });
  if (ids) *ids = result.ids;
  return passes;
}

}  // namespace

int run_bench_verify(Args& args) {
  EngineOptions options;
  options.drafters = DrafterLoad::kOff;  // the script is the drafter
  options.model_dir = args.required("model");
  const std::vector<int> widths = parse_widths(args.get("widths", "1,2,4,8"));
  const long long n_tokens = args.get_int("tokens", 16);
  const long long n_prompt = args.get_int("prompt-tokens", 4);
  const long long accept = args.get_int("accept", -1);
  const long long reps = args.get_int("reps", 3);
  const bool json = args.flag("json");
  const bool args_keep_cache = args.flag("keep-page-cache");
  read_stream_flags(args, &options);
  args.check_done();
  if (n_tokens < 2 || n_prompt < 1 || reps < 1)
    fail("deltafin bench verify: need --tokens >= 2, --prompt-tokens >= 1, --reps >= 1");

  const ModelShards model = model_shards(options.model_dir, !args_keep_cache);
  const std::vector<std::string>& shards = model.paths;
  const uint64_t smallest = model.smallest_bytes;
  const format::ModelConfig config = format::load_config(options.model_dir);
  const int64_t moe_layers = std::max<int64_t>(1, config.count_layers(format::MlpKind::kMoe));
  std::unique_ptr<Engine> engine = load_engine(options);
  io::CeilingOptions copt;
  copt.queues = {io::QueueKind::kAuto};
  copt.pages = {io::PageKind::kHuge};
  copt.depths = {1, 2, 4, 8};
  copt.read_bytes = std::min<uint64_t>(io::kK3ExpertSpanBytes, smallest / 2 / 4096 * 4096);
  copt.bytes_per_repetition = std::min<uint64_t>(500'000'000, 512 * copt.read_bytes);
  double ceiling_gbps = 0;
  const auto measure_ceiling = [&] {
    try {
      ceiling_gbps = std::max(ceiling_gbps, io::measure_read_ceiling(shards, copt).ceiling_gbps);
    } catch (const base::Error& e) {
      base::log_warn("bench verify: no read ceiling: ", e.what());
    }
  };
  measure_ceiling();

  const int64_t vocab = engine->info().vocab_size;
  const std::vector<int32_t> prompt = bench_prompt(n_prompt, vocab);
  SpeculationOptions off;
  off.mode = Speculation::kOff;
  std::vector<int32_t> greedy;
  timed_passes(*engine, prompt, static_cast<int>(n_tokens), off, &greedy);

  // The drafts: the model's own ids, each pass's (accept + 1)-th draft made wrong with --accept.
  std::map<int, SpeculationOptions> plans;
  for (const int w : widths) {
    SpeculationOptions s;
    s.mode = w == 1 ? Speculation::kOff : Speculation::kScript;
    s.draft_max = s.draft_min = w - 1;
    s.script = greedy;
    if (accept >= 0 && accept < w - 1) {
      for (size_t at = 1 + accept; at < s.script.size(); at += accept + 1)
        s.script[at] = static_cast<int32_t>((s.script[at] + 1) % vocab);
    }
    plans[w] = s;
  }
  std::map<int, std::vector<PassSample>> samples;
  for (long long r = 0; r < reps; ++r) {
    for (const int w : widths) {  // interleaved: drift on the machine spreads over every width
      std::vector<int32_t> ids;
      const std::vector<PassSample> passes =
          timed_passes(*engine, prompt, static_cast<int>(n_tokens), plans[w], &ids);
      if (ids != greedy) fail("bench verify: width ", w, " changed the ids (a bug: report it)");
      // The last passes are cut to the ids still wanted: only full-width passes count.
      for (const PassSample& p : passes)
        if (p.rows == w) samples[w].push_back(p);
    }
  }
  measure_ceiling();
  // The passes' reads ran at this rate while the disk had work: the device can do at least that,
  // so a ceiling measured lower (drift between the measurements) gives way to it, as in bench
  // decode. Otherwise the floor would be overstated and the ratios flatter the engine.
  double busy = 0, read = 0;
  for (const auto& [w, passes] : samples) {
    for (const PassSample& p : passes) {
      busy += p.figures.busy_seconds;
      read += static_cast<double>(p.figures.read_bytes());
    }
  }
  const double achieved_gbps = busy > 0 ? read / busy / 1e9 : 0;
  ceiling_gbps = std::max(ceiling_gbps, achieved_gbps);

  std::ostringstream o;
  o.precision(6);
  const std::string dir = json_escaped(options.model_dir);
  o << "{\"model\":\"" << dir << "\",\"tokens\":" << n_tokens << ",\"accept\":" << accept
    << ",\"reps\":" << reps << ",\"device_ceiling_gbps\":" << ceiling_gbps
    << ",\"achieved_read_gbps\":" << achieved_gbps << ",\"widths\":[";
  double one_row = 0;
  bool first = true;
  for (const int w : widths) {
    std::vector<double> wall, per_id, floor, spine, experts, requested;
    for (const PassSample& p : samples[w]) {
      wall.push_back(p.wall_seconds);
      per_id.push_back(p.wall_seconds / p.ids);
      floor.push_back(ceiling_gbps > 0 ? p.figures.needed_bytes / (ceiling_gbps * 1e9) : 0);
      spine.push_back(static_cast<double>(p.figures.spine_bytes));
      experts.push_back(static_cast<double>(p.figures.expert_bytes));
      requested.push_back(static_cast<double>(p.figures.requested) / moe_layers);
    }
    const Spread ws = spread(wall), fs = spread(floor), ps = spread(per_id);
    if (w == 1) one_row = ws.median;
    const auto triple = [&](const char* name, const Spread& s) {
      o << ",\"" << name << "\":[" << s.min << "," << s.median << "," << s.max << "]";
    };
    o << (first ? "" : ",") << "{\"width\":" << w << ",\"passes\":" << wall.size();
    triple("pass_seconds", ws);
    triple("seconds_per_id", ps);
    triple("io_floor_seconds", fs);
    o << ",\"vs_one_row\":" << (one_row > 0 ? ws.median / one_row : 0)
      << ",\"vs_io_floor\":" << (fs.median > 0 ? ws.median / fs.median : 0)
      << ",\"spine_bytes\":" << spread(spine).median
      << ",\"expert_bytes\":" << spread(experts).median
      << ",\"experts_per_moe_layer\":" << spread(requested).median << "}";
    first = false;
    if (!json) {
      std::printf(
          "width %d: pass %.4f s (min %.4f, max %.4f; %zu passes), %.2fx the 1-row pass, "
          "%.4f s per id, I/O floor %.4f s (ratio %.2f), spine %.1f MB, experts %.1f MB, "
          "%.1f experts per MoE layer\n",
          w, ws.median, ws.min, ws.max, wall.size(), one_row > 0 ? ws.median / one_row : 0.0,
          ps.median, fs.median, fs.median > 0 ? ws.median / fs.median : 0.0,
          spread(spine).median / 1e6, spread(experts).median / 1e6, spread(requested).median);
    }
  }
  o << "],\"ids\":" << token_ids_json(greedy) << "}";
  if (json) std::printf("%s\n", o.str().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace deltafin::apps
