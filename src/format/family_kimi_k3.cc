// Kimi K3's tensor table (spec/kimi-k3.md §2): names follow the release (all under
// "language_model."), shapes the text_config, dtypes what the release stores. K3 always has
// attention residuals, the full-rank KDA output gate and MLA's q low rank (model/arch_kimi_k3.cc
// requires them); the rest follows the config.
#include "format/schema.h"

namespace deltafin::format {

const FamilySchema& kimi_k3_schema() {
  using enum Block;
  using enum Role;
  using enum Dim;
  using enum Need;
  static const FamilySchema schema{
      Arch::kKimiK3,
      "language_model.",
      "model.layers.",
      "block_sparse_moe.experts.",
      {
          {kGlobal, kTokenEmbedding, "model.embed_tokens.weight", {kVocab, kHidden}},
          {kGlobal, kFinalNorm, "model.norm.weight", {kHidden}, kSmallBf16},
          {kGlobal, kOutputResNorm, "model.output_attn_res_norm.weight", {kHidden}, kSmallBf16},
          {kGlobal,
           kOutputResProj,
           "model.output_attn_res_proj.weight",
           {kOne, kHidden},
           kSmallBf16},
          {kGlobal, kLmHead, "lm_head.weight", {kVocab, kHidden}, kBf16, kUntiedLmHead},

          {kLayer, kInputNorm, "input_layernorm.weight", {kHidden}, kSmallBf16},
          {kLayer, kPostAttentionNorm, "post_attention_layernorm.weight", {kHidden}, kSmallBf16},
          {kLayer, kAttnResNorm, "self_attention_res_norm.weight", {kHidden}, kSmallBf16},
          {kLayer, kAttnResProj, "self_attention_res_proj.weight", {kOne, kHidden}, kSmallBf16},
          {kLayer, kMlpResNorm, "mlp_res_norm.weight", {kHidden}, kSmallBf16},
          {kLayer, kMlpResProj, "mlp_res_proj.weight", {kOne, kHidden}, kSmallBf16},

          {kKda, kKdaQProj, "self_attn.q_proj.weight", {kKdaWidth, kHidden}},
          {kKda,
           kKdaQConv,
           "self_attn.q_conv1d.weight",
           {kKdaWidth, kOne, kConvKernel},
           kSmallF32},  // depthwise
          {kKda, kKdaKProj, "self_attn.k_proj.weight", {kKdaWidth, kHidden}},
          {kKda, kKdaKConv, "self_attn.k_conv1d.weight", {kKdaWidth, kOne, kConvKernel}, kSmallF32},
          {kKda, kKdaVProj, "self_attn.v_proj.weight", {kKdaWidth, kHidden}},
          {kKda, kKdaVConv, "self_attn.v_conv1d.weight", {kKdaWidth, kOne, kConvKernel}, kSmallF32},
          {kKda, kKdaFAProj, "self_attn.f_a_proj.weight", {kKdaHeadDim, kHidden}},
          {kKda, kKdaFBProj, "self_attn.f_b_proj.weight", {kKdaWidth, kKdaHeadDim}},
          {kKda, kKdaBProj, "self_attn.b_proj.weight", {kKdaHeads, kHidden}},
          {kKda,
           kKdaALog,
           "self_attn.A_log",
           {kKdaHeads},
           kSmallF32,
           kAlways,
           ShapeRule::kPerHeadVector},
          {kKda, kKdaDtBias, "self_attn.dt_bias", {kKdaWidth}, kSmallF32},
          {kKda, kKdaONorm, "self_attn.o_norm.weight", {kKdaHeadDim}, kSmallF32},
          {kKda, kKdaOProj, "self_attn.o_proj.weight", {kHidden, kKdaWidth}},
          {kKda, kKdaGProj, "self_attn.g_proj.weight", {kKdaWidth, kHidden}},

          {kMla, kMlaQAProj, "self_attn.q_a_proj.weight", {kQLoraRank, kHidden}},
          {kMla, kMlaQANorm, "self_attn.q_a_layernorm.weight", {kQLoraRank}, kSmallBf16},
          {kMla, kMlaQBProj, "self_attn.q_b_proj.weight", {kMlaQWidth, kQLoraRank}},
          {kMla, kMlaKvAProj, "self_attn.kv_a_proj_with_mqa.weight", {kMlaKvAWidth, kHidden}},
          {kMla, kMlaKvANorm, "self_attn.kv_a_layernorm.weight", {kKvLoraRank}, kSmallBf16},
          {kMla, kMlaKvBProj, "self_attn.kv_b_proj.weight", {kMlaKvBWidth, kKvLoraRank}},
          {kMla, kMlaOProj, "self_attn.o_proj.weight", {kHidden, kMlaOWidth}},
          {kMla,
           kMlaGProj,
           "self_attn.g_proj.weight",
           {kMlaOWidth, kHidden},
           kBf16,
           kMlaOutputGate},

          {kDense, kMlpGate, "mlp.gate_proj.weight", {kIntermediate, kHidden}},
          {kDense, kMlpUp, "mlp.up_proj.weight", {kIntermediate, kHidden}},
          {kDense, kMlpDown, "mlp.down_proj.weight", {kHidden, kIntermediate}},

          {kMoe, kRouter, "block_sparse_moe.gate.weight", {kExperts, kHidden}, kSmallBf16},
          {kMoe,
           kRouterBias,
           "block_sparse_moe.gate.e_score_correction_bias",
           {kExperts},
           kSmallF32},
          {kMoe,
           kSharedGate,
           "block_sparse_moe.shared_experts.gate_proj.weight",
           {kSharedWidth, kHidden},
           kBf16,
           kSharedExperts},
          {kMoe,
           kSharedUp,
           "block_sparse_moe.shared_experts.up_proj.weight",
           {kSharedWidth, kHidden},
           kBf16,
           kSharedExperts},
          {kMoe,
           kSharedDown,
           "block_sparse_moe.shared_experts.down_proj.weight",
           {kHidden, kSharedWidth},
           kBf16,
           kSharedExperts},
          {kMoe,
           kLatentDown,
           "block_sparse_moe.routed_expert_down_proj.weight",
           {kLatent, kHidden},
           kBf16,
           kLatentMoe},
          {kMoe,
           kLatentUp,
           "block_sparse_moe.routed_expert_up_proj.weight",
           {kHidden, kLatent},
           kBf16,
           kLatentMoe},
          {kMoe,
           kLatentNorm,
           "block_sparse_moe.routed_expert_norm.weight",
           {kLatent},
           kSmallBf16,
           kLatentMoeNorm},

          // MXFP4 in the release (compressed-tensors mxfp4-pack-quantized).
          {kExpert, kExpertGate, "w1", {kExpertMid, kExpertIn}},
          {kExpert, kExpertDown, "w2", {kExpertIn, kExpertMid}},
          {kExpert, kExpertUp, "w3", {kExpertMid, kExpertIn}},
      }};
  return schema;
}

}  // namespace deltafin::format
