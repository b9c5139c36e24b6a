// config.json, generation_config.json and model.safetensors.index.json for synthetic checkpoints.
#include "synth/model_files.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "base/error.h"
#include "format/schema.h"
#include "synth/tokenizer_files.h"

namespace deltafin::synth {
namespace {

using Json = nlohmann::ordered_json;

Json quantization_config() {
  Json weights = {{"actorder", nullptr},
                  {"block_structure", nullptr},
                  {"dynamic", false},
                  {"group_size", 32},
                  {"num_bits", 4},
                  {"observer", "minmax"},
                  {"observer_kwargs", Json::object()},
                  {"scale_dtype", "torch.uint8"},
                  {"strategy", "group"},
                  {"symmetric", true},
                  {"type", "float"},
                  {"zp_dtype", nullptr}};
  Json group = {{"format", "mxfp4-pack-quantized"},
                {"input_activations", nullptr},
                {"output_activations", nullptr},
                {"targets", {"Linear"}},
                {"weights", std::move(weights)}};
  return Json{
      {"config_groups", {{"group_0", std::move(group)}}},
      {"format", "mxfp4-pack-quantized"},
      {"global_compression_ratio", nullptr},
      {"ignore",
       {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"}},
      {"kv_cache_scheme", nullptr},
      {"quant_method", "compressed-tensors"},
      {"quantization_status", "compressed"}};
}

// The field set and order of the published K3 text_config (transformers' PretrainedConfig
// defaults included), as the oracle checkpoint carries it.
Json text_config(const SynthDims& d, const ConfigTokenIds& ids) {
  Json linear_attn = {{"full_attn_layers", full_attn_layers_1based(d)},
                      {"gate_lower_bound", -5.0},
                      {"head_dim", d.kda_head_dim},
                      {"kda_layers", kda_layers_1based(d)},
                      {"num_heads", d.kda_heads},
                      {"short_conv_kernel_size", d.short_conv_kernel},
                      {"use_full_rank_gate", true}};
  Json t;
  t["_name_or_path"] = "";
  t["activation_situ_beta"] = 4.0;
  t["activation_situ_linear_beta"] = 25.0;
  t["add_cross_attention"] = false;
  t["architectures"] = {"KimiLinearForCausalLM"};
  t["attn_res_block_size"] = d.attn_res_block_size;
  t["auto_map"] = {{"AutoConfig", "configuration_kimi_k3.KimiLinearConfig"},
                   {"AutoModel", "modeling_kimi_linear.KimiLinearModel"},
                   {"AutoModelForCausalLM", "modeling_kimi_linear.KimiLinearForCausalLM"}};
  t["bad_words_ids"] = nullptr;
  t["begin_suppress_tokens"] = nullptr;
  t["bos_token_id"] = ids.bos;
  t["chunk_size_feed_forward"] = 0;
  t["cross_attention_hidden_size"] = nullptr;
  t["decoder_start_token_id"] = nullptr;
  t["diversity_penalty"] = 0.0;
  t["do_sample"] = false;
  t["dtype"] = "bfloat16";
  t["early_stopping"] = false;
  t["encoder_no_repeat_ngram_size"] = 0;
  t["eos_token_id"] = ids.eos;
  t["exponential_decay_length_penalty"] = nullptr;
  t["finetuning_task"] = nullptr;
  t["first_k_dense_replace"] = 1;
  t["forced_bos_token_id"] = nullptr;
  t["forced_eos_token_id"] = nullptr;
  t["hidden_act"] = "situ";
  t["hidden_size"] = d.hidden_size;
  t["id2label"] = {{"0", "LABEL_0"}, {"1", "LABEL_1"}};
  t["initializer_range"] = 0.02;
  t["intermediate_size"] = d.intermediate_size;
  t["is_decoder"] = false;
  t["is_encoder_decoder"] = false;
  t["kv_lora_rank"] = d.kv_lora_rank;
  t["label2id"] = {{"LABEL_0", 0}, {"LABEL_1", 1}};
  t["latent_moe_use_norm"] = true;
  t["length_penalty"] = 1.0;
  t["linear_attn_config"] = std::move(linear_attn);
  t["max_length"] = 20;
  t["max_position_embeddings"] = 1048576;
  t["min_length"] = 0;
  t["mla_use_nope"] = true;
  t["mla_use_output_gate"] = true;
  t["model_type"] = "kimi_linear";
  t["moe_intermediate_size"] = d.moe_intermediate_size;
  t["moe_layer_freq"] = 1;
  t["moe_renormalize"] = true;
  t["moe_router_activation_func"] = "sigmoid";
  t["no_repeat_ngram_size"] = 0;
  t["num_attention_heads"] = d.mla_heads;
  t["num_beam_groups"] = 1;
  t["num_beams"] = 1;
  t["num_expert_group"] = 1;
  t["num_experts"] = d.num_experts;
  t["num_experts_per_token"] = d.num_experts_per_token;
  t["num_hidden_layers"] = d.num_hidden_layers;
  t["num_key_value_heads"] = d.mla_heads;
  t["num_nextn_predict_layers"] = 0;
  t["num_return_sequences"] = 1;
  t["num_shared_experts"] = d.num_shared_experts;
  t["output_attentions"] = false;
  t["output_hidden_states"] = false;
  t["output_scores"] = false;
  t["pad_token_id"] = ids.pad;
  t["prefix"] = nullptr;
  t["problem_type"] = nullptr;
  t["pruned_heads"] = Json::object();
  t["q_lora_rank"] = d.q_lora_rank;
  t["qk_nope_head_dim"] = d.qk_nope_head_dim;
  t["qk_rope_head_dim"] = d.qk_rope_head_dim;
  t["quantization_config"] = quantization_config();
  t["remove_invalid_values"] = false;
  t["repetition_penalty"] = 1.0;
  t["return_dict"] = true;
  t["return_dict_in_generate"] = false;
  t["rms_norm_eps"] = 1e-05;
  t["routed_expert_hidden_size"] = d.routed_expert_hidden_size;
  t["routed_scaling_factor"] = 1.0;
  t["sep_token_id"] = nullptr;
  t["suppress_tokens"] = nullptr;
  t["task_specific_params"] = nullptr;
  t["temperature"] = 1.0;
  t["tf_legacy_loss"] = false;
  t["tie_encoder_decoder"] = false;
  t["tie_word_embeddings"] = false;
  t["tokenizer_class"] = nullptr;
  t["top_k"] = 50;
  t["top_p"] = 1.0;
  t["topk_group"] = 1;
  t["topk_method"] = "noaux_tc";
  t["torchscript"] = false;
  t["transformers_version"] = "4.56.2";
  t["typical_p"] = 1.0;
  t["use_bfloat16"] = false;
  t["use_cache"] = true;
  t["use_grouped_topk"] = true;
  t["v_head_dim"] = d.v_head_dim;
  t["vocab_size"] = d.vocab_size();
  return t;
}

// The release's vision tower settings; no vision weights are written.
Json vision_config(const SynthDims& d) {
  Json v;
  v["_attn_implementation"] = "flash_attention_2";
  v["activation_func"] = "gelu_pytorch_tanh";
  v["attn_bias"] = false;
  v["init_pos_emb_height"] = 64;
  v["init_pos_emb_time"] = 4;
  v["init_pos_emb_width"] = 64;
  v["linear_bias"] = false;
  v["merge_kernel_size"] = {2, 2};
  v["merge_type"] = "sd2_tpool";
  v["mlp_type"] = "mlp2";
  v["mm_hidden_size"] = 1024;
  v["mm_projector_type"] = "patchmergerv2";
  v["norm_type"] = "rmsnorm";
  v["patch_embed_proj_bias"] = false;
  v["patch_size"] = 14;
  v["pos_emb_interpolation_mode"] = "bilinear";
  v["pos_emb_type"] = "divided_fixed";
  v["projector_hidden_act"] = "gelu";
  v["projector_ln_eps"] = 1e-05;
  v["qkv_hidden_size"] = 1536;
  v["text_hidden_size"] = d.hidden_size;
  v["vt_hidden_size"] = 1024;
  v["vt_intermediate_size"] = 4096;
  v["vt_num_attention_heads"] = 12;
  v["vt_num_hidden_layers"] = 27;
  return v;
}

}  // namespace

ConfigTokenIds k3_relative_token_ids(int base_vocab) {
  return {base_vocab + kBosOffset, base_vocab + kEosOffset, base_vocab + kPadOffset,
          base_vocab + kMediaOffset};
}

std::string config_json(const SynthDims& d, const ConfigTokenIds& ids) {
  Json c;
  c["architectures"] = {"KimiK3ForConditionalGeneration"};
  c["auto_map"] = {{"AutoConfig", "configuration_kimi_k3.KimiK3Config"},
                   {"AutoModel", "modeling_kimi_k3.KimiK3ForConditionalGeneration"},
                   {"AutoModelForCausalLM", "modeling_kimi_k3.KimiK3ForConditionalGeneration"}};
  c["bos_token_id"] = ids.bos;
  c["dtype"] = "bfloat16";
  c["eos_token_id"] = ids.eos;
  c["ignore_index"] = -100;
  c["image_placeholder"] = "<|kimi_image_placeholder|>";
  c["media_placeholder_token_id"] = ids.media_placeholder;
  c["model_type"] = "kimi_k3";
  c["pad_token_id"] = ids.pad;
  c["text_config"] = text_config(d, ids);
  c["tie_word_embeddings"] = false;
  c["vision_config"] = vision_config(d);
  return c.dump(2) + "\n";
}

std::string generation_config_json(const ConfigTokenIds& ids) {
  Json g = {{"bos_token_id", ids.bos}, {"eos_token_id", ids.eos}, {"do_sample", false}};
  return g.dump(2) + "\n";
}

format::ModelConfig synth_config(const SynthDims& dims) {
  return format::parse_config_json(config_json(dims, k3_relative_token_ids(dims.base_vocab)),
                                   "synth config.json");
}

void write_index_json(const SynthDims& dims, const format::ModelConfig& config,
                      const std::string& path) {
  // Sorted order without sorting half a million names: a layer's names all start with
  // "...layers.{i}." and nothing else does, so ordering the groups (the layer prefixes and the
  // global names) and then each layer's own sorted roster gives the global order.
  const std::vector<ShardSpec> shards = shard_layout(dims);
  const int n_shards = static_cast<int>(shards.size());
  struct Group {
    std::string key;
    int layer;  // -1 for a global tensor
    int shard;
  };
  std::vector<Group> groups;
  groups.push_back({embedding_tensor(config).name, -1, 0});
  for (const TensorSpec& t : head_tensors(config)) groups.push_back({t.name, -1, n_shards - 1});
  for (int s = 0; s < n_shards; ++s) {
    for (int l = shards[s].first_layer; l < shards[s].end_layer; ++l) {
      groups.push_back({format::layer_prefix(config, l), l, s});
    }
  }
  std::sort(groups.begin(), groups.end(),
            [](const Group& a, const Group& b) { return a.key < b.key; });

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) base::fail("cannot create ", path);
  std::fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
               static_cast<unsigned long long>(total_tensor_bytes(config)));
  bool first = true;
  auto entry = [&](const std::string& name, int shard) {
    std::fprintf(f, "%s\n    %s: \"%s\"", first ? "" : ",", Json(name).dump().c_str(),
                 shard_file_name(shard, n_shards).c_str());
    first = false;
  };
  for (const Group& g : groups) {
    if (g.layer < 0) {
      entry(g.key, g.shard);
    } else {
      for (const TensorSpec& t : layer_tensors(config, g.layer)) entry(t.name, g.shard);
    }
  }
  std::fprintf(f, "\n  }\n}\n");
  const bool failed = std::ferror(f) != 0;
  if (std::fclose(f) != 0 || failed) base::fail("cannot write ", path);
}

void write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) base::fail("cannot create ", path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) base::fail("cannot write ", path);
}

}  // namespace deltafin::synth
