// Tests for the tensor roster and the inventory check: the fixture is complete, K3's roster has the
// published counts, and damaged copies give problems that name the tensor and what is wrong.
#include "format/inventory.h"

#include <gtest/gtest.h>

#include <set>

#include "format/test_util.h"

namespace deltafin::format {
namespace {

using nlohmann::json;
using testing::error_of;
using testing::TempDir;

constexpr const char* kShard1 = "model-00001-of-000002.safetensors";

bool any_problem_contains(const std::vector<InventoryProblem>& problems, const std::string& text) {
  for (const auto& p : problems) {
    if (p.message.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string all(const std::vector<InventoryProblem>& problems) {
  std::string s;
  for (const auto& p : problems) s += p.message + "\n";
  return s;
}

TEST(Inventory, TheFixtureIsCompleteAndConsistent) {
  const Checkpoint ckpt = Checkpoint::open(testing::fixture_dir());
  const ModelConfig config = load_config(testing::fixture_dir());
  const InventoryReport report = inspect_inventory(ckpt, config);
  EXPECT_TRUE(report.problems.empty()) << all(report.problems);
  EXPECT_TRUE(report.unused.empty());
  ASSERT_EQ(report.experts.size(), 12u * 32u);
  EXPECT_EQ(report.experts_by_layer[0], 0);
  EXPECT_EQ(report.experts_by_layer[1], 32);
  EXPECT_EQ(expert_span_bytes(config), 3u * (512 + 32));
  for (const ExpertSpan& s : report.experts) EXPECT_EQ(s.nbytes, expert_span_bytes(config));
  EXPECT_EQ(report.expert_bytes, 384u * 1632u);

  uint64_t total = report.global_spine_bytes + report.expert_bytes;
  for (uint64_t b : report.spine_bytes_by_layer) total += b;
  uint64_t file_bytes = 0;
  for (const TensorInfo& t : ckpt.tensors()) file_bytes += t.nbytes;
  EXPECT_EQ(total, file_bytes);
  EXPECT_EQ(total, 1864000u);  // metadata.total_size of the index

  // locate_experts agrees, and the first expert of layer 1 starts right after layer 0's tensors.
  const std::vector<ExpertSpan> spans = locate_experts(ckpt, config);
  ASSERT_EQ(spans.size(), report.experts.size());
  EXPECT_EQ(spans[0].layer, 1);
  EXPECT_EQ(spans[0].expert, 0);
  EXPECT_EQ(
      spans[0].offset,
      ckpt.get("language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed").offset);
  EXPECT_EQ(spans[0].file, testing::fixture_dir() + "/" + kShard1);
}

// The K3 table resolved for the oracle's config names exactly the oracle's tensors.
TEST(Inventory, TheRosterMatchesTheFixtureExactly) {
  const Checkpoint ckpt = Checkpoint::open(testing::fixture_dir());
  const auto expected = expected_tensors(load_config(testing::fixture_dir()));
  std::set<std::string> want, got;
  for (const ExpectedTensor& e : expected) want.insert(e.name);
  for (const TensorInfo& t : ckpt.tensors()) got.insert(t.name);
  EXPECT_EQ(expected.size(), want.size());  // no name twice
  EXPECT_EQ(want, got);
}

TEST(Inventory, TheKimiLinearFixtureIsCompleteAndConsistent) {
  const std::string dir = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/kimi-linear-tiny";
  const Checkpoint ckpt = Checkpoint::open(dir);
  const ModelConfig config = load_config(dir);
  const InventoryReport report = inspect_inventory(ckpt, config);
  EXPECT_TRUE(report.problems.empty()) << all(report.problems);
  EXPECT_TRUE(report.unused.empty());
  EXPECT_EQ(expected_tensors(config).size(), ckpt.tensors().size());
  ASSERT_EQ(report.experts.size(), 5u * 16u);
  EXPECT_EQ(expert_span_bytes(config), 3u * 32u * 64u * 2u);  // w1, w2, w3 in BF16
  EXPECT_EQ(report.experts[0].offset,
            ckpt.get("model.layers.1.block_sparse_moe.experts.0.w1.weight").offset);
}

TEST(Inventory, TheK3RosterHasThePublishedCounts) {
  json j = json::parse(testing::read_file(testing::fixture_dir() + "/config.json"));
  json& t = j["text_config"];
  t.update(json::parse(R"({"hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 93,
      "num_attention_heads": 96, "num_key_value_heads": 96, "intermediate_size": 33792,
      "moe_intermediate_size": 3072, "routed_expert_hidden_size": 3584, "num_experts": 896,
      "num_experts_per_token": 16, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
      "qk_rope_head_dim": 64, "v_head_dim": 128, "attn_res_block_size": 12})"));
  json full = json::array(), kda = json::array();
  for (int l = 1; l <= 93; ++l) (l % 4 == 0 || l == 93 ? full : kda).push_back(l);
  t["linear_attn_config"].update(
      {{"full_attn_layers", full}, {"kda_layers", kda}, {"num_heads", 96}, {"head_dim", 128}});
  const ModelConfig config = parse_config_json(j.dump(), "k3.json");
  const auto expected = expected_tensors(config);
  size_t n_expert = 0, n_spine = 0;
  for (const auto& e : expected) (e.placement == Placement::kExpert ? n_expert : n_spine)++;
  EXPECT_EQ(n_spine, 2460u);     // kimi-k3.md §2: language non-expert tensors
  EXPECT_EQ(n_expert, 494592u);  // 92 layers x 896 experts x 6
  EXPECT_EQ(expert_span_bytes(config), 17547264u);
  for (const auto& e : expected) {
    if (e.name == "language_model.model.layers.1.block_sparse_moe.experts.5.w2.weight_scale") {
      EXPECT_EQ(e.shape, (std::vector<int64_t>{3584, 96}));
    }
    if (e.name == "language_model.model.layers.3.self_attn.kv_b_proj.weight") {
      EXPECT_EQ(e.shape, (std::vector<int64_t>{24576, 512}));
    }
    if (e.name == "language_model.model.layers.0.self_attn.A_log") {
      EXPECT_EQ(e.shape_rule, ShapeRule::kPerHeadVector);
    }
  }
}

TEST(Inventory, PerHeadVectorsMayBePadded) {
  ExpectedTensor a_log{
      "A_log", {4}, {DType::kF32}, Placement::kLayer, 0, -1, ShapeRule::kPerHeadVector};
  EXPECT_TRUE(shape_matches(a_log, {4}));
  EXPECT_TRUE(shape_matches(a_log, {32}));
  EXPECT_TRUE(shape_matches(a_log, {1, 1, 4, 1}));
  EXPECT_FALSE(shape_matches(a_log, {2}));
  EXPECT_FALSE(shape_matches(a_log, {4, 4}));
  ExpectedTensor exact{"w", {4, 8}, {DType::kBF16}};
  EXPECT_TRUE(shape_matches(exact, {4, 8}));
  EXPECT_FALSE(shape_matches(exact, {8, 4}));
}

// A copy of the fixture with shard 1's header edited.
class DamagedCopy : public ::testing::Test {
 protected:
  void SetUp() override { testing::copy_fixture(dir_.path()); }
  void edit_shard1(const std::function<void(json&)>& edit) {
    testing::edit_header(dir_.file(kShard1), edit);
  }
  std::vector<InventoryProblem> problems() {
    return check_inventory(Checkpoint::open(dir_.path()), load_config(dir_.path()));
  }
  TempDir dir_;
};

TEST_F(DamagedCopy, WrongDType) {
  edit_shard1(
      [](json& h) { h["language_model.model.layers.0.mlp.up_proj.weight"]["dtype"] = "F16"; });
  const auto p = problems();
  ASSERT_EQ(p.size(), 1u) << all(p);
  EXPECT_NE(p[0].message.find(kShard1), std::string::npos);
  EXPECT_NE(
      p[0].message.find(
          "tensor language_model.model.layers.0.mlp.up_proj.weight has dtype F16, expected BF16"),
      std::string::npos)
      << p[0].message;
}

TEST_F(DamagedCopy, SmallTensorsMayBeF32OrBF16) {
  // dt_bias [64] is F32 in the fixture: as BF16 [128] it covers the same bytes but the wrong shape,
  // and as I32 it has the wrong dtype.
  edit_shard1(
      [](json& h) { h["language_model.model.layers.0.self_attn.dt_bias"]["dtype"] = "I32"; });
  EXPECT_TRUE(any_problem_contains(problems(), "dt_bias has dtype I32, expected F32 or BF16"));
}

TEST_F(DamagedCopy, WrongShape) {
  edit_shard1([](json& h) {
    h["language_model.model.layers.0.self_attn.q_proj.weight"]["shape"] = {32, 128};
  });
  const auto p = problems();
  ASSERT_EQ(p.size(), 1u) << all(p);
  EXPECT_NE(p[0].message.find("q_proj.weight has shape [32, 128], expected [64, 64]"),
            std::string::npos)
      << p[0].message;
}

TEST_F(DamagedCopy, MissingTensor) {
  // Renamed in the header and the index, so the folder itself stays consistent.
  const std::string old_name = "language_model.model.layers.2.self_attn.o_norm.weight";
  edit_shard1([&](json& h) {
    h["language_model.model.layers.2.self_attn.o_norm.weightx"] = h[old_name];
    h.erase(old_name);
  });
  const std::string index_path = dir_.file(kIndexFileName);
  json index = json::parse(testing::read_file(index_path));
  index["weight_map"]["language_model.model.layers.2.self_attn.o_norm.weightx"] = kShard1;
  index["weight_map"].erase(old_name);
  testing::write_file(index_path, index.dump());
  const Checkpoint ckpt = Checkpoint::open(dir_.path());
  const InventoryReport report = inspect_inventory(ckpt, load_config(dir_.path()));
  ASSERT_EQ(report.problems.size(), 1u) << all(report.problems);
  EXPECT_NE(report.problems[0].message.find("missing tensor " + old_name +
                                            " (expected F32 or BF16 [16])"),
            std::string::npos)
      << report.problems[0].message;
  ASSERT_EQ(report.unused.size(), 1u);
  EXPECT_EQ(report.unused[0]->name, old_name + "x");
}

TEST_F(DamagedCopy, NonContiguousExpert) {
  // Swap the ranges of two same-sized tensors of one expert: w1 packed now sits after w2 packed.
  const std::string p = "language_model.model.layers.1.block_sparse_moe.experts.3.";
  edit_shard1([&](json& h) {
    std::swap(h[p + "w1.weight_packed"]["data_offsets"], h[p + "w2.weight_packed"]["data_offsets"]);
  });
  const auto problems_found = problems();
  ASSERT_EQ(problems_found.size(), 1u) << all(problems_found);
  const std::string& msg = problems_found[0].message;
  EXPECT_NE(msg.find("layer 1 expert 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("back to back"), std::string::npos) << msg;
  const std::string thrown =
      error_of([&] { locate_experts(Checkpoint::open(dir_.path()), load_config(dir_.path())); });
  EXPECT_EQ(thrown, msg);
}

TEST_F(DamagedCopy, ConfigWithMoreExpertsThanTheCheckpoint) {
  json config = json::parse(testing::read_file(dir_.file("config.json")));
  config["text_config"]["num_experts"] = 33;
  config["text_config"]["num_experts_per_token"] = 3;
  testing::write_file(dir_.file("config.json"), config.dump());
  const auto p = problems();
  EXPECT_TRUE(any_problem_contains(
      p,
      "missing tensor language_model.model.layers.1.block_sparse_moe.experts.32.w1.weight_packed "
      "(expected U8 [32, 16])"))
      << all(p);
  EXPECT_TRUE(any_problem_contains(p, "gate.weight has shape [32, 64], expected [33, 64]"))
      << all(p);
}

}  // namespace
}  // namespace deltafin::format
