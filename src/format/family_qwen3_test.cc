// Tests for the Qwen3 family: the oracle folder's config, the published 0.6B shape, errors that
// name the field, and the tensor inventory with tied and untied embeddings.
#include <gtest/gtest.h>

#include "format/checkpoint.h"
#include "format/config.h"
#include "format/inventory.h"
#include "format/schema.h"
#include "format/test_util.h"

namespace deltafin::format {
namespace {

using nlohmann::json;
using testing::error_of;

const std::string kDir = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/qwen3-tiny-a";

json oracle_config() { return json::parse(testing::read_file(kDir + "/config.json")); }

ModelConfig parse(const json& j) { return parse_config_json(j.dump(), "config.json"); }

TEST(Qwen3Config, ParsesTheOracleConfig) {
  const ModelConfig c = parse(oracle_config());
  EXPECT_EQ(c.arch, Arch::kQwen3);
  EXPECT_STREQ(arch_name(c.arch), "qwen3");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.intermediate_size, 192);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 600);
  EXPECT_EQ(c.eos_token_id, 600);
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  for (const LayerKind& k : c.layer_kinds)
    EXPECT_EQ(k, (LayerKind{AttentionKind::kGqa, MlpKind::kDense}));
}

// Qwen3-0.6B-Base (spec/drafting.md §2.1): q width 2048 against hidden 1024, tied, 596,049,920
// parameters.
TEST(Qwen3Config, ThePublished06BShapeHasItsParameterCount) {
  json j = oracle_config();
  j["hidden_size"] = 1024;
  j["num_hidden_layers"] = 28;
  j["num_attention_heads"] = 16;
  j["num_key_value_heads"] = 8;
  j["head_dim"] = 128;
  j["intermediate_size"] = 3072;
  j["vocab_size"] = 151936;
  j["eos_token_id"] = 151643;
  const ModelConfig c = parse(j);
  int64_t params = 0;
  for (const ExpectedTensor& t : expected_tensors(c)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    params += n;
  }
  EXPECT_EQ(params, 596'049'920);
  EXPECT_EQ(dim_size(Dim::kGqaQWidth, c), 2048);
  EXPECT_EQ(dim_size(Dim::kGqaKvWidth, c), 1024);
}

TEST(Qwen3Config, DefaultsFollowQwen3Config) {
  json j = oracle_config();
  for (const char* key : {"head_dim", "rope_theta", "num_key_value_heads", "tie_word_embeddings",
                          "rms_norm_eps", "hidden_act"})
    j.erase(key);
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.head_dim, 16);  // hidden / heads
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
}

TEST(Qwen3Config, RopeThetaMayComeFromRopeParameters) {
  json j = oracle_config();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  EXPECT_EQ(parse(j).rope_theta, 5e5);
}

TEST(Qwen3Config, ErrorsNameTheFieldAndWhatWasExpected) {
  struct Case {
    std::function<void(json&)> edit;
    const char* expect;
  };
  const Case cases[] = {
      {[](json& j) { j.erase("hidden_size"); }, "config.json: field hidden_size: missing"},
      {[](json& j) { j.erase("intermediate_size"); }, "field intermediate_size: missing"},
      {[](json& j) { j["num_key_value_heads"] = 3; },
       "num_key_value_heads: 3 does not divide num_attention_heads 4"},
      {[](json& j) { j["num_key_value_heads"] = 8; }, "num_key_value_heads: expected an integer"},
      {[](json& j) { j["head_dim"] = 31; }, "head_dim: 31 is odd"},
      {[](json& j) { j["rope_theta"] = -1; }, "rope_theta: expected a positive number"},
      {[](json& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
       },
       "rope_scaling: expected null (RoPE scaling is not supported for qwen3)"},
      {[](json& j) {
         j["rope_parameters"] = {{"rope_type", "yarn"}};
       },
       "rope_parameters.rope_type: expected \"default\", got \"yarn\""},
      {[](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act: expected \"silu\", got \"gelu\""},
      {[](json& j) { j["attention_bias"] = true; },
       "attention_bias: expected false (q/k/v/o biases are not supported for qwen3)"},
      {[](json& j) { j["use_sliding_window"] = true; }, "use_sliding_window: expected false"},
      {[](json& j) {
         j["layer_types"] = {"full_attention", "sliding_attention"};
       },
       "layer_types[1]: expected \"full_attention\", got \"sliding_attention\""},
      {[](json& j) { j["eos_token_id"] = 640; },
       "eos_token_id: 640 is outside the vocabulary (vocab_size 640)"},
  };
  for (const Case& c : cases) {
    json j = oracle_config();
    c.edit(j);
    const std::string err = error_of([&] { parse(j); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << "got: " << err << "\nwant: " << c.expect;
  }
}

TEST(Qwen3Inventory, TiedEmbeddingsNeedNoLmHead) {
  const Checkpoint ckpt = Checkpoint::open(kDir);
  const ModelConfig c = load_config(kDir);
  EXPECT_TRUE(check_inventory(ckpt, c).empty());
  for (const ExpectedTensor& t : global_tensors(c)) EXPECT_NE(t.role, Role::kLmHead) << t.name;
  const std::vector<ExpectedTensor> layer = layer_tensors(c, 2);
  ASSERT_EQ(layer.size(), 11u);  // 2 norms, q/k/v/o, q_norm, k_norm, gate/up/down
  EXPECT_EQ(layer[0].name, "model.layers.2.input_layernorm.weight");
  EXPECT_EQ(layer[2].name, "model.layers.2.self_attn.q_proj.weight");
  EXPECT_EQ(layer[2].shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(layer[6].name, "model.layers.2.self_attn.q_norm.weight");
  EXPECT_EQ(layer[6].shape, (std::vector<int64_t>{32}));
}

TEST(Qwen3Inventory, UntiedEmbeddingsNeedTheLmHeadByName) {
  const Checkpoint ckpt = Checkpoint::open(kDir);
  json j = oracle_config();
  j["tie_word_embeddings"] = false;
  const std::vector<InventoryProblem> problems = check_inventory(ckpt, parse(j));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("missing tensor lm_head.weight (expected BF16 [640, 64])"),
            std::string::npos)
      << problems[0].message;
}

}  // namespace
}  // namespace deltafin::format
