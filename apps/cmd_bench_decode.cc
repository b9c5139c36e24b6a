// `deltafin bench decode --model DIR [--tokens N] [--prompt-tokens P | --ids 1,2,3] [--json]` plus
// the streaming and speculation flags (stream_flags.h, speculation_flags.h): drops the shards from
// the page cache, measures the device's read ceiling on them in this process (as bench-io does, at
// depths 1-8: after the load and after the run; the highest figure counts, and so does the rate the
// decode's own reads reached), loads the model, runs a P-token prompt, then N greedy decode steps,
// and reports time per token against two floors. The I/O floor: the bytes each token needed from
// disk (its requested experts that were not in memory from an earlier use, and every streamed spine
// layer) divided by the ceiling; speculative reads that went unused count in the bytes read but not
// in the floor, so waste shows in the ratio. The compute floor: every weight the token multiplies,
// at the GEMV rates of the engine's own kernels over RAM measured after the run. With streamed
// experts, a peak RSS above the budget is an error. On the GPU backend (--device cuda) the disk
// and RAM figures stay zero and a "gpu" object holds the GPU's: per token the bytes the pass
// touched in VRAM and its stream operations (the model's counters), against a floor of those bytes
// at the rate of a pure device read plus the operations at their costs, both measured in this run
// after the decode (gpu_floor.h).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_budget.h"
#include "base/stopwatch.h"
#include "base/thread_pool.h"
#include "bench_common.h"
#include "bench_verify.h"
#include "command.h"
#include "deltafin/engine.h"
#include "gpu_floor.h"
#include "gpu_probe.h"
#include "io/huge_buffer.h"
#include "io/read_ceiling.h"
#include "kernels/weight_matrix.h"
#include "load_engine.h"
#include "speculation_flags.h"
#include "stream_flags.h"
#include "token_ids.h"

namespace deltafin::apps {
namespace {

// Per drive over the decode passes: bytes, busy time, achieved rate and share of the drive's
// cached ceiling, and the I/O floor of perfect balance, the needed bytes per token over the sum
// of the ceilings of the drives read (0 unless all of those are measured; docs/DRIVES.md).
std::string drives_json(const std::vector<PassFigures>& passes, double n_tokens) {
  std::vector<DriveFigures> total;
  uint64_t needed = 0;
  for (const PassFigures& f : passes) {
    needed += f.needed_bytes;
    for (size_t d = 0; d < f.drives.size(); ++d) {
      if (total.size() <= d) total.push_back({f.drives[d].name, 0, 0, f.drives[d].ceiling_gbps});
      total[d].bytes += f.drives[d].bytes;
      total[d].busy_seconds += f.drives[d].busy_seconds;
    }
  }
  std::ostringstream o;
  double sum_ceiling = 0;
  bool all_known = !total.empty();
  o << "[";
  for (size_t d = 0; d < total.size(); ++d) {
    const DriveFigures& t = total[d];
    const double gbps = t.busy_seconds > 0 ? t.bytes / t.busy_seconds / 1e9 : 0;
    o << (d ? "," : "") << "{\"device\":\"" << t.name << "\",\"bytes\":" << t.bytes
      << ",\"busy_seconds\":" << t.busy_seconds << ",\"achieved_gbps\":" << gbps
      << ",\"ceiling_gbps\":" << t.ceiling_gbps
      << ",\"share_of_ceiling\":" << (t.ceiling_gbps > 0 ? gbps / t.ceiling_gbps : 0) << "}";
    if (t.bytes == 0) continue;  // not read during the decode (the spine's drive, resident)
    sum_ceiling += t.ceiling_gbps;
    all_known = all_known && t.ceiling_gbps > 0;
  }
  o << "],\"io_floor_sum_of_ceilings_seconds_per_token\":"
    // sum_ceiling is 0 when no drive was read (a GPU decode served from its RAM tier): no floor,
    // not 0/0, which JSON cannot hold.
    << (all_known && n_tokens > 0 && sum_ceiling > 0 ? needed / n_tokens / (sum_ceiling * 1e9) : 0);
  return o.str();
}

using base::fail;

// /proc/self/io read_bytes: what this process made the block layer fetch (mmap faults included),
// the one byte count that covers the mapped store too.
uint64_t process_read_bytes() {
  std::ifstream in("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return 0;
}

// What the engine's own GEMV kernels sustain over weights that are in RAM but not in any CPU
// cache, in GB of weights per second: BF16 (the spine) and MXFP4 (the experts, K3's shapes), and
// int8 (the lossy int8 spine) when it is on.
struct GemvRates {
  double bf16_gbps = 0, mxfp4_gbps = 0, int8_gbps = 0;
};

// Each repetition multiplies a different kChunkBytes slice of a `bytes` arena, so with an arena
// several times the last-level cache (L3 is 300 MiB on the machines we measure on) every weight
// byte comes from DRAM, as the spine's do during a token. At least one chunk is used.
constexpr size_t kGemvArenaBytes = size_t{2} << 30;

GemvRates measure_gemv(size_t bytes, int repetitions, bool int8) {
  constexpr size_t kChunkBytes = size_t{256} << 20;
  constexpr int64_t kBf16Cols = 7168, kMxCols = 3584;
  const size_t n_chunks = std::max<size_t>(1, bytes / kChunkBytes);
  const int64_t bf16_rows = static_cast<int64_t>(kChunkBytes / (kBf16Cols * 2));
  const int64_t mx_rows = static_cast<int64_t>(kChunkBytes / (kMxCols / 2 + kMxCols / 32));
  const size_t packed = static_cast<size_t>(mx_rows) * kMxCols / 2;
  io::HugeBuffer buf(n_chunks * kChunkBytes);
  // MXFP4: zero codes, scale bytes 127 (2^0), packed blocks then scales as a stored expert has.
  for (size_t c = 0; c < n_chunks; ++c) {
    uint8_t* chunk = buf.data() + c * kChunkBytes;
    std::fill(chunk + packed, chunk + packed + mx_rows * kMxCols / 32, uint8_t{127});
  }
  std::vector<float> x(kBf16Cols, 0.5f), y(std::max(bf16_rows, mx_rows));
  size_t next = 0;
  auto rate = [&](auto matrix_at, uint64_t weight_bytes) {
    std::vector<double> gbps;
    for (int i = 0; i < repetitions; ++i) {
      const kernels::WeightMatrix w = matrix_at(buf.data() + (next++ % n_chunks) * kChunkBytes);
      const base::Stopwatch gemv_time;
      kernels::matmul(w, x.data(), 1, y.data());
      const double s = gemv_time.elapsed_seconds();
      gbps.push_back(weight_bytes / s / 1e9);
    }
    return median(gbps);
  };
  GemvRates r;
  r.bf16_gbps = rate(
      [&](uint8_t* base) {
        return kernels::WeightMatrix{kernels::WeightDType::kBF16, base, nullptr, bf16_rows,
                                     kBf16Cols};
      },
      static_cast<uint64_t>(bf16_rows) * kBf16Cols * 2);
  r.mxfp4_gbps = rate(
      [&](uint8_t* base) {
        return kernels::WeightMatrix{kernels::WeightDType::kMxfp4, base, base + packed, mx_rows,
                                     kMxCols};
      },
      packed + static_cast<uint64_t>(mx_rows) * kMxCols / 32);
  if (int8) {
    // Zero codes and zero scales: the kernel's time does not depend on the values.
    const int64_t i8_rows = static_cast<int64_t>(kChunkBytes / (kBf16Cols + 4));
    r.int8_gbps = rate(
        [&](uint8_t* base) {
          return kernels::WeightMatrix{kernels::WeightDType::kInt8, base,
                                       base + static_cast<size_t>(i8_rows) * kBf16Cols, i8_rows,
                                       kBf16Cols};
        },
        static_cast<uint64_t>(i8_rows) * (kBf16Cols + 4));
  }
  return r;
}

int run_bench(Args& args) {
  const std::string what = args.take_positional();
  if (what == "verify") return run_bench_verify(args);
  if (what != "decode")
    fail(
        "deltafin bench: expected `deltafin bench decode --model DIR ...` or `deltafin bench "
        "verify --model DIR ...`");
  EngineOptions options;
  options.model_dir = args.required("model");
  const long long n_tokens = args.get_int("tokens", 8);
  // --ids: a chosen prompt (one whose continuation repeats, or one whose drafts fail), for the
  // speculation figures and the peers' comparison; otherwise the bench's own P-token prompt.
  const std::string ids_text = args.get("ids");
  const long long n_prompt = args.get_int("prompt-tokens", 4);
  if (!ids_text.empty() && args.has("prompt-tokens"))
    fail("deltafin bench decode: give --ids or --prompt-tokens, not both");
  const bool json = args.flag("json");
  const bool keep_cache = args.flag("keep-page-cache");
  const long long ceiling_reps = args.get_int("ceiling-reps", 3);
  const double ceiling_gb = args.get_double("ceiling-gb", 0.5);
  read_stream_flags(args, &options);
  const SpeculationOptions speculation = read_speculation_flags(args, "bench decode");
  options.drafters = drafters_for(speculation);
  args.check_done();
  if (n_tokens < 1 || n_prompt < 1)
    fail("deltafin bench decode: --tokens and --prompt-tokens must be >= 1");
  if (ceiling_reps < 1 || ceiling_gb <= 0) fail("deltafin bench decode: bad ceiling options");

  const ModelShards model = model_shards(options.model_dir, !keep_cache);
  const std::vector<std::string>& shards = model.paths;
  const uint64_t smallest = model.smallest_bytes;
  io::CeilingOptions copt;
  copt.queues = {io::QueueKind::kAuto};
  copt.pages = {io::PageKind::kHuge};
  copt.depths = {1, 2, 4, 8};
  copt.repetitions = static_cast<int>(ceiling_reps);
  // The disk's rate drifts on a shared machine; it is measured right before and right after the
  // decode, and the floor takes the higher figure so the ratio never flatters the engine. Reads
  // are K3-expert-sized, and also the engine's piece size when it reads in pieces (some devices
  // are faster at 4 MiB: docs/PERFORMANCE.md). Models whose shards are smaller than that (tests,
  // the demo) get reads of half their smallest shard so there is still a figure.
  const uint64_t largest_read = smallest / 2 / 4096 * 4096;
  std::vector<uint64_t> read_sizes = {std::min<uint64_t>(io::kK3ExpertSpanBytes, largest_read)};
  const auto measure_ceiling = [&](const char* when) {
    double gbps = 0;
    std::string note;
    for (uint64_t bytes : read_sizes) {
      copt.read_bytes = bytes;
      // 512 reads per configuration and repetition are plenty for a steady figure; small pieces
      // (4 KiB in the tests) would otherwise take 100,000s of reads.
      copt.bytes_per_repetition =
          std::min<uint64_t>(static_cast<uint64_t>(ceiling_gb * 1e9), 512 * bytes);
      try {
        const io::CeilingReport r = io::measure_read_ceiling(shards, copt);
        gbps = std::max(gbps, r.ceiling_gbps);
        if (r.mode != io::ReadMode::kDirect) note = "buffered reads: page-cache figures";
      } catch (const base::Error& e) {
        note = e.what();  // shards smaller than one read (tiny models): no ceiling
      }
    }
    base::log_info("bench decode: read ceiling ", when, " ", gbps, " GB/s",
                   note.empty() ? "" : " (", note, note.empty() ? "" : ")");
    return gbps;
  };

  const base::Stopwatch load_time;
  std::unique_ptr<Engine> engine = load_engine(options);
  const double load_seconds = load_time.elapsed_seconds();
  const MemoryPlanInfo plan = engine->memory_plan();
  // The int8 spine is lossy: the figures are labelled so they are never read as the exact path's
  // (a copy: the engine is gone before they print).
  const ModelInfo info = engine->info();
  // The GPU backend reads nothing from the disk and multiplies nothing in RAM: the CPU's ceilings
  // would measure nothing the decode depends on.
  const bool on_gpu = plan.device != "cpu";
  // ... unless its expert cache's misses are read from the disk (--experts stream): then the
  // disk's ceiling and floor are the figures that bound it.
  const bool measure_disk = !on_gpu || plan.streaming;
  if (plan.read_piece_bytes > 0 && static_cast<uint64_t>(plan.read_piece_bytes) < read_sizes[0])
    read_sizes.push_back(static_cast<uint64_t>(plan.read_piece_bytes));
  // After the load, not before it: a cloud disk that idled gives a burst the decode never sees.
  const double ceiling_before_gbps = measure_disk ? measure_ceiling("before the decode") : 0;
  std::unique_ptr<Session> session = engine->new_session();
  const int64_t vocab = engine->info().vocab_size;
  const std::vector<int32_t> prompt =
      ids_text.empty() ? bench_prompt(n_prompt, vocab) : parse_token_ids(ids_text);
  for (int32_t id : prompt)
    if (id >= vocab)
      fail("deltafin bench decode: --ids has ", id, ", past the vocabulary (", vocab, ")");

  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(n_tokens) + 1;  // the first id needs no decode pass
  gen.stop_at_eos = false;
  gen.speculation = speculation;
  // Per decode or verify pass: its figures and the ids it generated (1 + its accepted drafts).
  std::vector<PassFigures> passes;
  std::vector<PassReport> reports;
  std::vector<uint64_t> proc_bytes;
  StreamStats last = engine->stream_stats();
  uint64_t last_io = process_read_bytes();
  std::vector<GpuPass> gpu_passes;
  GpuStats last_gpu = engine->gpu_stats(), prompt_gpu;
  base::Stopwatch token_time;
  double prompt_seconds = 0;
  bool prompt_done = false;
  gen.on_pass = [&](const PassReport& report) {
    const double wall = token_time.elapsed_seconds();
    const GpuStats g = engine->gpu_stats();
    gpu_passes.push_back({stats_difference(g, last_gpu), wall, report.accepted + 1});
    last_gpu = g;
    const StreamStats s = engine->stream_stats();
    const uint64_t io = process_read_bytes();
    passes.push_back(pass_figures(last, s, wall));
    reports.push_back(report);
    proc_bytes.push_back(io - last_io);
    base::log_info("pass ", passes.size(), " (", report.accepted + 1, " ids of ", report.rows,
                   " rows): ", describe_pass(passes.back()));
    last = s;
    last_io = io;
    token_time.restart();  // stats and logging are not the pass's time
  };
  const GenerateResult result = session->generate(prompt, gen, [&](int32_t) {
    if (!prompt_done) {  // the first id comes from the prompt's pass
      prompt_seconds = token_time.elapsed_seconds();
      prompt_done = true;
      const GpuStats g = engine->gpu_stats();
      prompt_gpu = stats_difference(g, last_gpu);
      last_gpu = g;
      last = engine->stream_stats();
      last_io = process_read_bytes();
      token_time.restart();
    }
    return true;
  });
  int64_t decoded = 0;
  for (const PassReport& r : reports) decoded += r.accepted + 1;
  DF_ASSERT(decoded == n_tokens);
  const uint64_t rss_peak = base::peak_rss_bytes();  // before the GEMV measurement's buffer
  const SessionStats session_stats = session->stats();
  // The engine's memory goes back before the GEMV arena is taken. The arena takes at most half the
  // budget (the rest covers what the process still holds): a 2 GiB one under a smaller memory
  // cgroup got the run killed after its decode.
  session.reset();
  engine.reset();
  GemvRates gemv;
  GpuCosts gpu_costs;
  if (on_gpu) {
    // A pure read of at least a token's bytes (and of 1 GiB, far beyond L2), on VRAM the model
    // has given back.
    std::vector<double> touched;
    for (const GpuPass& p : gpu_passes)
      touched.push_back(static_cast<double>(p.stats.touched_bytes()) / p.ids);
    const auto read_bytes = std::max<uint64_t>(static_cast<uint64_t>(median(touched)), 1ull << 30);
    gpu_costs = measure_gpu_costs(plan.device, read_bytes, static_cast<int>(ceiling_reps));
    base::log_info("bench decode: device read ", gpu_costs.read_gbps, " GB/s over ",
                   base::format_bytes(gpu_costs.read_bytes), "; per operation: launch ",
                   gpu_costs.launch_seconds * 1e6, " us, copy ", gpu_costs.copy_seconds * 1e6,
                   " us, host wait ", gpu_costs.sync_seconds * 1e6, " us; pinned host to device ",
                   gpu_costs.pinned_h2d_gbps, " GB/s");
  } else {
    const size_t gemv_arena = std::min(kGemvArenaBytes, static_cast<size_t>(plan.budget_bytes / 2));
    gemv = measure_gemv(gemv_arena, 8, info.lossy);
    base::log_info("bench decode: GEMV over RAM: BF16 ", gemv.bf16_gbps, " GB/s, MXFP4 ",
                   gemv.mxfp4_gbps, " GB/s",
                   info.lossy ? base::str_cat(", int8 ", gemv.int8_gbps, " GB/s") : std::string(),
                   gemv_arena < kGemvArenaBytes
                       ? " (arena cut to the budget: part of it may be served from the CPU cache)"
                       : "");
  }
  const double ceiling_after_gbps = measure_disk ? measure_ceiling("after the decode") : 0;

  double busy = 0, read = 0;
  for (const PassFigures& f : passes) {
    busy += f.busy_seconds;
    read += static_cast<double>(f.read_bytes());
  }
  // The decode's reads ran at this rate while the disk had work: the device can do at least that,
  // so a ceiling measured lower (drift between the measurements) gives way to it.
  const double achieved_gbps = busy > 0 ? read / busy / 1e9 : 0;
  const double ceiling_gbps = std::max({ceiling_before_gbps, ceiling_after_gbps, achieved_gbps});
  // Per-token figures of each pass: its time, waits and floor over the ids it generated.
  std::vector<double> wall, floor, io_wait, disk_idle, layer_threads;
  double needed = 0, proc = 0, total_wall = 0;
  uint64_t requested = 0, hits = 0, pf_hits = 0, actual = 0, matched = 0, pf_reads = 0;
  for (size_t i = 0; i < passes.size(); ++i) {
    const PassFigures& f = passes[i];
    const double ids = reports[i].accepted + 1;
    wall.push_back(f.wall_seconds / ids);
    io_wait.push_back(f.io_wait_seconds / ids);
    layer_threads.push_back(f.layer_threads);
    // Time in the pass with no read in flight: what the disk could not overlap (the lm_head, the
    // first layers before a route is known), the part of the ratio no read rate can win back.
    disk_idle.push_back(std::max(0.0, f.wall_seconds - f.busy_seconds) / ids);
    floor.push_back(ceiling_gbps > 0 ? f.needed_bytes / (ceiling_gbps * 1e9) / ids : 0);
    needed += static_cast<double>(f.needed_bytes);
    proc += static_cast<double>(proc_bytes[i]);
    total_wall += f.wall_seconds;
    requested += f.requested;
    hits += f.cache_hits;
    pf_hits += f.prefetch_hits;
    actual += f.predicted_actual;
    matched += f.predicted_matched;
    pf_reads += f.prefetch_reads;
  }
  const double n = static_cast<double>(decoded);  // per-token totals divide by the ids
  const double spt = median(wall), floor_seconds = median(floor);
  // The compute floor: every spine weight once per token at the BF16 rate (the layers' at the
  // int8 rate under --spine-dtype int8; the globals stay at BF16's, an int8 lm_head included),
  // each requested expert once at the MXFP4 rate. With the I/O floor it makes the roofline a token
  // cannot beat when reads and compute overlap perfectly. None on the GPU (no rates measured).
  double compute_floor_seconds = 0;
  if (!on_gpu) {
    const double layer_bytes =
        static_cast<double>(plan.resident_spine_bytes + plan.streamed_spine_bytes_per_pass);
    const double spine_seconds =
        info.lossy && gemv.int8_gbps > 0
            ? layer_bytes / (gemv.int8_gbps * 1e9) + plan.global_bytes / (gemv.bf16_gbps * 1e9)
            : (layer_bytes + plan.global_bytes) / (gemv.bf16_gbps * 1e9);
    const double expert_bytes = static_cast<double>(requested) / n * plan.expert_span_bytes;
    compute_floor_seconds = spine_seconds + expert_bytes / (gemv.mxfp4_gbps * 1e9);
  }
  const double roofline_seconds = std::max(floor_seconds, compute_floor_seconds);

  const bool within = rss_peak <= plan.budget_bytes;

  // The GPU's VRAM tiers over the decode (zero on the CPU).
  PassFigures vram;
  for (const PassFigures& f : passes) {
    vram.gpu_resident_spine_bytes += f.gpu_resident_spine_bytes;
    vram.gpu_streamed_spine_bytes += f.gpu_streamed_spine_bytes;
    vram.gpu_expert_hits += f.gpu_expert_hits;
    vram.gpu_expert_misses += f.gpu_expert_misses;
    vram.gpu_expert_hit_bytes += f.gpu_expert_hit_bytes;
    vram.gpu_expert_miss_bytes += f.gpu_expert_miss_bytes;
    vram.gpu_expert_ram_hits += f.gpu_expert_ram_hits;
    vram.gpu_expert_ram_hit_bytes += f.gpu_expert_ram_hit_bytes;
    vram.gpu_expert_disk_reads += f.gpu_expert_disk_reads;
    vram.gpu_expert_disk_bytes += f.gpu_expert_disk_bytes;
    vram.gpu_spine_h2d_seconds += f.gpu_spine_h2d_seconds;
    vram.gpu_expert_h2d_seconds += f.gpu_expert_h2d_seconds;
    vram.gpu_spine_fill_wait_seconds += f.gpu_spine_fill_wait_seconds;
    vram.gpu_expert_source_wait_seconds += f.gpu_expert_source_wait_seconds;
  }
  // The link rate each tier's copies got while they ran, and its share of the pinned copy rate
  // measured in this run.
  const auto rate = [](double bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0.0; };
  const double spine_h2d_gbps = rate(vram.gpu_streamed_spine_bytes, vram.gpu_spine_h2d_seconds);
  const double expert_h2d_gbps = rate(vram.gpu_expert_miss_bytes, vram.gpu_expert_h2d_seconds);

  const double h2d_per_token =
      static_cast<double>(vram.gpu_streamed_spine_bytes + vram.gpu_expert_miss_bytes) / n;
  const double h2d_over_wall_gbps = spt > 0 ? h2d_per_token / spt / 1e9 : 0;
  const auto share_of_pinned = [&](double gbps) {
    return gpu_costs.pinned_h2d_gbps > 0 ? gbps / gpu_costs.pinned_h2d_gbps : 0.0;
  };

  std::ostringstream o;
  o.precision(6);
  const std::string dir = json_escaped(options.model_dir);
  o << "{\"model\":\"" << dir << "\",\"backend\":\"" << plan.device << "\",\"spine_dtype\":\""
    << info.spine_dtype << "\",\"lossy\":" << (info.lossy ? "true" : "false") << ",\"experts\":\""
    << (plan.streaming ? "stream" : "mapped")
    << "\",\"prefetch\":" << (plan.lookahead ? "true" : "false")
    << ",\"read_depth\":" << plan.read_depth << ",\"read_piece_bytes\":" << plan.read_piece_bytes
    << ",\"tokens\":" << decoded << ",\"prompt_tokens\":" << prompt.size()
    << ",\"load_seconds\":" << load_seconds << ",\"prompt_seconds\":" << prompt_seconds
    << ",\"prompt_tokens_per_second\":"
    << (prompt_seconds > 0 ? static_cast<double>(prompt.size()) / prompt_seconds : 0)
    << ",\"seconds_per_token\":" << spt
    << ",\"seconds_per_token_min\":" << *std::min_element(wall.begin(), wall.end())
    << ",\"seconds_per_token_max\":" << *std::max_element(wall.begin(), wall.end())
    << ",\"io_wait_seconds_per_token\":" << median(io_wait)
    << ",\"disk_idle_seconds_per_token\":" << median(disk_idle)
    << ",\"layer_threads\":" << median(layer_threads)
    << ",\"threads\":" << base::default_pool().size()
    << ",\"disk_read_bytes_per_token\":" << static_cast<uint64_t>(read / n)
    << ",\"process_read_bytes_per_token\":" << static_cast<uint64_t>(proc / n)
    << ",\"needed_bytes_per_token\":" << static_cast<uint64_t>(needed / n)
    << ",\"achieved_read_gbps\":" << achieved_gbps
    << ",\"read_gbps_over_wall\":" << (total_wall > 0 ? read / total_wall / 1e9 : 0)
    << ",\"device_ceiling_gbps\":" << ceiling_gbps
    << ",\"device_ceiling_before_gbps\":" << ceiling_before_gbps
    << ",\"device_ceiling_after_gbps\":" << ceiling_after_gbps
    << ",\"io_floor_seconds_per_token\":" << floor_seconds
    << ",\"ratio\":" << (floor_seconds > 0 ? spt / floor_seconds : 0)
    << ",\"gemv_bf16_gbps\":" << gemv.bf16_gbps << ",\"gemv_mxfp4_gbps\":" << gemv.mxfp4_gbps
    << ",\"gemv_int8_gbps\":" << gemv.int8_gbps
    << ",\"compute_floor_seconds_per_token\":" << compute_floor_seconds
    << ",\"roofline_seconds_per_token\":" << roofline_seconds
    << ",\"roofline_ratio\":" << (roofline_seconds > 0 ? spt / roofline_seconds : 0)
    << ",\"cache_hit_rate\":" << (requested ? static_cast<double>(hits) / requested : 0)
    << ",\"prefetch_recall\":" << (actual ? static_cast<double>(matched) / actual : 0)
    << ",\"prefetch_reads_per_token\":" << pf_reads / n
    << ",\"prefetch_hits_per_token\":" << pf_hits / n << ",\"budget_bytes\":" << plan.budget_bytes
    << ",\"expert_slots\":" << plan.expert_slots
    << ",\"resident_spine_bytes\":" << plan.resident_spine_bytes
    << ",\"streamed_layers\":" << plan.streamed_layers << ",\"vram_bytes\":" << plan.vram_bytes
    << ",\"vram_resident_layers\":" << plan.vram_resident_layers
    << ",\"vram_streamed_layers\":" << plan.vram_streamed_layers
    << ",\"vram_expert_slots\":" << plan.vram_expert_slots
    << ",\"vram_resident_spine_bytes_per_token\":" << vram.gpu_resident_spine_bytes / n
    << ",\"vram_streamed_spine_bytes_per_token\":" << vram.gpu_streamed_spine_bytes / n
    << ",\"vram_expert_hits_per_token\":" << vram.gpu_expert_hits / n
    << ",\"vram_expert_misses_per_token\":" << vram.gpu_expert_misses / n
    << ",\"vram_expert_hit_bytes_per_token\":" << vram.gpu_expert_hit_bytes / n
    << ",\"vram_expert_miss_bytes_per_token\":" << vram.gpu_expert_miss_bytes / n
    << ",\"vram_expert_ram_hits_per_token\":" << vram.gpu_expert_ram_hits / n
    << ",\"vram_expert_ram_hit_bytes_per_token\":" << vram.gpu_expert_ram_hit_bytes / n
    << ",\"vram_expert_disk_reads_per_token\":" << vram.gpu_expert_disk_reads / n
    << ",\"vram_expert_disk_bytes_per_token\":" << vram.gpu_expert_disk_bytes / n
    << ",\"vram_spine_h2d_seconds_per_token\":" << vram.gpu_spine_h2d_seconds / n
    << ",\"vram_expert_h2d_seconds_per_token\":" << vram.gpu_expert_h2d_seconds / n
    << ",\"vram_spine_fill_wait_seconds_per_token\":" << vram.gpu_spine_fill_wait_seconds / n
    << ",\"vram_expert_source_wait_seconds_per_token\":"
    << vram.gpu_expert_source_wait_seconds / n
    // What the tiers copied in over the link per token, over the wall time: when the pass waits
    // on its copies, the stream rate to set beside the pinned copy rate measured in this run.
    << ",\"vram_h2d_bytes_per_token\":" << h2d_per_token
    << ",\"vram_h2d_gbps_over_wall\":" << h2d_over_wall_gbps << ",\"vram_h2d_share_of_pinned\":"
    << share_of_pinned(h2d_over_wall_gbps)
    // Each tier's copies over the time they were busy (CUDA events): the link rate they got.
    << ",\"vram_spine_h2d_gbps\":" << spine_h2d_gbps
    << ",\"vram_expert_h2d_gbps\":" << expert_h2d_gbps
    << ",\"vram_expert_h2d_share_of_pinned\":" << share_of_pinned(expert_h2d_gbps)
    << ",\"vram_spine_h2d_share_of_pinned\":" << share_of_pinned(spine_h2d_gbps)
    << ",\"gpu_pinned_host_bytes\":" << plan.gpu_pinned_host_bytes
    << ",\"rss_peak_bytes\":" << rss_peak
    << ",\"rss_within_budget\":" << (within ? "true" : "false") << ",\"speculate\":\""
    << speculation_name(speculation.mode) << "\""
    << ",\"passes\":" << passes.size() << ",\"tokens_per_pass\":" << n / passes.size()
    << ",\"seconds_per_token_mean\":" << total_wall / n
    << ",\"drafted\":" << session_stats.drafted_tokens
    << ",\"accepted\":" << session_stats.accepted_tokens
    << ",\"verify_passes\":" << session_stats.verify_passes << ",\"pass_rows\":[";
  for (size_t i = 0; i < reports.size(); ++i) o << (i ? "," : "") << reports[i].rows;
  o << "],\"pass_accepted\":[";
  for (size_t i = 0; i < reports.size(); ++i) o << (i ? "," : "") << reports[i].accepted;
  o << "],\"pass_ms\":[";
  for (size_t i = 0; i < reports.size(); ++i) o << (i ? "," : "") << reports[i].ms;
  // A model drafter's proposal runs before its pass, outside pass_ms.
  o << "],\"pass_draft_ms\":[";
  for (size_t i = 0; i < reports.size(); ++i) o << (i ? "," : "") << reports[i].draft_ms;
  o << "],\"pass_drafters\":[";
  for (size_t i = 0; i < reports.size(); ++i)
    o << (i ? "," : "") << '"' << reports[i].drafter << '"';
  o << "],\"drafters_loaded\":[";
  for (size_t i = 0; i < plan.drafters.size(); ++i)
    o << (i ? "," : "") << '"' << plan.drafters[i] << '"';
  o << "],\"drafter_bytes\":" << plan.drafter_bytes;
  o << ",\"pass_decisions\":[";
  for (size_t i = 0; i < reports.size(); ++i)
    o << (i ? "," : "") << '"' << reports[i].decision << '"';
  // The GPU's MXFP4 arithmetic (--gpu-expert-math): "tensor" is the labelled opt-in whose bits
  // are not the exact kernels'; null on the CPU backend, which has one.
  const char* expert_math = !on_gpu                                                  ? "null"
                            : options.gpu_expert_math == GpuExpertMath::kTensorCores ? "\"tensor\""
                                                                                     : "\"exact\"";
  o << "],\"drives\":" << drives_json(passes, n) << ",\"gpu_expert_math\":" << expert_math
    << ",\"gpu\":"
    << (on_gpu ? gpu_json(gpu_passes, prompt_gpu, static_cast<int64_t>(prompt.size()),
                          prompt_seconds, gpu_costs)
               : std::string("null"))
    << ",\"ids\":" << token_ids_json(result.ids) << "}";
  if (json) {
    std::printf("%s\n", o.str().c_str());
  } else if (on_gpu) {
    const GpuDecodeFigures g = decode_figures(gpu_passes, gpu_costs);
    const double per = g.tokens > 0 ? g.tokens : 1;
    std::printf(
        "%.4f s/token on %s (median of %zu passes; min %.4f, max %.4f), floor %.4f s (%.2f GB "
        "touched per token at %.0f GB/s: %.4f s; %.0f launches, %.0f copies, %.0f waits: "
        "%.4f s), ratio %.3f, device time %.4f s/token (%.2f of the wall); prompt %.1f "
        "tokens/s\n",
        spt, plan.device.c_str(), passes.size(), *std::min_element(wall.begin(), wall.end()),
        *std::max_element(wall.begin(), wall.end()), g.floor,
        static_cast<double>(g.total.touched_bytes()) / per / 1e9, gpu_costs.read_gbps, g.read_floor,
        static_cast<double>(g.total.launches) / per, static_cast<double>(g.total.copies) / per,
        static_cast<double>(g.total.syncs) / per, g.op_overhead, g.ratio, g.device_seconds,
        g.device_share,
        prompt_seconds > 0 ? static_cast<double>(prompt.size()) / prompt_seconds : 0.0);
    if (plan.vram_streamed_layers > 0 || plan.vram_expert_slots > 0)
      std::printf(
          "VRAM tiers: host-to-device spine %.2f GB/s, experts %.2f GB/s (pinned copies %.2f "
          "GB/s); expert misses per token from RAM %.1f, from disk %.1f (%.1f MB); disk floor "
          "%.4f s/token (ratio %.3f)\n",
          spine_h2d_gbps, expert_h2d_gbps, gpu_costs.pinned_h2d_gbps, vram.gpu_expert_ram_hits / n,
          vram.gpu_expert_disk_reads / n, vram.gpu_expert_disk_bytes / n / 1e6, floor_seconds,
          floor_seconds > 0 ? spt / floor_seconds : 0.0);
  } else {
    if (info.lossy) std::printf("[%s spine, lossy] ", info.spine_dtype.c_str());
    std::printf(
        "%.3f s/token (median of %zu passes; min %.3f, max %.3f), I/O floor %.3f s, ratio %.3f, "
        "compute floor %.3f s, roofline ratio %.3f, "
        "%.2f GB read per token at %.2f GB/s (ceiling %.2f), disk idle %.3f s, "
        "peak RSS %s of budget %s\n",
        spt, passes.size(), *std::min_element(wall.begin(), wall.end()),
        *std::max_element(wall.begin(), wall.end()), floor_seconds,
        floor_seconds > 0 ? spt / floor_seconds : 0.0, compute_floor_seconds,
        roofline_seconds > 0 ? spt / roofline_seconds : 0.0, read / n / 1e9, achieved_gbps,
        ceiling_gbps, median(disk_idle), base::format_bytes(rss_peak).c_str(),
        base::format_bytes(plan.budget_bytes).c_str());
  }
  std::fflush(stdout);
  // On the GPU the spine's mapped pages (uploaded, or read into the pinned ring every pass) count
  // in VmRSS though they are reclaimable page cache; its pinned memory and RAM tier are sized
  // within the budget at load (docs/CUDA.md), so there the peak is reported, not enforced.
  if (plan.streaming && !within && on_gpu)
    base::log_warn("bench decode: peak RSS ", base::format_bytes(rss_peak),
                   " exceeds the memory budget ", base::format_bytes(plan.budget_bytes),
                   " (on the GPU this includes the mapped spine's page-cache pages)");
  if (plan.streaming && !within && !on_gpu)
    fail("bench decode: peak RSS ", base::format_bytes(rss_peak), " exceeds the memory budget ",
         base::format_bytes(plan.budget_bytes));
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(bench, "bench",
                 "`bench decode --model DIR --tokens N [--json]`: decode speed against the I/O "
                 "floor and the device's ceiling; `bench verify --model DIR [--widths 1,2,4,8] "
                 "[--accept K]`: the cost of a verify pass by width",
                 run_bench);

}  // namespace deltafin::apps
