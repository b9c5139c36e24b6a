// Tests for the family tables: binding by role is unambiguous in every block choice, the config's
// conditions pick the right rows, and the routed-expert schema is the release's in both encodings.
#include "format/schema.h"

#include <gtest/gtest.h>

#include <set>

#include "format/test_util.h"

namespace deltafin::format {
namespace {

using nlohmann::json;

std::string kimi_linear_dir() {
  return std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/kimi-linear-tiny";
}

ModelConfig kimi_linear_with(const json& changes) {
  json j = json::parse(testing::read_file(kimi_linear_dir() + "/config.json"));
  j.update(changes, /*merge_objects=*/true);
  return parse_config_json(j.dump(), "kimi-linear.json");
}

std::set<std::string> names(const std::vector<ExpectedTensor>& tensors) {
  std::set<std::string> out;
  for (const ExpectedTensor& t : tensors) out.insert(t.name);
  return out;
}

void expect_roles_unique(const ModelConfig& c) {
  auto check = [&](const std::vector<ExpectedTensor>& tensors, const std::string& where) {
    std::set<Role> seen;
    for (const ExpectedTensor& t : tensors)
      EXPECT_TRUE(seen.insert(t.role).second) << where << ": " << t.name << " repeats its role";
  };
  check(global_tensors(c), "globals");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    check(layer_tensors(c, l), "layer " + std::to_string(l));
}

TEST(Schema, EachRoleIsBoundOnceInEveryBlockChoice) {
  expect_roles_unique(load_config(testing::fixture_dir()));
  expect_roles_unique(load_config(kimi_linear_dir()));
  expect_roles_unique(kimi_linear_with(
      {{"q_lora_rank", 32}, {"linear_attn_config", {{"use_full_rank_gate", true}}}}));
}

TEST(Schema, TheConfigPicksTheOptionalRows) {
  const ModelConfig plain = load_config(kimi_linear_dir());
  const std::set<std::string> kda = names(layer_tensors(plain, 0));
  const std::set<std::string> mla = names(layer_tensors(plain, 2));
  EXPECT_TRUE(kda.contains("model.layers.0.self_attn.g_a_proj.weight"));
  EXPECT_FALSE(kda.contains("model.layers.0.self_attn.g_proj.weight"));
  EXPECT_TRUE(mla.contains("model.layers.2.self_attn.q_proj.weight"));
  EXPECT_FALSE(mla.contains("model.layers.2.self_attn.q_a_proj.weight"));

  const ModelConfig gated =
      kimi_linear_with({{"q_lora_rank", 32},
                        {"mla_use_output_gate", true},
                        {"tie_word_embeddings", true},
                        {"linear_attn_config", {{"use_full_rank_gate", true}}}});
  const std::set<std::string> kda2 = names(layer_tensors(gated, 0));
  const std::set<std::string> mla2 = names(layer_tensors(gated, 2));
  EXPECT_TRUE(kda2.contains("model.layers.0.self_attn.g_proj.weight"));
  EXPECT_FALSE(kda2.contains("model.layers.0.self_attn.g_a_proj.weight"));
  EXPECT_TRUE(mla2.contains("model.layers.2.self_attn.q_a_layernorm.weight"));
  EXPECT_TRUE(mla2.contains("model.layers.2.self_attn.g_proj.weight"));
  EXPECT_FALSE(mla2.contains("model.layers.2.self_attn.q_proj.weight"));
  EXPECT_FALSE(names(global_tensors(gated)).contains("lm_head.weight"));
  for (const ExpectedTensor& t : layer_tensors(gated, 2)) {
    if (t.role == Role::kMlaQBProj) {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{4 * (16 + 8), 32}));
    }
  }
}

TEST(Schema, K3StoresSmallTensorsAsTheReleaseDoes) {
  const ModelConfig c = load_config(testing::fixture_dir());
  for (const ExpectedTensor& t : layer_tensors(c, 0)) {
    if (t.role == Role::kKdaONorm) {
      EXPECT_EQ(t.stored, DType::kF32);
      EXPECT_EQ(t.dtypes, (std::vector<DType>{DType::kF32, DType::kBF16}));
    }
    if (t.role == Role::kInputNorm) {
      EXPECT_EQ(t.stored, DType::kBF16);
    }
    EXPECT_EQ(t.placement, Placement::kLayer);
  }
  for (const ExpectedTensor& t : global_tensors(c)) EXPECT_EQ(t.placement, Placement::kResident);
}

TEST(Schema, Mxfp4ExpertsArePackedCodesThenScalesPerMatrix) {
  const ExpertSchema s = expert_schema(load_config(testing::fixture_dir()));
  ASSERT_TRUE(s.mxfp4);
  ASSERT_EQ(s.tensors.size(), 6u);
  ASSERT_EQ(s.matrices.size(), 3u);
  const Role roles[] = {Role::kExpertGate, Role::kExpertDown, Role::kExpertUp};
  const char* stems[] = {"w1", "w2", "w3"};
  for (size_t m = 0; m < 3; ++m) {
    const ExpertSchema::Matrix& mat = s.matrices[m];
    EXPECT_EQ(mat.role, roles[m]);
    EXPECT_EQ(s.tensors[mat.data].suffix, std::string(stems[m]) + ".weight_packed");
    EXPECT_EQ(s.tensors[mat.scales].suffix, std::string(stems[m]) + ".weight_scale");
    EXPECT_EQ(s.tensors[mat.data].shape, (std::vector<int64_t>{mat.rows, mat.cols / 2}));
    EXPECT_EQ(s.tensors[mat.scales].shape, (std::vector<int64_t>{mat.rows, mat.cols / 32}));
    EXPECT_EQ(s.tensors[mat.data].matrix, m);
  }
  EXPECT_EQ(s.span_bytes, 3u * (512 + 32));
}

TEST(Schema, Bf16ExpertsAreOneTensorPerMatrix) {
  const ModelConfig c = load_config(kimi_linear_dir());
  const ExpertSchema s = expert_schema(c);
  EXPECT_FALSE(s.mxfp4);
  EXPECT_EQ(expert_tensor_suffixes(c),
            (std::vector<std::string>{"w1.weight", "w2.weight", "w3.weight"}));
  ASSERT_EQ(s.matrices.size(), 3u);
  EXPECT_EQ(s.matrices[1].role, Role::kExpertDown);
  EXPECT_EQ(s.tensors[1].shape, (std::vector<int64_t>{64, 32}));  // [hidden, moe_intermediate]
  EXPECT_EQ(s.tensors[1].dtypes, std::vector<DType>{DType::kBF16});
  EXPECT_EQ(expert_prefix(c, 3, 7), "model.layers.3.block_sparse_moe.experts.7.");
  EXPECT_EQ(layer_prefix(load_config(testing::fixture_dir()), 5), "language_model.model.layers.5.");
}

}  // namespace
}  // namespace deltafin::format
