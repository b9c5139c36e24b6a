// Kimi-Linear: softplus KDA gate, low-rank KDA output gate, MLA without q low rank or output gate,
// SwiGLU experts (BF16), routed scaling, plain pre-norm residuals.
#include "base/error.h"
#include "model/arch.h"

namespace deltafin::model {
namespace {

void require(bool ok, const char* field, const char* what) {
  if (!ok) base::fail("config.json: ", field, ": ", what, " (required for kimi_linear)");
}

}  // namespace

ArchTraits kimi_linear_traits(const format::ModelConfig& c) {
  require(!c.gate_lower_bound.has_value(), "linear_attn_config.gate_lower_bound",
          "must be absent: Kimi-Linear's KDA gate is −exp(A_log)·softplus");
  require(c.mla_use_nope, "mla_use_nope", "must be true (Kimi-Linear's MLA has no RoPE)");
  require(c.attn_res_block_size == 0, "attn_res_block_size", "must be absent");
  ArchTraits t;
  t.name = "kimi_linear";
  t.kda_gate = KdaGate::kSoftplus;
  t.kda_full_rank_output_gate = c.use_full_rank_gate;
  t.mla_q_low_rank = c.q_lora_rank > 0;
  t.mla_output_gate = c.mla_use_output_gate;
  // transformers' KimiLinearRMSNorm defaults to eps 1e-6 and the MLA latent norms take the default.
  t.mla_latent_norm_eps = 1e-6f;
  if (c.hidden_act == "situ") {
    t.activation = {Activation::Kind::kSiTU, static_cast<float>(c.situ_beta),
                    static_cast<float>(c.situ_linear_beta)};
  } else {
    t.activation = {Activation::Kind::kSiLU, 0.0f, 0.0f};
  }
  t.routed_scaling = static_cast<float>(c.routed_scaling_factor);
  t.attn_res_block_size = 0;
  return t;
}

}  // namespace deltafin::model
