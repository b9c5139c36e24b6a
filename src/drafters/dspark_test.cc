// DSpark config parsing and the derived YaRN table and softmax scale, on the fixture config and
// on the published Inferact/Kimi-K3-DSpark shape (spec drafting.md §1.1-1.2).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "drafters/dspark_config.h"
#include "drafters/dspark_weights.h"
#include "format/safetensors.h"

namespace deltafin::drafters {
namespace {

const std::string kDir = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/dspark-tiny-a";

// The published config's values (spec §1.1).
DSparkConfig real_config() {
  DSparkConfig c;
  c.hidden_size = 7168;
  c.num_heads = 64;
  c.nope_dim = 128;
  c.rope_dim = 64;
  c.rope_theta = 50000.0;
  c.yarn_factor = 32.0;
  c.yarn_original_max_positions = 32768;
  c.yarn_beta_fast = 32;
  c.yarn_beta_slow = 1;
  c.yarn_mscale = 1.0;
  c.yarn_mscale_all_dim = 1.0;
  return c;
}

// The published checkpoint's table: 68 tensors, 3,562,312,961 parameters, 4,775,815,682 bytes
// without the embedding (spec §1.1, from the real file's header).
TEST(DSparkWeights, TheTableOfThePublishedShape) {
  DSparkConfig c = real_config();
  c.intermediate_size = 14336;
  c.num_layers = 5;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.v_dim = 128;
  c.vocab_size = 163840;
  c.target_hidden_size = 7168;
  c.target_layer_ids = {2, 23, 47, 71, 89};
  c.markov_rank = 256;
  const std::vector<DSparkTensor> table = dspark_tensor_table(c);
  EXPECT_EQ(table.size(), 68u);
  int64_t params = 0, embed = 0;
  for (const DSparkTensor& t : table) {
    int64_t n = 1;
    for (const int64_t d : t.shape) n *= d;
    params += n;
    if (t.name == kDSparkEmbedName) embed = n;
  }
  EXPECT_EQ(params, 3'562'312'961);
  EXPECT_EQ((params - embed) * 2, 4'775'815'682);
}

TEST(DSparkConfig, ReadsTheFixture) {
  const DSparkConfig c = load_dspark_config(kDir);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.qk_dim(), 48);
  EXPECT_EQ(c.mask_token_id, 510);
  EXPECT_EQ(c.markov_rank, 48);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{1, 3, 4, 7, 11}));
  EXPECT_EQ(c.context_width(), 320);
  EXPECT_EQ(c.rope_theta, 50000.0);
}

TEST(DSparkConfig, YarnRampOfTheTinyConfig) {
  const DSparkConfig c = load_dspark_config(kDir);
  const YarnTable t = yarn_table(c);
  EXPECT_EQ(t.low, 3);
  EXPECT_EQ(t.high, 7);
  ASSERT_EQ(t.inv_freq.size(), 8u);
  for (int i = 0; i <= 3; ++i) EXPECT_DOUBLE_EQ(t.inv_freq[i], std::pow(50000.0, -2.0 * i / 16));
  EXPECT_DOUBLE_EQ(t.inv_freq[7], std::pow(50000.0, -14.0 / 16) / 32);
  // Pair 5 is halfway up the ramp.
  const double extra5 = std::pow(50000.0, -10.0 / 16);
  EXPECT_NEAR(t.inv_freq[5], 0.5 * extra5 / 32 + 0.5 * extra5, 1e-18);
  EXPECT_DOUBLE_EQ(t.cos_sin_scale, 1.0);
  EXPECT_NEAR(softmax_scale(c), 0.2617216, 5e-8);
}

TEST(DSparkConfig, YarnRampAndScaleOfThePublishedConfig) {
  const DSparkConfig c = real_config();
  const YarnTable t = yarn_table(c);
  EXPECT_EQ(t.low, 15);
  EXPECT_EQ(t.high, 26);
  EXPECT_DOUBLE_EQ(t.inv_freq[14], std::pow(50000.0, -28.0 / 64));
  EXPECT_DOUBLE_EQ(t.inv_freq[26], std::pow(50000.0, -52.0 / 64) / 32);
  EXPECT_NEAR(softmax_scale(c), 0.130861, 5e-7);
  // The base is a config value (spec §1.2a): TorchSpec's 10000 moves the ramp.
  DSparkConfig ts = c;
  ts.rope_theta = 10000.0;
  EXPECT_NE(yarn_table(ts).low, 15);
}

std::string fixture_config() {
  std::ifstream in(kDir + "/config.json");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_refused(const std::string& from, const std::string& to, const std::string& text) {
  std::string json = fixture_config();
  const size_t at = json.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  json.replace(at, from.size(), to);
  try {
    parse_dspark_config(json, "d/config.json");
    ADD_FAILURE() << "accepted " << to;
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("d/config.json"), std::string::npos) << e.what();
  }
}

TEST(DSparkConfig, RefusesWhatItDoesNotImplement) {
  expect_refused("\"k3_dspark\"", "\"k3_dflash\"", "model_type");
  expect_refused("\"mla_use_output_gate\": false", "\"mla_use_output_gate\": true",
                 "mla_use_output_gate");
  expect_refused("\"rope_type\": \"yarn\"", "\"rope_type\": \"linear\"",
                 "rope_parameters.rope_type");
  expect_refused("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 2", "num_key_value_heads");
  expect_refused("\"num_target_layers\": 5", "\"num_target_layers\": 4", "num_target_layers");
  expect_refused("\"draft_vocab_size\": 512", "\"draft_vocab_size\": 256", "draft_vocab_size");
  expect_refused("\"rope_theta\": 50000.0,\n    \"rope_type\"",
                 "\"rope_theta\": 10000.0,\n    \"rope_type\"", "rope_parameters.rope_theta");
  expect_refused("\"markov_rank\": 48", "\"markov_rank\": 48, \"surprise\": 1", "surprise");
  expect_refused("\"target_layer_ids\": [\n    1,", "\"target_layer_ids\": [\n    5,", "ascending");
}

TEST(DSparkWeights, TheFixtureMatchesTheTableExactly) {
  const DSparkConfig c = load_dspark_config(kDir);
  const auto tensors = format::read_safetensors_header(kDir + "/model.safetensors");
  EXPECT_EQ(tensors.size(), 68u);
  EXPECT_EQ(dspark_tensor_table(c).size(), 68u);
  check_dspark_tensors(tensors, c, "m");
  auto bad = tensors;
  bad[3].shape = {1, 2};
  EXPECT_THROW(check_dspark_tensors(bad, c, "m"), base::Error);
  bad = tensors;
  bad[5].dtype = format::DType::kF32;
  EXPECT_THROW(check_dspark_tensors(bad, c, "m"), base::Error);
  bad = tensors;
  bad.pop_back();
  EXPECT_THROW(check_dspark_tensors(bad, c, "m"), base::Error);
  bad = tensors;
  bad.push_back(bad[0]);
  bad.back().name = "lm_head.weight";
  EXPECT_THROW(check_dspark_tensors(bad, c, "m"), base::Error);
}

}  // namespace
}  // namespace deltafin::drafters
