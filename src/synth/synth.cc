// Drives a synth run: sizes, the small files, then every shard streamed through one chunk buffer.
#include "synth/synth.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>
#include <system_error>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/stopwatch.h"
#include "format/safetensors_writer.h"
#include "synth/model_files.h"
#include "synth/random.h"
#include "synth/tokenizer_files.h"
#include "synth/weights.h"

namespace deltafin::synth {
namespace {

namespace fs = std::filesystem;

// Generation buffer: a multiple of every element size, large enough for few syscalls.
constexpr size_t kChunkBytes = size_t{8} << 20;
// Free space kept beyond the model's own size.
constexpr uint64_t kDiskMarginBytes = uint64_t{256} << 20;

// Files of an earlier run that this one replaces: the index first, so that a folder whose
// shards are being rewritten never looks complete.
void remove_previous_output(const fs::path& dir) {
  static const std::regex kShard(R"(model-\d{5}-of-\d{6}\.safetensors)");
  std::error_code ec;
  fs::remove(dir / "model.safetensors.index.json", ec);
  fs::remove(dir / "planted_cycles.json", ec);
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), kShard)) {
      fs::remove(entry.path());
    }
  }
}

void check_free_space(const fs::path& dir, uint64_t need_bytes) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;  // unknown: let write() report ENOSPC
  const uint64_t free_bytes = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
  if (free_bytes < need_bytes + kDiskMarginBytes) {
    base::fail("synth: ", dir.string(), " has ", free_bytes / 1e9, " GB free, the model needs ",
               need_bytes / 1e9, " GB (use fewer --layers or --experts)");
  }
}

class ShardStreamer {
 public:
  ShardStreamer(uint64_t seed, uint64_t total_bytes, bool drop_page_cache, const Planter* planter)
      : seed_(seed),
        total_bytes_(total_bytes),
        drop_page_cache_(drop_page_cache),
        planter_(planter),
        chunk_(kChunkBytes) {}

  // Writes one shard; returns its file size.
  uint64_t write(const std::string& path, const std::vector<TensorSpec>& specs) {
    std::vector<format::TensorDecl> decls;
    decls.reserve(specs.size());
    for (const TensorSpec& t : specs) decls.push_back({t.name, t.dtype, t.shape});
    format::SafetensorsWriterOptions options;
    options.drop_page_cache = drop_page_cache_;
    format::SafetensorsWriter writer(path, std::move(decls), options);
    for (const TensorSpec& t : specs) {
      const uint64_t key = tensor_key(seed_, t.name);
      const uint64_t n = t.nbytes();
      for (uint64_t pos = 0; pos < n; pos += kChunkBytes) {
        const size_t len = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, n - pos));
        const std::span<std::byte> out(chunk_.data(), len);
        fill_tensor_bytes(t, key, pos, out);
        if (planter_ != nullptr && plant_touches(t.role)) planter_->apply(t, pos, out);
        writer.write(out);
        written_ += len;
        maybe_log();
      }
    }
    writer.finish();
    return writer.file_bytes();
  }

 private:
  void maybe_log() {
    if (since_log_.elapsed_seconds() < 5.0) return;
    since_log_.restart();
    const double s = since_start_.elapsed_seconds();
    base::log_info("synth: ", written_ / 1e9, " of ", total_bytes_ / 1e9, " GB written, ",
                   written_ / 1e9 / s, " GB/s");
  }

  uint64_t seed_;
  uint64_t total_bytes_;
  bool drop_page_cache_;
  const Planter* planter_;  // null: no planted cycles
  std::vector<std::byte> chunk_;
  uint64_t written_ = 0;
  base::Stopwatch since_start_;
  base::Stopwatch since_log_;
};

}  // namespace

SynthDims resolve_dims(const SynthOptions& options) {
  SynthDims d;
  if (options.preset == "demo") {
    d = demo_dims();
  } else if (options.preset == "k3-scale") {
    d = k3_dims();
  } else {
    base::fail("synth: unknown --preset '", options.preset, "' (expected demo or k3-scale)");
  }
  if (options.layers) d.num_hidden_layers = *options.layers;
  if (options.experts) d.num_experts = *options.experts;
  d.num_experts_per_token = std::min(d.num_experts_per_token, std::max(d.num_experts, 1));
  validate_dims(d);
  return d;
}

SynthReport synthesize(const SynthOptions& options) {
  const base::Stopwatch synth_time;
  const SynthDims dims = resolve_dims(options);
  const fs::path dir(options.out_dir);
  if (options.out_dir.empty()) base::fail("synth: --out is required");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) base::fail("synth: cannot create folder ", dir.string());
  remove_previous_output(dir);

  SynthReport report;
  report.dims = dims;
  report.config = synth_config(dims);
  report.tensor_bytes = total_tensor_bytes(report.config);
  uint64_t drafter_bytes = 0;
  if (options.drafters) {
    for (const TensorSpec& t : dspark_tensors(dspark_dims(dims))) drafter_bytes += t.nbytes();
    for (const TensorSpec& t : qwen_tensors(qwen_dims(dims, options.qwen)))
      drafter_bytes += t.nbytes();
  }
  check_free_space(dir, report.tensor_bytes + drafter_bytes);

  const ConfigTokenIds ids = k3_relative_token_ids(dims.base_vocab);
  write_text_file((dir / "config.json").string(), config_json(dims, ids));
  write_text_file((dir / "generation_config.json").string(), generation_config_json(ids));
  write_text_file((dir / "tiktoken.model").string(),
                  tiktoken_model_text(synth_tokenizer_ranks(dims.base_vocab)));
  write_text_file((dir / "tokenizer_config.json").string(), tokenizer_config_json(dims.base_vocab));

  std::optional<Planter> planter;
  if (!options.plant_cycles.empty()) {
    planter.emplace(report.config, options.seed,
                    choose_cycles(options.plant_cycles, dims.base_vocab, options.seed));
    report.planted = planter->cycles();
    write_text_file((dir / "planted_cycles.json").string(), planted_cycles_json(report.planted));
  }

  const std::vector<ShardSpec> shards = shard_layout(dims);
  report.n_shards = static_cast<int>(shards.size());
  base::log_info("synth: ", options.preset, ", ", dims.num_hidden_layers, " layers, ",
                 dims.num_experts, " experts per MoE layer, ", report.n_shards, " shards, ",
                 report.tensor_bytes / 1e9, " GB");
  ShardStreamer streamer(options.seed, report.tensor_bytes, dims.drop_page_cache,
                         planter ? &*planter : nullptr);
  for (size_t s = 0; s < shards.size(); ++s) {
    const fs::path path = dir / shard_file_name(static_cast<int>(s), report.n_shards);
    report.file_bytes += streamer.write(path.string(), shard_tensors(report.config, shards[s]));
  }
  // Drafters before the index: a folder with an index is complete, drafters included.
  if (options.drafters) {
    report.drafter = write_drafters(dir.string(), dims, options.seed, options.qwen);
    report.drafters = true;
    base::log_info("synth: drafters ", report.drafter.dspark_dir, " (",
                   report.drafter.dspark_bytes / 1e9, " GB) and ", report.drafter.qwen_dir, " (",
                   report.drafter.qwen_bytes / 1e9, " GB)");
  } else {
    remove_drafters(dir.string());
  }
  write_index_json(dims, report.config, (dir / "model.safetensors.index.json").string());
  report.seconds = synth_time.elapsed_seconds();
  return report;
}

}  // namespace deltafin::synth
