// Family traits: each arch file derives the blocks' choices from its config and refuses a config
// of the other family, naming the field.
#include <gtest/gtest.h>

#include "base/error.h"
#include "format/config.h"
#include "model/arch.h"

namespace deltafin::model {
namespace {

const std::string kFixtures = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/";

std::string error_of(ArchTraits (*fn)(const format::ModelConfig&), const format::ModelConfig& c) {
  try {
    fn(c);
  } catch (const base::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Arch, KimiK3Traits) {
  const format::ModelConfig c = format::load_config(kFixtures + "k3-tiny-a");
  const ArchTraits t = arch_traits(c);
  EXPECT_STREQ(t.name, "kimi_k3");
  EXPECT_EQ(t.kda_gate, KdaGate::kLowerBound);
  EXPECT_EQ(t.kda_gate_lower_bound, -5.0f);
  EXPECT_TRUE(t.kda_full_rank_output_gate);
  EXPECT_TRUE(t.mla_q_low_rank);
  EXPECT_TRUE(t.mla_output_gate);
  EXPECT_EQ(t.mla_latent_norm_eps, 1e-6f);
  EXPECT_EQ(t.activation.kind, Activation::Kind::kSiTU);
  EXPECT_EQ(t.attn_res_block_size, 4);
  EXPECT_NE(error_of(kimi_linear_traits, c).find("gate_lower_bound"), std::string::npos);
}

TEST(Arch, KimiLinearTraits) {
  const format::ModelConfig c = format::load_config(kFixtures + "kimi-linear-tiny");
  const ArchTraits t = arch_traits(c);
  EXPECT_STREQ(t.name, "kimi_linear");
  EXPECT_EQ(t.kda_gate, KdaGate::kSoftplus);
  EXPECT_FALSE(t.kda_full_rank_output_gate);
  EXPECT_FALSE(t.mla_q_low_rank);
  EXPECT_FALSE(t.mla_output_gate);
  EXPECT_EQ(t.activation.kind, Activation::Kind::kSiLU);
  EXPECT_FLOAT_EQ(t.routed_scaling, 2.446f);
  EXPECT_EQ(t.attn_res_block_size, 0);
  EXPECT_NE(error_of(kimi_k3_traits, c).find("gate_lower_bound"), std::string::npos);
}

}  // namespace
}  // namespace deltafin::model
