// `deltafin inspect --model DIR`: what a checkpoint holds (layers by kind, experts, bytes of spine
// and experts, the expert read size) and whether it is complete and consistent with its config.
// A streaming install is checked as one: its spine shards, its expert manifest against the
// config, and the state of its expert pool (local and remote counts and bytes). A DSpark drafter
// folder (model_type k3_dspark) is checked against its own config and tensor table.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_fields.h"
#include "base/stopwatch.h"
#include "command.h"
#include "drafters/dspark_config.h"
#include "drafters/dspark_weights.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/inventory.h"
#include "format/schema.h"
#include "setup/expert_source.h"
#include "setup/files.h"
#include "setup/install.h"
#include "setup/streaming_experts.h"

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

const char* attention_label(format::AttentionKind kind) {
  switch (kind) {
    case format::AttentionKind::kKda:
      return "KDA";
    case format::AttentionKind::kMla:
      return "MLA";
    case format::AttentionKind::kGqa:
      return "GQA";
  }
  return "?";
}

void print_config(const ModelConfig& c) {
  const int64_t n = c.num_hidden_layers;
  std::printf("arch         %s (tensor prefix \"%s\")\n", format::arch_name(c.arch),
              format::family_schema(c.arch).tensor_prefix);
  const int64_t n_gqa = c.count_layers(format::AttentionKind::kGqa);
  std::printf("layers       %lld: %lld KDA + %lld MLA%s attention; %lld dense MLP + %lld MoE\n",
              static_cast<long long>(n),
              static_cast<long long>(c.count_layers(format::AttentionKind::kKda)),
              static_cast<long long>(c.count_layers(format::AttentionKind::kMla)),
              n_gqa > 0 ? base::str_cat(" + ", n_gqa, " GQA").c_str() : "",
              static_cast<long long>(c.count_layers(format::MlpKind::kDense)),
              static_cast<long long>(c.count_layers(format::MlpKind::kMoe)));
  const auto attention_is = [&](format::AttentionKind kind) {
    return layer_ranges(n, [&](int64_t l) { return c.layer_kinds[l].attention == kind; });
  };
  const auto mlp_is = [&](format::MlpKind kind) {
    return layer_ranges(n, [&](int64_t l) { return c.layer_kinds[l].mlp == kind; });
  };
  std::printf("  KDA        %s\n", attention_is(format::AttentionKind::kKda).c_str());
  std::printf("  MLA        %s\n", attention_is(format::AttentionKind::kMla).c_str());
  if (n_gqa > 0) {
    std::printf(
        "  GQA        %s: %lld query heads, %lld key/value heads, head_dim %lld, "
        "RoPE theta %g\n",
        attention_is(format::AttentionKind::kGqa).c_str(),
        static_cast<long long>(c.num_attention_heads),
        static_cast<long long>(c.num_key_value_heads), static_cast<long long>(c.head_dim),
        c.rope_theta);
  }
  std::printf("  dense MLP  %s\n", mlp_is(format::MlpKind::kDense).c_str());
  std::printf("  MoE        %s\n", mlp_is(format::MlpKind::kMoe).c_str());
  std::printf("lm_head      %s\n",
              c.tie_word_embeddings ? "tied: the embedding (no lm_head.weight)" : "lm_head.weight");
  if (c.num_experts == 0) {
    std::printf("experts      none (a dense model)\n");
    return;
  }
  std::printf("experts      %lld per MoE layer, top-%lld, %lld shared; %lld routed in all; %s\n",
              static_cast<long long>(c.num_experts),
              static_cast<long long>(c.num_experts_per_token),
              static_cast<long long>(c.num_shared_experts),
              static_cast<long long>(c.num_experts * c.count_layers(format::MlpKind::kMoe)),
              c.experts_mxfp4 ? "MXFP4 (compressed-tensors mxfp4-pack-quantized)" : "BF16");
  std::printf("expert span  %s per expert, one read: ",
              bytes(format::expert_span_bytes(c)).c_str());
  const auto& suffixes = format::expert_tensor_suffixes(c);
  for (size_t i = 0; i < suffixes.size(); ++i)
    std::printf("%s%s", i ? ", " : "", suffixes[i].c_str());
  std::printf("\n");
}

// Whether an inventory problem is about a routed expert's tensors (names "<...>.experts.<id>."),
// which a streaming install's checkpoint does not hold by design.
bool is_routed_expert_problem(const ModelConfig& c, const std::string& message) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_kinds[l].mlp != format::MlpKind::kMoe) continue;
    const std::string p0 = format::expert_prefix(c, l, 0);
    const std::string stem = p0.substr(0, p0.size() - 2);  // "...experts."
    for (size_t at = message.find(stem); at != std::string::npos; at = message.find(stem, at + 1)) {
      const size_t next = at + stem.size();
      if (next < message.size() && message[next] >= '0' && message[next] <= '9') return true;
    }
  }
  return false;
}

// A streaming install: drops the report's problems about the expert tensors its spine shards do
// not hold, checks the expert manifest against the config instead, fills the report's expert
// figures from the manifest and prints the pool. Returns the problems found.
std::vector<std::string> check_streaming(const std::string& dir, const ModelConfig& c,
                                         format::InventoryReport& report) {
  std::vector<std::string> problems;
  std::erase_if(report.problems, [&](const format::InventoryProblem& p) {
    return is_routed_expert_problem(c, p.message);
  });
  try {
    const std::string path = setup::join_path(dir, setup::kExpertManifest);
    const setup::ExpertManifest manifest =
        setup::ExpertManifest::parse(setup::read_small_file(path), path);
    const experts::ExpertCatalog catalog = setup::catalog_from_manifest(manifest, c, dir);
    report.expert_bytes = manifest.total_bytes();
    for (size_t l = 0; l < catalog.layers.size(); ++l)
      report.experts_by_layer[l] = static_cast<int64_t>(catalog.layers[l].spans.size());
    const setup::ExpertPoolStatus pool = setup::expert_pool_status(dir);
    std::printf("install      streaming: spine local, routed experts fetched on demand into %s\n",
                setup::join_path(dir, setup::kExpertCacheDir).c_str());
    std::printf("expert pool  %lld of %lld experts local (%.1f%%), %s; %lld remote, %s\n",
                static_cast<long long>(pool.n_local), static_cast<long long>(pool.n_experts),
                pool.n_experts ? 100.0 * static_cast<double>(pool.n_local) / pool.n_experts : 100.0,
                bytes(pool.bytes_total - pool.bytes_missing).c_str(),
                static_cast<long long>(pool.n_experts - pool.n_local),
                bytes(pool.bytes_missing).c_str());
  } catch (const base::Error& e) {
    problems.push_back(e.what());
  }
  return problems;
}

// NaN and Inf among a tensor's elements, found on their bits: all-ones exponent, then a
// non-zero mantissa for NaN.
struct BadValues {
  uint64_t nan = 0, inf = 0;
  int64_t first = -1;  // index of the first NaN or Inf element
};

template <typename Bits>
void count_bad(const uint8_t* data, size_t n, int64_t base_index, Bits exponent, Bits mantissa,
               BadValues& bad) {
  for (size_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, data + i * sizeof(Bits), sizeof(Bits));
    if ((v & exponent) != exponent) continue;
    ((v & mantissa) != 0 ? bad.nan : bad.inf) += 1;
    if (bad.first < 0) bad.first = base_index + static_cast<int64_t>(i);
  }
}

// With --values: reads every floating-point tensor's bytes (plain reads, 4 MiB at a time, so that
// routed experts are not mapped) and returns one problem per tensor holding NaN or Inf.
std::vector<std::string> check_values(const Checkpoint& ckpt, uint64_t* n_tensors,
                                      uint64_t* n_bytes) {
  std::vector<std::string> problems;
  std::vector<uint8_t> buffer(4 << 20);
  for (const format::TensorInfo& t : ckpt.tensors()) {
    const size_t width = format::dtype_size(t.dtype);
    if (t.dtype != format::DType::kBF16 && t.dtype != format::DType::kF16 &&
        t.dtype != format::DType::kF32 && t.dtype != format::DType::kF64)
      continue;
    std::ifstream in(t.file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(t.offset));
    BadValues bad;
    for (uint64_t done = 0; done < t.nbytes;) {
      const size_t want = static_cast<size_t>(
          std::min<uint64_t>(t.nbytes - done, buffer.size() - buffer.size() % width));
      if (!in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(want))) {
        problems.push_back(
            base::str_cat("tensor ", t.name, ": cannot read its bytes from ", t.file));
        break;
      }
      const int64_t index = static_cast<int64_t>(done / width);
      const size_t n = want / width;
      switch (t.dtype) {
        case format::DType::kBF16:
          count_bad<uint16_t>(buffer.data(), n, index, 0x7f80, 0x007f, bad);
          break;
        case format::DType::kF16:
          count_bad<uint16_t>(buffer.data(), n, index, 0x7c00, 0x03ff, bad);
          break;
        case format::DType::kF32:
          count_bad<uint32_t>(buffer.data(), n, index, 0x7f800000u, 0x007fffffu, bad);
          break;
        default:
          count_bad<uint64_t>(buffer.data(), n, index, 0x7ff0000000000000ull, 0x000fffffffffffffull,
                              bad);
          break;
      }
      done += want;
    }
    *n_tensors += 1;
    *n_bytes += t.nbytes;
    if (bad.first >= 0) {
      problems.push_back(base::str_cat("tensor ", t.name, " (", format::dtype_name(t.dtype),
                                       ") holds ", bad.nan, " NaN and ", bad.inf,
                                       " Inf values, the first at element ", bad.first));
    }
  }
  return problems;
}

void print_report(const ModelConfig& c, const format::InventoryReport& r, bool streaming) {
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
  if (streaming) {
    int64_t n = 0;
    for (int64_t k : r.experts_by_layer) n += k;
    std::printf("expert spans %lld in the expert manifest, each its own cache file once local\n",
                static_cast<long long>(n));
  } else {
    std::printf(
        "expert spans %zu found whole and contiguous; %zu start 4 KiB-aligned in their shard\n",
        r.experts.size(), aligned);
  }
  std::printf("\nlayer  attn  mlp    experts  spine_bytes      expert_bytes\n");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const uint64_t expert_bytes =
        static_cast<uint64_t>(r.experts_by_layer[l]) * format::expert_span_bytes(c);
    std::printf("%5lld  %-4s  %-5s  %7lld  %15s  %16s\n", static_cast<long long>(l),
                attention_label(c.layer_kinds[l].attention),
                c.layer_kinds[l].mlp == format::MlpKind::kMoe ? "MoE" : "dense",
                static_cast<long long>(r.experts_by_layer[l]),
                with_commas(r.spine_bytes_by_layer[l]).c_str(), with_commas(expert_bytes).c_str());
  }
}

// Whether DIR/config.json names a k3_dspark drafter (anything unreadable: no, and the model
// path reports it).
bool is_dspark_folder(const std::string& dir) {
  std::ifstream in(dir + "/config.json", std::ios::binary);
  if (!in) return false;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    const base::Json j = base::parse_json(text, {});
    return j.is_object() && j.contains("model_type") && j["model_type"] == "k3_dspark";
  } catch (const base::Error&) {
    return false;
  }
}

// The drafter folder: config (every key), then every tensor's name, shape and dtype.
int inspect_dspark(const std::string& dir, bool values, long long max_problems) {
  std::vector<std::string> problems;
  std::printf("drafter      %s\n", dir.c_str());
  std::optional<drafters::DSparkConfig> config;
  try {
    config = drafters::load_dspark_config(dir);
  } catch (const base::Error& e) {
    problems.push_back(e.what());
  }
  std::optional<Checkpoint> ckpt;
  try {
    ckpt = Checkpoint::open(dir);
  } catch (const base::Error& e) {
    problems.push_back(e.what());
  }
  if (config) {
    const drafters::DSparkConfig& c = *config;
    std::string taps;
    for (const int64_t l : c.target_layer_ids) {
      if (!taps.empty()) taps += ',';
      taps += std::to_string(l);
    }
    std::printf(
        "arch         k3_dspark: %lld MLA layers, hidden %lld, %lld heads, vocab %lld, "
        "block of 7 rows\n",
        static_cast<long long>(c.num_layers), static_cast<long long>(c.hidden_size),
        static_cast<long long>(c.num_heads), static_cast<long long>(c.vocab_size));
    std::printf("target       taps after layers [%s] of a %lld-layer target, hidden %lld\n",
                taps.c_str(), static_cast<long long>(c.target_num_hidden_layers),
                static_cast<long long>(c.target_hidden_size));
  }
  if (config && ckpt) {
    try {
      drafters::check_dspark_tensors(ckpt->tensors(), *config, dir + "/" + format::kSingleFileName);
      uint64_t owned = 0, embed = 0;
      for (const auto& t : ckpt->tensors())
        (t.name == drafters::kDSparkEmbedName ? embed : owned) += t.nbytes;
      std::printf(
          "tensors      %zu: %s owned; embed_tokens %s (never loaded: the target's is used)\n",
          ckpt->tensors().size(), bytes(owned).c_str(), bytes(embed).c_str());
    } catch (const base::Error& e) {
      problems.push_back(e.what());
    }
  }
  if (values && ckpt) {
    uint64_t n_tensors = 0, n_bytes = 0;
    const std::vector<std::string> bad = check_values(*ckpt, &n_tensors, &n_bytes);
    std::printf("values       %s floating-point tensors read (%s): %zu hold NaN or Inf\n",
                with_commas(n_tensors).c_str(), bytes(n_bytes).c_str(), bad.size());
    for (const std::string& p : bad) problems.push_back(p);
  }
  if (problems.empty()) {
    std::printf(
        "check        OK: the k3_dspark config and every tensor (name, shape, dtype) match\n");
    return 0;
  }
  std::printf("check        FAILED: %zu problem%s\n", problems.size(),
              problems.size() == 1 ? "" : "s");
  for (size_t i = 0; i < problems.size() && static_cast<long long>(i) < max_problems; ++i)
    std::printf("  - %s\n", problems[i].c_str());
  std::fprintf(stderr, "deltafin inspect: %s is not a complete DSpark drafter folder\n",
               dir.c_str());
  return 1;
}

int run_inspect(Args& args) {
  const std::string dir = args.required("model");
  const long long max_problems = args.get_int("max-problems", 50);
  const bool values = args.flag("values");
  args.check_done();
  if (is_dspark_folder(dir)) return inspect_dspark(dir, values, max_problems);

  std::vector<std::string> problems;
  base::Stopwatch step_time;
  std::optional<ModelConfig> config;
  try {
    config = format::load_config(dir);
  } catch (const base::Error& e) {
    problems.push_back(e.what());
  }
  const double config_seconds = step_time.lap_seconds();
  std::optional<Checkpoint> ckpt;
  try {
    ckpt = Checkpoint::open(dir);
  } catch (const base::Error& e) {
    problems.push_back(e.what());
  }
  const double open_seconds = step_time.lap_seconds();

  bool streaming = false;
  try {
    streaming = setup::is_streaming_install(dir);
  } catch (const base::Error& e) {
    problems.push_back(e.what());
  }

  std::printf("model        %s\n", dir.c_str());
  if (ckpt) {
    uint64_t total = 0;
    for (const auto& s : ckpt->shards()) total += s.size_bytes;
    std::printf("shards       %zu files, %s tensors, %s\n", ckpt->shards().size(),
                with_commas(ckpt->tensors().size()).c_str(), bytes(total).c_str());
  }
  if (config) print_config(*config);
  double inventory_seconds = 0;
  if (config && ckpt) {
    step_time.restart();
    format::InventoryReport report = format::inspect_inventory(*ckpt, *config);
    if (streaming) {
      for (std::string& p : check_streaming(dir, *config, report)) problems.push_back(p);
    }
    inventory_seconds = step_time.lap_seconds();
    for (const auto& p : report.problems) problems.push_back(p.message);
    print_report(*config, report, streaming);
  }
  double values_seconds = 0;
  if (values && ckpt) {
    step_time.restart();
    uint64_t n_tensors = 0, n_bytes = 0;
    const std::vector<std::string> bad = check_values(*ckpt, &n_tensors, &n_bytes);
    values_seconds = step_time.lap_seconds();
    std::printf("values       %s floating-point tensors read (%s): %zu hold NaN or Inf\n",
                with_commas(n_tensors).c_str(), bytes(n_bytes).c_str(), bad.size());
    for (const std::string& p : bad) problems.push_back(p);
  }
  std::printf("\ntime         config %.3f s, headers and index %.3f s, inventory %.3f s",
              config_seconds, open_seconds, inventory_seconds);
  if (values) std::printf(", values %.3f s", values_seconds);
  std::printf("\n");

  if (problems.empty() && streaming) {
    std::printf(
        "check        OK: every spine tensor the architecture needs is present with the expected "
        "shape and dtype, and the expert manifest describes every routed expert\n");
    return 0;
  }
  if (problems.empty()) {
    std::printf(
        "check        OK: every tensor the architecture needs is present with the expected shape "
        "and dtype, and every routed expert is contiguous\n");
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
    "check a model folder (config, shards, every tensor, expert layout) and print its make-up; "
    "--values also reads every floating-point tensor and reports NaN/Inf [--max-problems N]",
    run_inspect);

}  // namespace deltafin::apps
