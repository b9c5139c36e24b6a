// What a model family decides beyond its config's sizes: the KDA gate function, the output gates,
// the q low-rank path, the activation, routed scaling, attention residuals. Each family's rules
// live in one file (arch_kimi_k3.cc, arch_kimi_linear.cc, arch_qwen3.cc); the blocks only read
// these traits.
#pragma once

#include <cstdint>

#include "format/config.h"
#include "model/kda.h"
#include "model/mlp.h"

namespace deltafin::model {

struct ArchTraits {
  const char* name = "";
  KdaGate kda_gate = KdaGate::kLowerBound;
  float kda_gate_lower_bound = 0.0f;
  bool kda_full_rank_output_gate = false;  // g_proj, else g_a_proj → g_b_proj
  bool mla_q_low_rank = false;             // q_a_proj → q_a_layernorm → q_b_proj, else q_proj
  bool mla_output_gate = false;            // sigmoid(g_proj x) on the attention output
  float mla_latent_norm_eps = 0.0f;        // q_a_layernorm / kv_a_layernorm
  Activation activation;                   // every MLP and expert
  float routed_scaling = 1.0f;
  int64_t attn_res_block_size = 0;  // 0: plain pre-norm residuals
};

// Checks that `config` is a model of the family and derives its traits; throws base::Error naming
// the config field otherwise.
ArchTraits kimi_k3_traits(const format::ModelConfig& config);
ArchTraits kimi_linear_traits(const format::ModelConfig& config);
ArchTraits qwen3_traits(const format::ModelConfig& config);
ArchTraits arch_traits(const format::ModelConfig& config);  // by config.arch

}  // namespace deltafin::model
