// The GPU model end to end through the public engine API (ctest `cuda_gpu_model`, label `gpu`):
// for every K3 oracle case under FIXTURES, --device cuda logits within 5e-4 of max|reference| at
// every prompt position with the same argmax, the greedy ids exactly (speculation off, n-gram and
// a script that is refused part-way, so verify passes commit a prefix), the largest CPU-GPU logit
// difference printed, each row's logits bit-identical whether passes hold 1..16 rows, and the
// counters bench decode's floor uses (Engine::gpu_stats) sane for one decode pass, with every
// weight resident and with the VRAM tiers; and the VRAM tiers: logits bit-identical whether the
// weights were resident, streamed spine layers or a 1-3 slot expert cache (prompts, decode steps,
// the state verify passes leave), the misses from the mapping or, with --experts stream, read
// from the disk with O_DIRECT into a RAM tier of 2-3 experts or of all of them. The case checks
// but the counters run again under --gpu-expert-math tensor, printing its largest logit
// difference to the exact kernels.
// Own main, no gtest: exit 77 (skipped) without a GPU, 1 on a failure.
//   deltafin_gpu_model_tests [FIXTURES]   (default: the source tree's tests/fixtures)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "deltafin/engine.h"
#include "testing/reference_tensor.h"

namespace {

using deltafin::Engine;
using deltafin::EngineOptions;
using deltafin::GpuExpertMath;

int g_checks = 0, g_failures = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

// One tensor of the case's reference.safetensors as doubles (F32/F64 logits, I32 ids).
std::vector<double> reference(const std::string& dir, const std::string& name) {
  return deltafin::testing::read_reference_tensor(dir + "/reference.safetensors", name);
}

std::vector<int32_t> ids_of(const std::vector<double>& v) {
  return std::vector<int32_t>(v.begin(), v.end());
}

// ram_slots != 0: --experts stream, the cache's misses read from the disk with O_DIRECT into a
// RAM tier of that many experts (-1: as many as --memory-budget holds, every one here).
std::unique_ptr<Engine> load(const std::string& dir, const char* device, int spine_layers = -1,
                             int expert_slots = 0, int ram_slots = 0,
                             GpuExpertMath math = GpuExpertMath::kExact) {
  EngineOptions o;
  o.model_dir = dir;
  o.device = device;
  o.gpu_expert_math = math;
  o.drafters = deltafin::DrafterLoad::kOff;
  o.vram_spine_layers = spine_layers;
  o.vram_expert_slots = expert_slots;
  if (ram_slots != 0) {
    o.experts = deltafin::ExpertMode::kStream;
    o.expert_slots = std::max(ram_slots, 0);
  }
  return Engine::load(o);
}

template <typename T>
int64_t argmax(const T* row, int64_t n) {
  return std::max_element(row, row + n) - row;
}

std::vector<int32_t> greedy(Engine& engine, const std::vector<int32_t>& prompt, int n_new,
                            deltafin::SpeculationOptions spec) {
  deltafin::GenerateOptions g;
  g.max_new_tokens = n_new;
  g.stop_at_eos = false;
  g.speculation = std::move(spec);
  return engine.new_session()->generate(prompt, g, nullptr).ids;
}

// Sampled generation (temperature 0.8, top_p 0.95, a fixed seed) under `spec`.
std::vector<int32_t> sampled(Engine& engine, const std::vector<int32_t>& prompt, int n_new,
                             deltafin::SpeculationOptions spec) {
  deltafin::GenerateOptions g;
  g.max_new_tokens = n_new;
  g.stop_at_eos = false;
  g.temperature = 0.8f;
  g.top_p = 0.95f;
  g.seed = 1234;
  g.speculation = std::move(spec);
  return engine.new_session()->generate(prompt, g, nullptr).ids;
}

std::string str(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? "," : "") << ids[i];
  return s.str();
}

// The number after the first "key": in the case's config.json, or -1.
int64_t config_int(const std::string& dir, const std::string& key) {
  std::ifstream in(dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::string t = text.str(), k = "\"" + key + "\":";
  const size_t at = t.find(k);
  return at == std::string::npos ? -1 : std::stoll(t.substr(at + k.size()));
}

// One decode pass's counters: every MoE layer's top-k experts once, one host wait (the pass's
// own: with every expert resident, a decode row is routed on the device), one embedding row, and
// no more bytes than the model holds in VRAM.
void check_counters(Engine& gpu, const std::string& dir, const std::vector<int32_t>& prompt) {
  const std::string name = std::filesystem::path(dir).filename();
  std::unique_ptr<deltafin::Session> s = gpu.new_session();
  const deltafin::GpuStats before = gpu.gpu_stats();
  s->forward(prompt, false);
  const deltafin::GpuStats a = gpu.gpu_stats();
  s->forward(std::span<const int32_t>(prompt).subspan(0, 1), false);
  const deltafin::GpuStats b = gpu.gpu_stats();
  const uint64_t top_k = static_cast<uint64_t>(config_int(dir, "num_experts_per_token"));
  const uint64_t experts = b.experts - a.experts, syncs = b.syncs - a.syncs;
  expect(b.passes - a.passes == 1 && b.rows - a.rows == 1, name + ": one pass of one row counted");
  const uint64_t moe_layers =
      static_cast<uint64_t>(config_int(dir, "num_hidden_layers") -
                            config_int(dir, "first_k_dense_replace"));  // moe_layer_freq 1
  expect(b.launches > a.launches && b.copies > a.copies && syncs == 1,
         name + ": launches, copies and the pass's one wait counted (" + std::to_string(syncs) +
             " waits)");
  expect(experts == moe_layers * top_k,
         name + ": " + std::to_string(experts) + " experts in a decode pass, expected top-k " +
             std::to_string(top_k) + " in each of " + std::to_string(moe_layers) + " MoE layers");
  // The prompt's passes (one per prefill group of rows) count each layer's distinct experts once
  // a pass: per pass and layer at least top-k, at most its rows' top-k or every expert; summed,
  // at most every row's top-k or every expert in each pass (the tiers' runs compare against
  // this count, so it needs bounds of its own).
  const uint64_t prompt_passes = a.passes - before.passes;
  expect(
      prompt_passes >= 1 && a.rows - before.rows == prompt.size(),
      name + ": the prompt's rows counted once, in " + std::to_string(prompt_passes) + " passes");
  const uint64_t prompt_experts = a.experts - before.experts;
  const uint64_t least = prompt_passes * moe_layers * top_k;
  const uint64_t most =
      moe_layers *
      std::min<uint64_t>(prompt.size() * top_k, prompt_passes * config_int(dir, "num_experts"));
  expect(prompt_experts >= least && prompt_experts <= most,
         name + ": " + std::to_string(prompt_experts) + " experts in the prompt's " +
             std::to_string(prompt_passes) + " passes, expected " + std::to_string(least) + ".." +
             std::to_string(most));
  expect(experts > 0 && (b.expert_bytes - a.expert_bytes) % experts == 0,
         name + ": every expert counted with the same bytes");
  expect(b.spine_bytes > a.spine_bytes && b.head_bytes > a.head_bytes &&
             b.kda_state_bytes > a.kda_state_bytes &&
             b.attention_cache_bytes > a.attention_cache_bytes &&
             b.embed_bytes - a.embed_bytes == static_cast<uint64_t>(gpu.info().hidden_size) * 2,
         name + ": every part of the pass's bytes counted");
  expect(b.touched_bytes() - a.touched_bytes() <= gpu.memory_plan().vram_bytes,
         name + ": a decode pass touched more bytes than the model holds in VRAM");
  expect(b.device_seconds > a.device_seconds, name + ": the pass's device time measured");
  std::printf("%s: a decode pass touched %llu bytes in %llu launches, %llu copies, %llu waits\n",
              name.c_str(), static_cast<unsigned long long>(b.touched_bytes() - a.touched_bytes()),
              static_cast<unsigned long long>(b.launches - a.launches),
              static_cast<unsigned long long>(b.copies - a.copies),
              static_cast<unsigned long long>(syncs));
}

// math kTensorCores: the opt-in holds the same bounds and identities (its logits also against
// the exact kernels'); the tier and counter checks run once, in the exact mode.
void run_case(const std::string& dir, GpuExpertMath math) {
  const bool tensor = math == GpuExpertMath::kTensorCores;
  const std::string name =
      std::string(std::filesystem::path(dir).filename()) + (tensor ? " [tensor cores]" : "");
  const std::vector<int32_t> prompt = ids_of(reference(dir, "prompt_ids"));
  const std::vector<int32_t> want = ids_of(reference(dir, "greedy_ids"));
  const std::vector<double> ref = reference(dir, "logits");
  const int64_t n = static_cast<int64_t>(prompt.size());

  std::unique_ptr<Engine> gpu = load(dir, "cuda", -1, 0, 0, math);
  const std::string device = gpu->memory_plan().device;
  expect(device.rfind("cuda", 0) == 0, name + ": engine device is " + device);
  if (tensor) {
    const std::string summary = gpu->memory_plan().summary;
    expect(summary.find("--gpu-expert-math tensor") != std::string::npos,
           name + ": the startup line names the mode: " + summary);
  } else {
    check_counters(*gpu, dir, prompt);
  }
  const int64_t vocab = gpu->info().vocab_size;
  const std::vector<float> got = gpu->new_session()->forward(prompt, true);
  std::unique_ptr<Engine> cpu = load(dir, "cpu");
  const std::vector<float> cpu_logits = cpu->new_session()->forward(prompt, true);
  expect(static_cast<int64_t>(ref.size()) == n * vocab, name + ": reference logits shape");

  double worst = 0, worst_cpu = 0, worst_cpu_abs = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double* rr = ref.data() + r * vocab;
    const float* gr = got.data() + r * vocab;
    const float* cr = cpu_logits.data() + r * vocab;
    double mx = 0, diff = 0, cdiff = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      mx = std::max(mx, std::fabs(rr[j]));
      diff = std::max(diff, std::fabs(gr[j] - rr[j]));
      cdiff = std::max(cdiff, std::fabs(static_cast<double>(gr[j]) - cr[j]));
    }
    worst = std::max(worst, diff / mx);
    worst_cpu = std::max(worst_cpu, cdiff / mx);
    worst_cpu_abs = std::max(worst_cpu_abs, cdiff);
    expect(argmax(gr, vocab) == argmax(rr, vocab),
           name + ": argmax differs from the reference at position " + std::to_string(r));
  }
  expect(worst <= 5e-4, name + ": GPU logits off the reference by " + std::to_string(worst) +
                            " of max|logit| (bound 5e-4)");
  std::printf(
      "%s: GPU vs reference %.3g of max|logit|; largest CPU-GPU logit difference %.3g "
      "(%.3g of max|logit|)\n",
      name.c_str(), worst, worst_cpu_abs, worst_cpu);
  if (tensor) {
    const std::vector<float> exact = load(dir, "cuda")->new_session()->forward(prompt, true);
    double mx = 0, diff = 0;
    for (size_t j = 0; j < exact.size(); ++j) {
      mx = std::max(mx, std::fabs(static_cast<double>(exact[j])));
      diff = std::max(diff, std::fabs(static_cast<double>(got[j]) - exact[j]));
    }
    std::printf("%s: largest logit difference to the exact kernels %.3g (%.3g of max|logit|)\n",
                name.c_str(), diff, diff / mx);
  }

  const int n_new = static_cast<int>(want.size());
  deltafin::SpeculationOptions off;
  off.mode = deltafin::Speculation::kOff;
  expect(greedy(*gpu, prompt, n_new, off) == want, name + ": greedy ids (speculation off)");
  deltafin::SpeculationOptions ngram;
  ngram.mode = deltafin::Speculation::kNgram;
  ngram.draft_min = 3;
  expect(greedy(*gpu, prompt, n_new, ngram) == want, name + ": greedy ids (n-gram drafts)");
  // Drafts that are right up to a wrong id: each verify pass keeps a prefix and drops the rest.
  deltafin::SpeculationOptions script;
  script.mode = deltafin::Speculation::kScript;
  script.script = want;
  for (size_t i = 3; i < script.script.size(); i += 4) script.script[i] = (want[i] + 1) % vocab;
  script.draft_min = 5;
  const std::vector<int32_t> scripted = greedy(*gpu, prompt, n_new, script);
  expect(scripted == want, name + ": greedy ids (scripted drafts, refused part-way): " +
                               str(scripted) + " expected " + str(want));
  // Sampling: speculation on draws the same ids as off (drafts are verified against the same
  // logits and the same random stream). The script proposes the off run's ids with every third
  // one wrong, so verify passes keep prefixes of varying length.
  const std::vector<int32_t> sampled_off = sampled(*gpu, prompt, 2 * n_new, off);
  const std::vector<int32_t> sampled_ngram = sampled(*gpu, prompt, 2 * n_new, ngram);
  deltafin::SpeculationOptions sampled_script = script;
  sampled_script.script = sampled_off;
  for (size_t i = 2; i < sampled_script.script.size(); i += 3)
    sampled_script.script[i] = (sampled_off[i] + 1) % vocab;
  const std::vector<int32_t> sampled_scripted = sampled(*gpu, prompt, 2 * n_new, sampled_script);
  expect(sampled_ngram == sampled_off && sampled_scripted == sampled_off,
         name + ": sampled ids with speculation on differ from off: n-gram " + str(sampled_ngram) +
             ", scripted " + str(sampled_scripted) + ", off " + str(sampled_off));

  // Row-count independence: the prompt in passes of m rows, every row's logits bit-identical.
  std::vector<float> one;
  for (int64_t m = 1; m <= 16; ++m) {
    std::unique_ptr<deltafin::Session> s = gpu->new_session();
    std::vector<float> all;
    for (int64_t b = 0; b < n; b += m) {
      const int64_t len = std::min(m, n - b);
      const std::vector<float> part =
          s->forward(std::span<const int32_t>(prompt).subspan(b, len), true);
      all.insert(all.end(), part.begin(), part.end());
    }
    if (m == 1) {
      one = all;
      expect(std::memcmp(one.data(), got.data(), one.size() * sizeof(float)) == 0,
             name + ": passes of 1 row differ from one forward of the prompt");
      continue;
    }
    expect(all.size() == one.size() &&
               std::memcmp(all.data(), one.data(), one.size() * sizeof(float)) == 0,
           name + ": passes of " + std::to_string(m) + " rows differ from passes of 1 row");
  }
}

// Everything one engine computes for the tier comparison, as logits in order.
std::vector<float> tier_run(Engine& engine, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& want) {
  std::vector<float> out;
  const auto append = [&](const std::vector<float>& v) {
    out.insert(out.end(), v.begin(), v.end());
  };
  // Prompts: the oracle's, reversed, and its first half twice (passes of 16 rows and fewer).
  const std::vector<int32_t> reversed(prompt.rbegin(), prompt.rend());
  std::vector<int32_t> twice(prompt.begin(), prompt.begin() + prompt.size() / 2);
  twice.insert(twice.end(), twice.begin(), twice.end());
  for (const std::vector<int32_t>* p :
       {&prompt, &reversed, static_cast<const std::vector<int32_t>*>(&twice)})
    append(engine.new_session()->forward(*p, true));
  // Decode steps of one row each after the prompt.
  std::unique_ptr<deltafin::Session> s = engine.new_session();
  s->forward(prompt, false);
  for (int32_t id : want) append(s->forward(std::span<const int32_t>(&id, 1), true));
  // Verify passes (drafts refused part-way, each commit keeping a prefix), then the logits of a
  // few more ids: they read the KDA state and MLA cache those commits left.
  deltafin::SpeculationOptions script;
  script.mode = deltafin::Speculation::kScript;
  script.script = want;
  for (size_t i = 2; i < script.script.size(); i += 3)
    script.script[i] = (want[i] + 7) % static_cast<int32_t>(engine.info().vocab_size);
  script.draft_min = 4;
  deltafin::GenerateOptions g;
  g.max_new_tokens = static_cast<int>(want.size());
  g.stop_at_eos = false;
  g.speculation = script;
  std::unique_ptr<deltafin::Session> v = engine.new_session();
  const std::vector<int32_t> ids = v->generate(prompt, g, nullptr).ids;
  append(std::vector<float>(ids.begin(), ids.end()));
  append(v->forward(std::span<const int32_t>(prompt).subspan(0, 5), true));
  return out;
}

// The pass counters (Engine::gpu_stats) and tier counters (the gpu_* of stream_stats) of a new
// session's prompt pass and one decode pass.
struct Counted {
  deltafin::GpuStats pass;
  deltafin::StreamStats tiers;
};
Counted counted(Engine& engine, const std::vector<int32_t>& prompt) {
  const deltafin::GpuStats a = engine.gpu_stats();
  const deltafin::StreamStats ta = engine.stream_stats();
  std::unique_ptr<deltafin::Session> s = engine.new_session();
  s->forward(prompt, false);
  s->forward(std::span<const int32_t>(prompt).subspan(0, 1), true);
  const deltafin::GpuStats b = engine.gpu_stats();
  Counted c;
  deltafin::GpuStats& d = c.pass;
  d.passes = b.passes - a.passes;
  d.rows = b.rows - a.rows;
  d.spine_bytes = b.spine_bytes - a.spine_bytes;
  d.expert_bytes = b.expert_bytes - a.expert_bytes;
  d.experts = b.experts - a.experts;
  d.head_bytes = b.head_bytes - a.head_bytes;
  d.embed_bytes = b.embed_bytes - a.embed_bytes;
  d.attention_cache_bytes = b.attention_cache_bytes - a.attention_cache_bytes;
  d.kda_state_bytes = b.kda_state_bytes - a.kda_state_bytes;
  d.launches = b.launches - a.launches;
  d.copies = b.copies - a.copies;
  d.syncs = b.syncs - a.syncs;
  d.expert_batch_splits = b.expert_batch_splits - a.expert_batch_splits;
  const deltafin::StreamStats tb = engine.stream_stats();
  c.tiers.gpu_expert_misses = tb.gpu_expert_misses - ta.gpu_expert_misses;
  c.tiers.gpu_streamed_spine_bytes = tb.gpu_streamed_spine_bytes - ta.gpu_streamed_spine_bytes;
  return c;
}

// The same passes with the weights in other tiers give the same bits.
void run_tiers(const std::string& dir) {
  const std::string name = std::filesystem::path(dir).filename();
  const std::vector<int32_t> prompt = ids_of(reference(dir, "prompt_ids"));
  const std::vector<int32_t> want = ids_of(reference(dir, "greedy_ids"));
  const int64_t top_k = config_int(dir, "num_experts_per_token");
  std::unique_ptr<Engine> resident = load(dir, "cuda");
  expect(resident->memory_plan().vram_streamed_layers == 0 &&
             resident->memory_plan().vram_expert_slots == 0,
         name + ": the default plan holds the whole model");
  const std::vector<float> base = tier_run(*resident, prompt, want);
  const Counted base_counters = counted(*resident, prompt);
  const int64_t n_layers = resident->info().n_layers;
  struct Tiers {
    int spine_layers, expert_slots;
    int ram_slots = 0;  // != 0: --experts stream, the misses read from the disk (-1: all fit)
  };
  // The disk path: a RAM tier of 2 or 3 experts (most misses read from the disk, waves in the
  // RAM tier too) and one that holds every expert (the disk once, then RAM hits).
  for (const Tiers t : {Tiers{0, 2}, Tiers{5, 3}, Tiers{static_cast<int>(n_layers), 2}, Tiers{3, 1},
                        Tiers{0, 1000000}, Tiers{0, 2, 3}, Tiers{3, 1, 2}, Tiers{5, 3, -1}}) {
    const std::string what =
        name + " with " + std::to_string(t.spine_layers) + " resident spine layers and " +
        std::to_string(t.expert_slots) + " expert slots" +
        (t.ram_slots != 0
             ? ", --experts stream with " +
                   (t.ram_slots > 0 ? std::to_string(t.ram_slots) : "all") + " RAM slots"
             : std::string());
    std::unique_ptr<Engine> e = load(dir, "cuda", t.spine_layers, t.expert_slots, t.ram_slots);
    const deltafin::MemoryPlanInfo plan = e->memory_plan();
    expect(plan.vram_resident_layers == t.spine_layers &&
               plan.vram_streamed_layers == n_layers - t.spine_layers && plan.vram_expert_slots > 0,
           what + ": plan " + plan.summary);
    const std::vector<float> got = tier_run(*e, prompt, want);
    expect(got.size() == base.size() &&
               std::memcmp(got.data(), base.data(), base.size() * sizeof(float)) == 0,
           what + ": results differ from the resident model's");
    const deltafin::StreamStats st = e->stream_stats();
    expect(st.gpu_expert_misses > 0 && st.gpu_expert_miss_bytes > 0 &&
               st.experts_requested == st.gpu_expert_hits + st.gpu_expert_misses,
           what + ": expert misses counted");
    // Fewer than 3 streamed layers stay in the two staging buffers; more are copied every pass.
    if (n_layers - t.spine_layers > 2)
      expect(st.gpu_streamed_spine_bytes > 0 && st.gpu_spine_h2d_seconds > 0,
             what + ": streamed spine bytes and copy time counted");
    expect(st.gpu_expert_h2d_seconds > 0, what + ": expert copy time counted");
    // Every VRAM miss came from host memory that held it (RAM tier, mapping) or the disk.
    expect(st.gpu_expert_ram_hits + st.gpu_expert_disk_reads == st.gpu_expert_misses,
           what + ": VRAM misses = RAM hits + disk reads (" +
               std::to_string(st.gpu_expert_ram_hits) + " + " +
               std::to_string(st.gpu_expert_disk_reads) + " vs " +
               std::to_string(st.gpu_expert_misses) + ")");
    if (t.ram_slots != 0) {
      expect(plan.streaming && st.gpu_expert_disk_reads > 0 && st.gpu_expert_disk_bytes > 0 &&
                 st.expert_bytes_read == st.gpu_expert_disk_bytes,
             what + ": misses read from the disk");
      if (t.ram_slots > 0)
        expect(st.gpu_expert_disk_reads > st.gpu_expert_ram_hits,
               what + ": a tiny RAM tier reads most misses");
      else
        expect(st.gpu_expert_ram_hits > 0, what + ": a RAM tier that holds them all hits");
    } else {
      expect(st.gpu_expert_disk_reads == 0, what + ": mapped experts read nothing explicitly");
    }
    // The pass counters (bench decode's floor): the same bytes touched in VRAM whatever the
    // tiers, and the tiers' copies (the cache's misses at least) and staging waits on top.
    const Counted tiered = counted(*e, prompt);
    const deltafin::GpuStats &pc = tiered.pass, &rc = base_counters.pass;
    expect(pc.passes == rc.passes && pc.rows == rc.rows && pc.spine_bytes == rc.spine_bytes &&
               pc.expert_bytes == rc.expert_bytes && pc.experts == rc.experts &&
               pc.head_bytes == rc.head_bytes && pc.embed_bytes == rc.embed_bytes &&
               pc.attention_cache_bytes == rc.attention_cache_bytes &&
               pc.kda_state_bytes == rc.kda_state_bytes,
           what + ": pass counters' bytes differ from the resident model's");
    const uint64_t misses = tiered.tiers.gpu_expert_misses,
                   spine_copied = tiered.tiers.gpu_streamed_spine_bytes > 0 ? 1 : 0;
    // Launches: the resident model runs each MoE layer in 5 (the grouped products and the
    // combine); the cache runs its hits in 5 when it has any, each miss in 5 (its MXFP4 codes
    // moved into the kernels' layout after the copy, then gate, up, SiTU, down) and the combine
    // in 1. Over L MoE layer passes, H of them with hits, and M misses that is 5H + 5M - 4L
    // more, with 0 <= H <= L <= experts / top_k. (K3's streamed spine layers hold no MXFP4
    // codes, so their copies add no moves.) Grouped products whose
    // experts need more than one batch size add a gate/up and down launch pair per extra size
    // (expert_batch_splits), taken out first. The cache's copies (each miss's, its row copies)
    // outnumber the resident model's table uploads.
    const int64_t splits =
        static_cast<int64_t>(pc.expert_batch_splits) - static_cast<int64_t>(rc.expert_batch_splits);
    const int64_t extra =
        static_cast<int64_t>(pc.launches) - static_cast<int64_t>(rc.launches) - 2 * splits;
    const int64_t m5 = 5 * static_cast<int64_t>(misses),
                  max_layers = static_cast<int64_t>(rc.experts) / top_k;
    expect(extra >= m5 - 4 * max_layers && extra <= m5 + max_layers &&
               pc.copies >= rc.copies + misses + spine_copied && pc.syncs >= rc.syncs,
           what + ": the tiers' launches, copies and waits not counted (" + std::to_string(extra) +
               " more launches for " + std::to_string(misses) + " misses)");
    std::printf(
        "%s: %llu passes, expert hits %llu, misses %llu (%llu bytes; from RAM %llu, disk %llu "
        "reads %llu bytes), spine streamed %llu bytes (H2D %.3f ms), resident %llu bytes, "
        "expert H2D %.3f ms: bit-identical\n",
        what.c_str(), static_cast<unsigned long long>(st.gpu_passes),
        static_cast<unsigned long long>(st.gpu_expert_hits),
        static_cast<unsigned long long>(st.gpu_expert_misses),
        static_cast<unsigned long long>(st.gpu_expert_miss_bytes),
        static_cast<unsigned long long>(st.gpu_expert_ram_hits),
        static_cast<unsigned long long>(st.gpu_expert_disk_reads),
        static_cast<unsigned long long>(st.gpu_expert_disk_bytes),
        static_cast<unsigned long long>(st.gpu_streamed_spine_bytes),
        1e3 * st.gpu_spine_h2d_seconds,
        static_cast<unsigned long long>(st.gpu_resident_spine_bytes),
        1e3 * st.gpu_expert_h2d_seconds);
  }
  // A budget smaller than the working set is refused naming the tier and the flag.
  EngineOptions o;
  o.model_dir = dir;
  o.device = "cuda";
  o.drafters = deltafin::DrafterLoad::kOff;
  o.vram_budget = "1M";
  try {
    Engine::load(o);
    expect(false, name + ": --vram-budget 1M accepted");
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    expect(msg.find("the working set") != std::string::npos &&
               msg.find("--vram-budget") != std::string::npos,
           name + ": --vram-budget 1M refusal: " + msg);
  }
}

bool is_k3_case(const std::filesystem::path& dir) {
  if (!std::filesystem::exists(dir / "reference.safetensors")) return false;
  std::ifstream in(dir / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  return text.str().find("\"model_type\": \"kimi_k3\"") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fixtures = argc > 1 ? argv[1] : DELTAFIN_SOURCE_DIR "/tests/fixtures";
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("deltafin_gpu_model_tests: SKIPPED, no CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  std::vector<std::filesystem::path> cases;
  for (const auto& e : std::filesystem::directory_iterator(fixtures))
    if (e.is_directory() && is_k3_case(e.path())) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  expect(!cases.empty(), "no K3 oracle case under " + fixtures);
  for (const auto& dir : cases) {
    try {
      run_case(dir.string(), GpuExpertMath::kExact);
      run_case(dir.string(), GpuExpertMath::kTensorCores);
    } catch (const std::exception& e) {
      expect(false, dir.string() + ": " + e.what());
    }
    try {
      run_tiers(dir.string());
    } catch (const std::exception& e) {
      expect(false, dir.string() + " (tiers): " + e.what());
    }
  }
  std::printf("deltafin_gpu_model_tests: %d checks, %d failed (%zu K3 cases)\n", g_checks,
              g_failures, cases.size());
  return g_failures == 0 ? 0 : 1;
}
