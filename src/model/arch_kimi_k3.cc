// Kimi K3: lower-bounded KDA gate, full-rank KDA output gate, gated MLA with q low rank, SiTU,
// latent MoE with MXFP4 experts, attention residuals.
#include "base/error.h"
#include "model/arch.h"

namespace deltafin::model {
namespace {

void require(bool ok, const char* field, const char* what) {
  if (!ok) base::fail("config.json: text_config.", field, ": ", what, " (required for kimi_k3)");
}

}  // namespace

ArchTraits kimi_k3_traits(const format::ModelConfig& c) {
  require(c.gate_lower_bound.has_value(), "linear_attn_config.gate_lower_bound",
          "missing: K3's KDA gate is lower-bounded");
  require(c.use_full_rank_gate, "linear_attn_config.use_full_rank_gate", "must be true");
  require(c.q_lora_rank > 0, "q_lora_rank", "must be positive");
  require(c.mla_use_nope, "mla_use_nope", "must be true (K3's MLA has no RoPE)");
  require(c.hidden_act == "situ", "hidden_act", "must be \"situ\"");
  require(c.attn_res_block_size > 0, "attn_res_block_size", "must be positive");
  ArchTraits t;
  t.name = "kimi_k3";
  t.kda_gate = KdaGate::kLowerBound;
  t.kda_gate_lower_bound = static_cast<float>(*c.gate_lower_bound);
  t.kda_full_rank_output_gate = true;
  t.mla_q_low_rank = true;
  t.mla_output_gate = c.mla_use_output_gate;
  // Moonshot's code builds q_a_layernorm and kv_a_layernorm with the class default eps 1e-6, not
  // rms_norm_eps (spec §0.2); the k3-tiny-a oracle confirms it (docs/MODEL.md).
  t.mla_latent_norm_eps = 1e-6f;
  t.activation = {Activation::Kind::kSiTU, static_cast<float>(c.situ_beta),
                  static_cast<float>(c.situ_linear_beta)};
  t.routed_scaling = static_cast<float>(c.routed_scaling_factor);
  t.attn_res_block_size = c.attn_res_block_size;
  return t;
}

ArchTraits arch_traits(const format::ModelConfig& c) {
  switch (c.arch) {
    case format::Arch::kKimiK3:
      return kimi_k3_traits(c);
    case format::Arch::kKimiLinear:
      return kimi_linear_traits(c);
    case format::Arch::kQwen3:
      return qwen3_traits(c);
  }
  base::fail("config.json: unsupported architecture");
}

}  // namespace deltafin::model
