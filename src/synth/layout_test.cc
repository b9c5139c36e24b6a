// Tests for the synthetic K3 layout: the release's tensor counts, shapes, dtypes and expert bytes,
// the shard plan, and config.json / totals against the k3-tiny-a oracle checkpoint.
#include "synth/layout.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "base/error.h"
#include "format/schema.h"
#include "synth/model_files.h"

namespace deltafin::synth {
namespace {

using format::DType;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::filesystem::path oracle_dir() {
  return std::filesystem::path(DELTAFIN_SOURCE_DIR) / "tests/fixtures/k3-tiny-a";
}

// The sizes of the k3-tiny-a oracle (its README), which was made by Moonshot-code tooling.
SynthDims oracle_dims() {
  SynthDims d = demo_dims();
  d.hidden_size = 64;
  d.base_vocab = 256;
  d.kda_heads = 4;
  d.kda_head_dim = 16;
  d.mla_heads = 4;
  d.q_lora_rank = 32;
  d.kv_lora_rank = 32;
  d.qk_nope_head_dim = 16;
  d.qk_rope_head_dim = 8;
  d.v_head_dim = 16;
  d.intermediate_size = 128;
  d.moe_intermediate_size = 32;
  d.routed_expert_hidden_size = 32;
  d.num_experts = 32;
  d.num_experts_per_token = 4;
  return d;
}

size_t count_non_expert(const std::vector<TensorSpec>& t) {
  size_t n = 0;
  for (const auto& s : t) n += s.name.find(".experts.") == std::string::npos;
  return n;
}

TEST(Layout, K3TensorCountsPerLayerKind) {
  const SynthDims d = k3_dims();
  const format::ModelConfig c = synth_config(d);
  EXPECT_EQ(layer_tensors(c, 0).size(), 23u);  // KDA + dense MLP
  const auto kda_moe = layer_tensors(c, 1);
  const auto mla_moe = layer_tensors(c, 3);
  EXPECT_EQ(count_non_expert(kda_moe), 28u);
  EXPECT_EQ(count_non_expert(mla_moe), 22u);
  EXPECT_EQ(kda_moe.size(), 28u + 6 * 896);
  EXPECT_TRUE(is_mla_layer(d, 92));
  EXPECT_EQ(full_attn_layers_1based(d).size(), 24u);
  EXPECT_EQ(kda_layers_1based(d).size(), 69u);
  EXPECT_EQ(full_attn_layers_1based(d).back(), 93);
  EXPECT_EQ(full_attn_layers_1based(d)[22], 92);
}

TEST(Layout, K3ExpertRecordIsTheReleases) {
  const format::ModelConfig c = synth_config(k3_dims());
  EXPECT_EQ(format::expert_span_bytes(c), 17547264u);
  EXPECT_EQ(format::expert_span_bytes(c) % 4096, 0u);
  const auto t = layer_tensors(c, 1);
  // Sorted names: each expert's six tensors back to back, experts in lexicographic id order.
  size_t first = 0;
  while (t[first].name.find(".experts.") == std::string::npos) ++first;
  const char* suffixes[] = {"w1.weight_packed", "w1.weight_scale",  "w2.weight_packed",
                            "w2.weight_scale",  "w3.weight_packed", "w3.weight_scale"};
  const uint64_t sizes[] = {5505024, 344064, 5505024, 344064, 5505024, 344064};
  const char* ids[] = {"0", "1", "10", "100"};
  for (int e = 0; e < 4; ++e) {
    for (int k = 0; k < 6; ++k) {
      const TensorSpec& s = t[first + 6 * e + k];
      EXPECT_EQ(s.name, std::string("language_model.model.layers.1.block_sparse_moe.experts.") +
                            ids[e] + "." + suffixes[k]);
      EXPECT_EQ(s.dtype, DType::kU8);
      EXPECT_EQ(s.nbytes(), sizes[k]);
    }
  }
  EXPECT_EQ(t[first].shape, (std::vector<int64_t>{3072, 1792}));
  EXPECT_EQ(t[first + 3].shape, (std::vector<int64_t>{3584, 96}));
}

TEST(Layout, DtypesAreTheReleases) {
  const format::ModelConfig c = synth_config(k3_dims());
  const std::set<std::string> f32 = {
      "A_log",           "dt_bias",       "q_conv1d.weight",        "k_conv1d.weight",
      "v_conv1d.weight", "o_norm.weight", "e_score_correction_bias"};
  for (int layer : {0, 1, 3}) {
    for (const TensorSpec& t : layer_tensors(c, layer)) {
      bool is_f32 = false;
      for (const auto& s : f32) {
        is_f32 |= t.name.size() > s.size() && t.name.ends_with("." + s);
      }
      const DType want = t.name.find(".experts.") != std::string::npos ? DType::kU8
                         : is_f32                                      ? DType::kF32
                                                                       : DType::kBF16;
      EXPECT_EQ(t.dtype, want) << t.name;
      if (t.name.ends_with("A_log")) {
        EXPECT_EQ(t.shape, std::vector<int64_t>{128});
        EXPECT_EQ(t.n_valid, 96);
      }
    }
  }
}

TEST(Layout, ShardsHoldWholeLayers) {
  SynthDims d = k3_dims();
  EXPECT_EQ(shard_file_name(0, 96), "model-00001-of-000096.safetensors");
  EXPECT_EQ(shard_file_name(95, 96), "model-00096-of-000096.safetensors");
  d.num_hidden_layers = 3;
  d.num_experts = 2;
  d.num_experts_per_token = 2;  // as resolve_dims caps it: the config must parse
  const auto shards = shard_layout(d);
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_TRUE(shards[0].has_embedding && !shards[0].has_head);
  EXPECT_TRUE(shards[2].has_head && !shards[2].has_embedding);
  const auto t = shard_tensors(synth_config(d), shards[2]);
  EXPECT_EQ(t.front().name, "language_model.lm_head.weight");
  EXPECT_EQ(t.back().name, "language_model.model.output_attn_res_proj.weight");
  // Adding one expert adds its record and its router row and bias to each MoE layer.
  SynthDims more = d;
  more.num_experts = 3;
  EXPECT_EQ(total_tensor_bytes(synth_config(more)) - total_tensor_bytes(synth_config(d)),
            2 * (17547264u + 7168 * 2 + 4));
}

TEST(Layout, ValidationNamesTheProblem) {
  SynthDims d = demo_dims();
  d.num_experts = 4;
  EXPECT_THROW(validate_dims(d), base::Error);  // top-8 of 4
  d = demo_dims();
  d.moe_intermediate_size = 100;
  EXPECT_THROW(validate_dims(d), base::Error);
  EXPECT_NO_THROW(validate_dims(demo_dims()));
  EXPECT_NO_THROW(validate_dims(k3_dims()));
}

// With the oracle's sizes the roster must reproduce the oracle's tensors and config exactly.
TEST(Layout, OracleSizesReproduceTheOracle) {
  const SynthDims d = oracle_dims();
  const ConfigTokenIds ids{500, 501, 511, 505};
  EXPECT_EQ(config_json(d, ids), read_text(oracle_dir() / "config.json"));
  EXPECT_EQ(generation_config_json(ids), read_text(oracle_dir() / "generation_config.json"));
  // The oracle pads A_log to 32 entries where K3 (and synth) store [head_dim] = 16 here: 9 KDA
  // layers x 16 F32. Every other tensor's size matches.
  const format::ModelConfig c = synth_config(d);
  EXPECT_EQ(total_tensor_bytes(c) + 9 * 16 * 4, 1864000u);

  const auto index =
      nlohmann::json::parse(read_text(oracle_dir() / "model.safetensors.index.json"));
  std::set<std::string> want;
  for (const auto& [name, shard] : index["weight_map"].items()) want.insert(name);
  std::set<std::string> got;
  const auto add = [&](const TensorSpec& t) { got.insert(t.name); };
  add(embedding_tensor(c));
  for (const auto& t : head_tensors(c)) add(t);
  for (int l = 0; l < d.num_hidden_layers; ++l) {
    for (const auto& t : layer_tensors(c, l)) add(t);
  }
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace deltafin::synth
