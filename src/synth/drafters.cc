// DSpark and Qwen3 drafter rosters, configs and the streamed writes of their model.safetensors.
#include "synth/drafters.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <system_error>

#include "base/error.h"
#include "format/drafter_dirs.h"
#include "format/safetensors_writer.h"
#include "synth/model_files.h"
#include "synth/qwen_tokenizer.h"
#include "synth/random.h"
#include "synth/weights.h"

namespace deltafin::synth {
namespace {

namespace fs = std::filesystem;
using format::DType;
using Json = nlohmann::json;  // sorted keys, as both published configs are written

constexpr size_t kChunkBytes = size_t{8} << 20;

TensorSpec bf16(std::string name, std::vector<int64_t> shape, Init init, double std) {
  TensorSpec t{std::move(name), DType::kBF16, std::move(shape)};
  t.init = init;
  t.std = static_cast<float>(std);
  return t;
}
// A Linear [out, in]: activations keep their size.
TensorSpec linear(std::string name, int64_t out, int64_t in) {
  return bf16(std::move(name), {out, in}, Init::kUniform, 1.0 / std::sqrt(double(in)));
}
TensorSpec norm(std::string name, int64_t n) {
  return bf16(std::move(name), {n}, Init::kNearOne, 0.1);
}

void sort_by_name(std::vector<TensorSpec>& t) {
  std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
}

// Streams `specs` into `path`; tensor i's values come from key_names[i]'s stream.
uint64_t write_tensors(const std::string& path, const std::vector<TensorSpec>& specs,
                       const std::vector<std::string>& key_names, uint64_t seed,
                       const format::SafetensorsMetadata& metadata, bool drop_page_cache) {
  std::vector<format::TensorDecl> decls;
  for (const TensorSpec& t : specs) decls.push_back({t.name, t.dtype, t.shape});
  format::SafetensorsWriterOptions options;
  options.drop_page_cache = drop_page_cache;
  format::SafetensorsWriter writer(path, std::move(decls), options, metadata);
  std::vector<std::byte> chunk(kChunkBytes);
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t key = tensor_key(seed, key_names[i]);
    const uint64_t n = specs[i].nbytes();
    for (uint64_t pos = 0; pos < n; pos += kChunkBytes) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, n - pos));
      fill_tensor_bytes(specs[i], key, pos, std::span<std::byte>(chunk.data(), len));
      writer.write(std::span<const std::byte>(chunk.data(), len));
    }
  }
  writer.finish();
  return writer.file_bytes();
}

}  // namespace

std::vector<int> dspark_target_layer_ids(int n, int block) {
  static const std::vector<int> kPublished = {2, 23, 47, 71, 89};  // of 93 layers, blocks of 12
  if (n == 93 && block == 12) return kPublished;
  if (n == 13 && block == 4) return {1, 3, 4, 7, 11};  // dspark-tiny-a for k3-tiny-a's shape
  std::vector<int> ids;
  if (n < 5) {
    for (int i = 0; i < n; ++i) ids.push_back(i);
    return ids;
  }
  for (int j = 0; j < 5; ++j) {
    int id = static_cast<int>(std::lround(kPublished[j] * double(n - 1) / 92.0));
    if (!ids.empty()) id = std::max(id, ids.back() + 1);
    ids.push_back(std::min(id, n - 5 + j));
  }
  for (int j = 3; j >= 0; --j) ids[j] = std::min(ids[j], ids[j + 1] - 1);
  return ids;
}

DSparkDims dspark_dims(const SynthDims& t) {
  DSparkDims d;
  d.hidden_size = t.hidden_size;
  d.intermediate_size = 2 * t.hidden_size;     // 14336 for 7168
  d.heads = std::max(4, t.mla_heads * 2 / 3);  // 64 for K3's 96
  d.q_lora_rank = t.q_lora_rank;               // K3's MLA sizes are DSpark's
  d.kv_lora_rank = t.kv_lora_rank;
  d.qk_nope_head_dim = t.qk_nope_head_dim;
  d.qk_rope_head_dim = t.qk_rope_head_dim;
  d.v_head_dim = t.v_head_dim;
  d.vocab_size = t.vocab_size();
  d.markov_rank = std::max(32, static_cast<int>(int64_t{t.hidden_size} * 256 / 7168));
  d.target_num_hidden_layers = t.num_hidden_layers;
  d.target_layer_ids = dspark_target_layer_ids(t.num_hidden_layers, t.attn_res_block_size);
  const ConfigTokenIds ids = k3_relative_token_ids(t.base_vocab);
  d.mask_token_id = d.vocab_size - 3;  // 163837 of 163840
  d.bos = ids.bos;
  d.eos = ids.eos;
  d.pad = ids.pad;
  return d;
}

std::vector<TensorSpec> dspark_tensors(const DSparkDims& d) {
  const int64_t h = d.hidden_size, v = d.vocab_size, r = d.markov_rank;
  const int64_t n_taps = static_cast<int64_t>(d.target_layer_ids.size());
  std::vector<TensorSpec> t;
  t.push_back(bf16("embed_tokens.weight", {v, h}, Init::kUniform, 1.0));  // = K3's embedding
  t.push_back(linear("context_proj.weight", h, n_taps * h));
  t.push_back(norm("context_norm.weight", h));
  for (int l = 0; l < d.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t.push_back(norm(p + "input_layernorm.weight", h));
    t.push_back(norm(p + "post_attention_layernorm.weight", h));
    t.push_back(linear(p + "self_attn.q_a_proj.weight", d.q_lora_rank, h));
    t.push_back(norm(p + "self_attn.q_a_layernorm.weight", d.q_lora_rank));
    t.push_back(linear(p + "self_attn.q_b_proj.weight",
                       int64_t{d.heads} * (d.qk_nope_head_dim + d.qk_rope_head_dim),
                       d.q_lora_rank));
    t.push_back(
        linear(p + "self_attn.kv_a_proj_with_mqa.weight", d.kv_lora_rank + d.qk_rope_head_dim, h));
    t.push_back(norm(p + "self_attn.kv_a_layernorm.weight", d.kv_lora_rank));
    t.push_back(linear(p + "self_attn.kv_b_proj.weight",
                       int64_t{d.heads} * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank));
    t.push_back(linear(p + "self_attn.o_proj.weight", h, int64_t{d.heads} * d.v_head_dim));
    t.push_back(linear(p + "mlp.gate_proj.weight", d.intermediate_size, h));
    t.push_back(linear(p + "mlp.up_proj.weight", d.intermediate_size, h));
    t.push_back(linear(p + "mlp.down_proj.weight", h, d.intermediate_size));
  }
  t.push_back(norm("final_norm.weight", h));
  t.push_back(bf16("markov_head.markov_w1.weight", {v, r}, Init::kUniform, 0.1));
  t.push_back(bf16("markov_head.markov_w2.weight", {v, r}, Init::kUniform, 0.1));
  t.push_back(linear("confidence_head.proj.weight", 1, h + r));
  t.push_back(bf16("confidence_head.proj.bias", {1}, Init::kUniform, 0.1));
  sort_by_name(t);
  return t;
}

std::string dspark_config_json(const DSparkDims& d) {
  Json c;
  c["_torchspec_version"] = "0.1.0";
  c["architectures"] = {"K3DSparkModel"};
  c["bos_token_id"] = d.bos;
  c["confidence_head_with_markov"] = true;
  c["draft_vocab_size"] = d.vocab_size;
  c["enable_confidence_head"] = true;
  c["eos_token_id"] = d.eos;
  c["hidden_size"] = d.hidden_size;
  c["intermediate_size"] = d.intermediate_size;
  c["kv_lora_rank"] = d.kv_lora_rank;
  c["markov_head_type"] = "vanilla";
  c["markov_rank"] = d.markov_rank;
  c["mask_token_id"] = d.mask_token_id;
  c["max_position_embeddings"] = 1048576;
  c["mla_use_nope"] = false;
  c["mla_use_output_gate"] = false;
  c["model_type"] = "k3_dspark";
  c["num_attention_heads"] = d.heads;
  c["num_hidden_layers"] = d.num_layers;
  c["num_key_value_heads"] = d.heads;
  c["num_target_layers"] = static_cast<int>(d.target_layer_ids.size());
  c["pad_token_id"] = d.pad;
  c["q_lora_rank"] = d.q_lora_rank;
  c["qk_nope_head_dim"] = d.qk_nope_head_dim;
  c["qk_rope_head_dim"] = d.qk_rope_head_dim;
  c["rms_norm_eps"] = 1e-05;
  c["rope_parameters"] = {{"beta_fast", 32},       {"beta_slow", 1},
                          {"factor", 32.0},        {"mscale", 1.0},
                          {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 32768},
                          {"rope_theta", 50000.0}, {"rope_type", "yarn"}};
  c["rope_theta"] = 50000.0;
  c["target_hidden_size"] = d.hidden_size;
  c["target_layer_ids"] = d.target_layer_ids;
  c["target_num_hidden_layers"] = d.target_num_hidden_layers;
  c["tie_word_embeddings"] = false;
  c["torch_dtype"] = "bfloat16";
  c["v_head_dim"] = d.v_head_dim;
  c["vocab_size"] = d.vocab_size;
  return c.dump(2) + "\n";
}

QwenDims qwen_dims(const SynthDims& target, QwenSize size) {
  QwenDims d;
  const bool real = target.hidden_size == k3_dims().hidden_size;
  const bool big = size == QwenSize::k1_7b;
  d.num_layers = real ? 28 : 4;
  d.heads = real ? 16 : 4;
  d.kv_heads = real ? 8 : 2;
  d.head_dim = real ? 128 : 64;  // q width != hidden for 0.6B, as published
  d.hidden_size = real ? (big ? 2048 : 1024) : (big ? 256 : 128);
  d.intermediate_size = 3 * d.hidden_size;
  d.base_vocab = real ? 151643 : 640;
  d.vocab_size = real ? 151936 : 768;
  return d;
}

const char* qwen_folder_name(QwenSize size) {
  return size == QwenSize::k1_7b ? format::kQwen17Drafter : format::kQwen06Drafter;
}

std::vector<TensorSpec> qwen_tensors(const QwenDims& d) {
  const int64_t h = d.hidden_size, q = int64_t{d.heads} * d.head_dim;
  const int64_t kv = int64_t{d.kv_heads} * d.head_dim;
  std::vector<TensorSpec> t;
  // Tied: the embedding is also the lm_head (no lm_head.weight in the file).
  t.push_back(bf16("model.embed_tokens.weight", {d.vocab_size, h}, Init::kUniform, 0.2));
  for (int l = 0; l < d.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back(norm(p + "input_layernorm.weight", h));
    t.push_back(norm(p + "post_attention_layernorm.weight", h));
    t.push_back(linear(p + "self_attn.q_proj.weight", q, h));
    t.push_back(linear(p + "self_attn.k_proj.weight", kv, h));
    t.push_back(linear(p + "self_attn.v_proj.weight", kv, h));
    t.push_back(linear(p + "self_attn.o_proj.weight", h, q));
    t.push_back(norm(p + "self_attn.q_norm.weight", d.head_dim));
    t.push_back(norm(p + "self_attn.k_norm.weight", d.head_dim));
    t.push_back(linear(p + "mlp.gate_proj.weight", d.intermediate_size, h));
    t.push_back(linear(p + "mlp.up_proj.weight", d.intermediate_size, h));
    t.push_back(linear(p + "mlp.down_proj.weight", h, d.intermediate_size));
  }
  t.push_back(norm("model.norm.weight", h));
  sort_by_name(t);
  return t;
}

std::string qwen_config_json(const QwenDims& d) {
  Json c;
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = d.base_vocab;
  c["eos_token_id"] = d.base_vocab;
  c["head_dim"] = d.head_dim;
  c["hidden_act"] = "silu";
  c["hidden_size"] = d.hidden_size;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = d.intermediate_size;
  c["max_position_embeddings"] = 32768;
  c["max_window_layers"] = d.num_layers;
  c["model_type"] = "qwen3";
  c["num_attention_heads"] = d.heads;
  c["num_hidden_layers"] = d.num_layers;
  c["num_key_value_heads"] = d.kv_heads;
  c["rms_norm_eps"] = 1e-06;
  c["rope_scaling"] = nullptr;
  c["rope_theta"] = 1000000;
  c["sliding_window"] = nullptr;
  c["tie_word_embeddings"] = true;
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = "4.51.0";
  c["use_cache"] = true;
  c["use_sliding_window"] = false;
  c["vocab_size"] = d.vocab_size;
  return c.dump(2) + "\n";
}

std::string qwen_generation_config_json(const QwenDims& d) {
  Json g = {{"bos_token_id", d.base_vocab},
            {"eos_token_id", d.base_vocab},
            {"max_new_tokens", 2048},
            {"transformers_version", "4.51.0"}};
  return g.dump(2) + "\n";
}

void remove_drafters(const std::string& model_dir) {
  for (const char* name :
       {format::kDSparkDrafter, format::kQwen06Drafter, format::kQwen17Drafter}) {
    std::error_code ec;
    fs::remove_all(format::drafter_path(model_dir, name), ec);
  }
  std::error_code ec;
  fs::remove(fs::path(model_dir) / format::kDraftersDir, ec);  // only if now empty
}

DrafterReport write_drafters(const std::string& model_dir, const SynthDims& target, uint64_t seed,
                             QwenSize qwen) {
  remove_drafters(model_dir);
  DrafterReport report;
  const bool drop = target.drop_page_cache;

  // DSpark: embed_tokens from the target embedding's own stream, everything else its own.
  const DSparkDims dd = dspark_dims(target);
  const std::vector<TensorSpec> ds = dspark_tensors(dd);
  const TensorSpec k3_embed = embedding_tensor(synth_config(target));
  std::vector<std::string> keys;
  for (const TensorSpec& t : ds) {
    if (t.name == "embed_tokens.weight") {
      DF_ASSERT(t.shape == k3_embed.shape && t.dtype == k3_embed.dtype && t.init == k3_embed.init &&
                t.std == k3_embed.std);
      keys.push_back(k3_embed.name);
    } else {
      keys.push_back("drafters/dspark/" + t.name);
    }
  }
  report.dspark_dir = format::drafter_path(model_dir, format::kDSparkDrafter);
  fs::create_directories(report.dspark_dir);
  write_text_file(report.dspark_dir + "/config.json", dspark_config_json(dd));
  report.dspark_bytes = write_tensors(report.dspark_dir + "/model.safetensors", ds, keys, seed,
                                      {{"torchspec_version", "0.1.0"}}, drop);

  // Qwen3.
  const QwenDims qd = qwen_dims(target, qwen);
  const std::vector<TensorSpec> qs = qwen_tensors(qd);
  keys.clear();
  const std::string prefix = std::string("drafters/") + qwen_folder_name(qwen) + "/";
  for (const TensorSpec& t : qs) keys.push_back(prefix + t.name);
  report.qwen_dir = format::drafter_path(model_dir, qwen_folder_name(qwen));
  fs::create_directories(report.qwen_dir);
  const BpeVocab bpe = qwen_bpe(qd.base_vocab);
  write_text_file(report.qwen_dir + "/config.json", qwen_config_json(qd));
  write_text_file(report.qwen_dir + "/generation_config.json", qwen_generation_config_json(qd));
  write_text_file(report.qwen_dir + "/tokenizer.json", qwen_tokenizer_json(bpe));
  write_text_file(report.qwen_dir + "/tokenizer_config.json",
                  qwen_tokenizer_config_json(qd.base_vocab));
  report.qwen_bytes = write_tensors(report.qwen_dir + "/model.safetensors", qs, keys, seed,
                                    {{"format", "pt"}}, drop);
  return report;
}

}  // namespace deltafin::synth
