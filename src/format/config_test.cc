// Tests for config.json parsing: the oracle's K3 config, the published K3 and Kimi-Linear shapes,
// and errors that name the field and what was expected.
#include "format/config.h"

#include <gtest/gtest.h>

#include "format/test_util.h"

namespace deltafin::format {
namespace {

using nlohmann::json;
using testing::error_of;

json oracle_config() {
  return json::parse(testing::read_file(testing::fixture_dir() + "/config.json"));
}

// The published K3 text_config (kimi-k3.md §1) on the oracle's field set.
json k3_config() {
  json c = oracle_config();
  json& t = c["text_config"];
  t["hidden_size"] = 7168;
  t["vocab_size"] = 163840;
  t["num_hidden_layers"] = 93;
  t["num_attention_heads"] = 96;
  t["num_key_value_heads"] = 96;
  t["intermediate_size"] = 33792;
  t["moe_intermediate_size"] = 3072;
  t["routed_expert_hidden_size"] = 3584;
  t["num_experts"] = 896;
  t["num_experts_per_token"] = 16;
  t["q_lora_rank"] = 1536;
  t["kv_lora_rank"] = 512;
  t["qk_nope_head_dim"] = 128;
  t["qk_rope_head_dim"] = 64;
  t["v_head_dim"] = 128;
  t["attn_res_block_size"] = 12;
  json full = json::array(), kda = json::array();
  for (int l = 1; l <= 93; ++l) (l % 4 == 0 || l == 93 ? full : kda).push_back(l);
  t["linear_attn_config"]["full_attn_layers"] = full;
  t["linear_attn_config"]["kda_layers"] = kda;
  t["linear_attn_config"]["num_heads"] = 96;
  t["linear_attn_config"]["head_dim"] = 128;
  return c;
}

// Kimi-Linear-48B-A3B (model-families.md §1.1 and the released config.json).
json kimi_linear_config() {
  return json::parse(R"({
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "vocab_size": 163840,
    "hidden_size": 2304, "head_dim": 72, "intermediate_size": 9216, "num_hidden_layers": 27,
    "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu", "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "rope_scaling": null, "tie_word_embeddings": false, "first_k_dense_replace": 1,
    "moe_intermediate_size": 1024, "moe_layer_freq": 1, "moe_renormalize": true,
    "moe_router_activation_func": "sigmoid", "num_experts": 256, "num_experts_per_token": 8,
    "num_shared_experts": 1, "routed_scaling_factor": 2.446, "use_grouped_topk": true,
    "num_expert_group": 1, "topk_group": 1, "q_lora_rank": null, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": true,
    "num_nextn_predict_layers": 0, "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839,
    "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128,
      "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
      "num_heads": 32, "short_conv_kernel_size": 4}})");
}

ModelConfig parse(const json& j) { return parse_config_json(j.dump(), "config.json"); }

std::vector<int64_t> mla_layers(const ModelConfig& c) {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_kinds[static_cast<size_t>(l)].attention == AttentionKind::kMla) out.push_back(l);
  }
  return out;
}

TEST(Config, ParsesTheOracleConfig) {
  const ModelConfig c = load_config(testing::fixture_dir());
  EXPECT_EQ(c.arch, Arch::kKimiK3);
  EXPECT_EQ(c.model_type, "kimi_k3");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.num_hidden_layers, 13);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.q_lora_rank, 32);
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.qk_nope_head_dim, 16);
  EXPECT_EQ(c.qk_rope_head_dim, 8);
  EXPECT_EQ(c.v_head_dim, 16);
  EXPECT_TRUE(c.mla_use_nope);
  EXPECT_TRUE(c.mla_use_output_gate);
  EXPECT_EQ(c.kda_num_heads, 4);
  EXPECT_EQ(c.kda_head_dim, 16);
  EXPECT_EQ(c.short_conv_kernel_size, 4);
  EXPECT_TRUE(c.use_full_rank_gate);
  ASSERT_TRUE(c.gate_lower_bound.has_value());
  EXPECT_EQ(*c.gate_lower_bound, -5.0);
  EXPECT_EQ(mla_layers(c), (std::vector<int64_t>{3, 7, 11, 12}));  // 1-based [4, 8, 12, 13]
  EXPECT_EQ(c.count_layers(AttentionKind::kKda), 9);
  EXPECT_EQ(c.num_experts, 32);
  EXPECT_EQ(c.num_experts_per_token, 4);
  EXPECT_EQ(c.num_shared_experts, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.routed_expert_hidden_size, 32);
  EXPECT_EQ(c.expert_in_size(), 32);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.moe_layer_freq, 1);
  EXPECT_EQ(c.num_expert_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_TRUE(c.latent_moe_use_norm);
  EXPECT_TRUE(c.moe_renormalize);
  EXPECT_TRUE(c.use_grouped_topk);
  EXPECT_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.moe_router_activation_func, "sigmoid");
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.hidden_act, "situ");
  EXPECT_EQ(c.situ_beta, 4.0);
  EXPECT_EQ(c.situ_linear_beta, 25.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.attn_res_block_size, 4);
  EXPECT_EQ(c.max_position_embeddings, 1048576);  // from text_config
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 500);
  EXPECT_EQ(c.eos_token_id, 501);
  EXPECT_EQ(c.pad_token_id, 511);
  EXPECT_TRUE(c.experts_mxfp4);
  EXPECT_EQ(c.layer_kinds[0], (LayerKind{AttentionKind::kKda, MlpKind::kDense}));
  for (int l = 1; l < 13; ++l) EXPECT_EQ(c.layer_kinds[l].mlp, MlpKind::kMoe) << l;
  EXPECT_EQ(c.layer_kinds[3], (LayerKind{AttentionKind::kMla, MlpKind::kMoe}));
  EXPECT_EQ(c.count_layers(MlpKind::kMoe), 12);
}

TEST(Config, ParsesThePublishedK3Shape) {
  const ModelConfig c = parse(k3_config());
  EXPECT_EQ(c.count_layers(AttentionKind::kKda), 69);
  std::vector<int64_t> want;
  for (int64_t l = 3; l < 92; l += 4) want.push_back(l);
  want.push_back(92);
  EXPECT_EQ(mla_layers(c), want);
  EXPECT_EQ(c.layer_kinds[0].attention, AttentionKind::kKda);
  EXPECT_EQ(c.count_layers(MlpKind::kMoe), 92);
  EXPECT_EQ(c.expert_in_size(), 3584);
}

TEST(Config, ParsesKimiLinear) {
  const ModelConfig c = parse(kimi_linear_config());
  EXPECT_EQ(c.arch, Arch::kKimiLinear);
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_FALSE(c.mla_use_output_gate);
  EXPECT_FALSE(c.use_full_rank_gate);
  EXPECT_FALSE(c.gate_lower_bound.has_value());
  EXPECT_EQ(c.routed_expert_hidden_size, 0);
  EXPECT_EQ(c.expert_in_size(), 2304);
  EXPECT_FALSE(c.latent_moe_use_norm);
  EXPECT_EQ(c.attn_res_block_size, 0);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.routed_scaling_factor, 2.446);
  EXPECT_FALSE(c.experts_mxfp4);
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(mla_layers(c), (std::vector<int64_t>{3, 7, 11, 15, 19, 23, 26}));
  EXPECT_EQ(c.eos_token_id, 163586);
}

TEST(Config, OneLayerListIsEnough) {
  json j = kimi_linear_config();
  j["linear_attn_config"].erase("kda_layers");
  EXPECT_EQ(mla_layers(parse(j)), (std::vector<int64_t>{3, 7, 11, 15, 19, 23, 26}));
  j = kimi_linear_config();
  j["linear_attn_config"].erase("full_attn_layers");
  EXPECT_EQ(mla_layers(parse(j)), (std::vector<int64_t>{3, 7, 11, 15, 19, 23, 26}));
}

TEST(Config, QuantizationConfigMayBeAtTheTopLevel) {
  json j = oracle_config();
  j["quantization_config"] = j["text_config"]["quantization_config"];
  j["text_config"].erase("quantization_config");
  EXPECT_TRUE(parse(j).experts_mxfp4);
  j.erase("quantization_config");
  EXPECT_FALSE(parse(j).experts_mxfp4);  // BF16 experts
}

TEST(Config, MoeLayersFollowTheHfRule) {
  json j = kimi_linear_config();
  j["moe_layer_freq"] = 2;
  j["first_k_dense_replace"] = 1;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.layer_kinds[0].mlp, MlpKind::kDense);
  EXPECT_EQ(c.layer_kinds[1].mlp, MlpKind::kDense);  // 1 % 2 != 0: HF checks the layer index itself
  EXPECT_EQ(c.layer_kinds[2].mlp, MlpKind::kMoe);
  EXPECT_EQ(c.layer_kinds[3].mlp, MlpKind::kDense);
  EXPECT_EQ(c.layer_kinds[26].mlp, MlpKind::kMoe);
}

// Applies `edit` to the oracle config and returns the error message.
std::string error_after(const std::function<void(json&)>& edit) {
  json j = oracle_config();
  edit(j);
  return error_of([&] { parse(j); });
}

TEST(Config, ErrorsNameTheFieldAndWhatWasExpected) {
  struct Case {
    std::function<void(json&)> edit;
    const char* expect;
  };
  const Case cases[] = {
      {[](json& j) { j["text_config"].erase("hidden_size"); },
       "config.json: field text_config.hidden_size: missing"},
      {[](json& j) { j["text_config"]["hidden_size"] = "64"; },
       "field text_config.hidden_size: expected an integer in [1, 1048576], got \"64\""},
      {[](json& j) { j["text_config"]["hidden_size"] = 64.5; },
       "text_config.hidden_size: expected an integer"},
      {[](json& j) { j["text_config"]["num_hidden_layers"] = 0; },
       "text_config.num_hidden_layers: expected an integer"},
      {[](json& j) { j["model_type"] = "deepseek_v3"; },
       "field model_type: expected \"kimi_k3\", \"kimi_linear\" or \"qwen3\", got "
       "\"deepseek_v3\""},
      {[](json& j) { j.erase("model_type"); }, "field model_type: missing"},
      {[](json& j) { j.erase("text_config"); }, "field text_config: missing"},
      {[](json& j) { j["text_config"] = 3; }, "field text_config: expected an object"},
      {[](json& j) { j["text_config"]["model_type"] = "kimi_k2"; },
       "text_config.model_type: expected \"kimi_linear\", got \"kimi_k2\""},
      {[](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].push_back(4); },
       "text_config.linear_attn_config.full_attn_layers: layer 4 is also in kda_layers"},
      {[](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].erase(0); },
       "text_config.linear_attn_config.kda_layers: layer 1 (1-based) is in neither"},
      {[](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].push_back(14); },
       "kda_layers: expected 1-based layer numbers in [1, 13]"},
      {[](json& j) { j["text_config"]["linear_attn_config"]["kda_layers"].push_back(1); },
       "kda_layers: layer 1 is listed twice"},
      {[](json& j) { j["text_config"]["linear_attn_config"].erase("num_heads"); },
       "text_config.linear_attn_config.num_heads: missing"},
      {[](json& j) { j["text_config"]["quantization_config"]["quant_method"] = "gptq"; },
       "text_config.quantization_config.quant_method: expected \"compressed-tensors\", got "
       "\"gptq\""},
      {[](json& j) { j["text_config"]["quantization_config"]["format"] = "nvfp4-pack-quantized"; },
       "quantization_config.format: expected \"mxfp4-pack-quantized\""},
      {[](json& j) {
         j["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]
          ["group_size"] = 16;
       },
       "quantization_config.config_groups.group_0.weights.group_size: expected 32"},
      {[](json& j) {
         j["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]
          ["num_bits"] = 8;
       },
       "weights.num_bits: expected 4"},
      {[](json& j) { j["text_config"]["hidden_act"] = "gelu"; },
       "text_config.hidden_act: expected \"situ\" or \"silu\", got \"gelu\""},
      {[](json& j) { j["text_config"].erase("activation_situ_beta"); },
       "text_config.activation_situ_beta: missing"},
      {[](json& j) { j["text_config"]["moe_router_activation_func"] = "softmax"; },
       "moe_router_activation_func: expected \"sigmoid\", got \"softmax\""},
      {[](json& j) { j["text_config"]["mla_use_nope"] = false; },
       "text_config.mla_use_nope: expected true"},
      {[](json& j) { j["text_config"]["num_key_value_heads"] = 1; },
       "text_config.num_key_value_heads: 1 differs from num_attention_heads 4"},
      {[](json& j) { j["text_config"]["num_experts_per_token"] = 33; },
       "text_config.num_experts_per_token: 33 exceeds num_experts 32"},
      {[](json& j) { j["text_config"]["num_expert_group"] = 3; },
       "num_expert_group: 3 does not divide num_experts 32"},
      {[](json& j) { j["text_config"]["rms_norm_eps"] = 0; },
       "text_config.rms_norm_eps: expected a positive number"},
      {[](json& j) { j["text_config"]["routed_expert_hidden_size"] = 48; },
       "text_config.routed_expert_hidden_size: 48 is not a multiple of the MXFP4 group size 32"},
      {[](json& j) { j["text_config"]["moe_intermediate_size"] = 40; },
       "moe_intermediate_size: 40 is not a multiple of the MXFP4 group size 32"},
      {[](json& j) { j["text_config"].erase("routed_expert_hidden_size"); },
       "latent_moe_use_norm: is true but routed_expert_hidden_size is absent"},
      {[](json& j) { j["text_config"]["tie_word_embeddings"] = "no"; },
       "tie_word_embeddings: expected true or false"},
      {[](json& j) { j["text_config"]["eos_token_id"] = -3; },
       "eos_token_id: expected an integer in [0, 2147483647]"},
      {[](json& j) { j["text_config"]["eos_token_id"] = json::array(); },
       "eos_token_id: expected a token id"},
      {[](json& j) { j["text_config"]["eos_token_id"] = j["text_config"]["vocab_size"]; },
       "text_config.eos_token_id: 512 is outside the vocabulary (vocab_size 512)"},
      {[](json& j) {
         j["text_config"]["eos_token_id"] = json::array({5000, 1});
       },
       "eos_token_id: 5000 is outside the vocabulary (vocab_size 512)"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string msg = error_after(cases[i].edit);
    EXPECT_NE(msg.find(cases[i].expect), std::string::npos) << "case " << i << ": " << msg;
  }
}

TEST(Config, RejectsInvalidJsonAndMissingFiles) {
  const std::string msg = error_of([] { parse_config_json("{\"model_type\": ", "m/config.json"); });
  EXPECT_NE(msg.find("m/config.json: invalid JSON"), std::string::npos) << msg;
  // A number past double's range is an out_of_range error in the JSON library, not a parse error;
  // the fuzzer found it escaping as an uncaught exception.
  const std::string big = error_of([] { parse_config_json(R"({"vocab_size": 1e999})", "b"); });
  EXPECT_NE(big.find("b: invalid JSON"), std::string::npos) << big;
  EXPECT_NE(error_of([] { parse_config_json("[1]", "c"); }).find("c: expected an object, got [1]"),
            std::string::npos);
  testing::TempDir dir;
  EXPECT_NE(error_of([&] { load_config(dir.path()); }).find("config.json: cannot open"),
            std::string::npos);
}

TEST(Config, IgnoresFieldsItDoesNotUse) {
  json j = oracle_config();
  j["text_config"]["some_future_knob"] = {{"a", 1}};
  j["vision_config"] = "anything";
  EXPECT_EQ(parse(j).hidden_size, 64);
  j = oracle_config();
  j["text_config"]["eos_token_id"] = json::array({7, 8});
  EXPECT_EQ(parse(j).eos_token_id, 7);
}

}  // namespace
}  // namespace deltafin::format
