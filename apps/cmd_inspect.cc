// `deltafin inspect --model DIR`: what a checkpoint holds (layers by kind, experts, bytes of spine
// and experts, the expert read size) and whether it is complete and consistent with its config.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "command.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/inventory.h"

namespace deltafin::apps {
namespace {

using format::Checkpoint;
using format::ModelConfig;

std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string bytes(uint64_t n) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  std::string s = with_commas(n) + " B";
  double v = static_cast<double>(n);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  if (u >= 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " (%.2f %s)", v, units[u]);
    s += buf;
  }
  return s;
}

// "0-2, 4-6, 8" for the layers where pick(layer) holds.
template <typename Pick>
std::string layer_ranges(int64_t n_layers, Pick pick) {
  std::string out;
  for (int64_t l = 0; l < n_layers;) {
    if (!pick(l)) {
      ++l;
      continue;
    }
    int64_t end = l;
    while (end + 1 < n_layers && pick(end + 1)) ++end;
    if (!out.empty()) out += ", ";
    out += end == l ? std::to_string(l) : std::to_string(l) + "-" + std::to_string(end);
    l = end + 1;
  }
  return out.empty() ? "none" : out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_config(const ModelConfig& c) {
  const int64_t n = c.num_hidden_layers;
  std::printf("arch         %s (tensor prefix \"%s\")\n", format::arch_name(c.arch),
              c.tensor_prefix.c_str());
  std::printf("layers       %lld: %lld KDA + %lld MLA attention; %lld dense MLP + %lld MoE\n",
              static_cast<long long>(n), static_cast<long long>(c.n_kda_layers()),
              static_cast<long long>(n - c.n_kda_layers()),
              static_cast<long long>(n - c.n_moe_layers()),
              static_cast<long long>(c.n_moe_layers()));
  std::printf("  KDA        %s\n",
              layer_ranges(n, [&](int64_t l) { return c.layer_is_kda[l]; }).c_str());
  std::printf("  MLA        %s\n",
              layer_ranges(n, [&](int64_t l) { return !c.layer_is_kda[l]; }).c_str());
  std::printf("  dense MLP  %s\n",
              layer_ranges(n, [&](int64_t l) { return !c.is_moe_layer(l); }).c_str());
  std::printf("  MoE        %s\n",
              layer_ranges(n, [&](int64_t l) { return c.is_moe_layer(l); }).c_str());
  std::printf("experts      %lld per MoE layer, top-%lld, %lld shared; %lld routed in all; %s\n",
              static_cast<long long>(c.num_experts),
              static_cast<long long>(c.num_experts_per_token),
              static_cast<long long>(c.num_shared_experts),
              static_cast<long long>(c.num_experts * c.n_moe_layers()),
              c.experts_mxfp4 ? "MXFP4 (compressed-tensors mxfp4-pack-quantized)" : "BF16");
  std::printf("expert span  %s per expert, one read: ",
              bytes(format::expert_span_bytes(c)).c_str());
  const auto& suffixes = format::expert_tensor_suffixes(c);
  for (size_t i = 0; i < suffixes.size(); ++i)
    std::printf("%s%s", i ? ", " : "", suffixes[i].c_str());
  std::printf("\n");
}

void print_report(const ModelConfig& c, const format::InventoryReport& r) {
  uint64_t spine = r.global_spine_bytes;
  for (uint64_t b : r.spine_bytes_by_layer) spine += b;
  size_t aligned = 0;
  for (const auto& s : r.experts) aligned += s.offset % 4096 == 0;
  std::printf("bytes        spine %s, routed experts %s\n", bytes(spine).c_str(),
              bytes(r.expert_bytes).c_str());
  std::printf("             global spine (embeddings, final norms, lm_head) %s\n",
              bytes(r.global_spine_bytes).c_str());
  if (!r.unused.empty()) {
    std::printf("unused       %zu tensors no block reads, %s (e.g. %s)\n", r.unused.size(),
                bytes(r.unused_bytes).c_str(), r.unused.front()->name.c_str());
  }
  std::printf(
      "expert spans %zu found whole and contiguous; %zu start 4 KiB-aligned in their shard\n",
      r.experts.size(), aligned);
  std::printf("\nlayer  attn  mlp    experts  spine_bytes      expert_bytes\n");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const uint64_t expert_bytes =
        static_cast<uint64_t>(r.experts_by_layer[l]) * format::expert_span_bytes(c);
    std::printf("%5lld  %-4s  %-5s  %7lld  %15s  %16s\n", static_cast<long long>(l),
                c.layer_is_kda[l] ? "KDA" : "MLA", c.is_moe_layer(l) ? "MoE" : "dense",
                static_cast<long long>(r.experts_by_layer[l]),
                with_commas(r.spine_bytes_by_layer[l]).c_str(), with_commas(expert_bytes).c_str());
  }
}

int run_inspect(Args& args) {
  const std::string dir = args.required("model");
  const long long max_problems = args.get_int("max-problems", 50);
  args.check_done();

  std::vector<std::string> problems;
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<ModelConfig> config;
  try {
    config = format::load_config(dir);
  } catch (const base::Error& e) {
    problems.push_back(e.what());
  }
  const double config_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  std::optional<Checkpoint> ckpt;
  try {
    ckpt = Checkpoint::open(dir);
  } catch (const base::Error& e) {
    problems.push_back(e.what());
  }
  const double open_s = seconds_since(t1);

  std::printf("model        %s\n", dir.c_str());
  if (ckpt) {
    uint64_t total = 0;
    for (const auto& s : ckpt->shards()) total += s.size_bytes;
    std::printf("shards       %zu files, %s tensors, %s\n", ckpt->shards().size(),
                with_commas(ckpt->tensors().size()).c_str(), bytes(total).c_str());
  }
  if (config) print_config(*config);
  double inventory_s = 0;
  if (config && ckpt) {
    const auto t2 = std::chrono::steady_clock::now();
    const format::InventoryReport report = format::inspect_inventory(*ckpt, *config);
    inventory_s = seconds_since(t2);
    for (const auto& p : report.problems) problems.push_back(p.message);
    print_report(*config, report);
  }
  std::printf("\ntime         config %.3f s, headers and index %.3f s, inventory %.3f s\n",
              config_s, open_s, inventory_s);

  if (problems.empty()) {
    std::printf(
        "check        OK: every tensor the architecture needs is present with the expected shape "
        "and "
        "dtype, and every routed expert is contiguous\n");
    return 0;
  }
  std::printf("check        FAILED: %zu problem%s\n", problems.size(),
              problems.size() == 1 ? "" : "s");
  for (size_t i = 0; i < problems.size(); ++i) {
    if (static_cast<long long>(i) >= max_problems) {
      std::printf("  ... and %zu more (--max-problems to see them)\n", problems.size() - i);
      break;
    }
    std::printf("  - %s\n", problems[i].c_str());
  }
  std::fprintf(stderr, "deltafin inspect: %s is not complete and consistent (%zu problem%s)\n",
               dir.c_str(), problems.size(), problems.size() == 1 ? "" : "s");
  return 1;
}

}  // namespace

DELTAFIN_COMMAND(
    inspect, "inspect",
    "check a model folder (config, shards, every tensor, expert layout) and print its make-up",
    run_inspect);

}  // namespace deltafin::apps
