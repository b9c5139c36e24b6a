// Plan building: each block's weights bound by role from the family's schema (format/schema.h),
// the block choices from the traits.
#include "model/plan.h"

#include <string>

#include "base/error.h"
#include "format/inventory.h"
#include "format/schema.h"

namespace deltafin::model {
namespace {

using format::Role;

AttnResSite load_site(WeightLoader& ld, Role norm_role, Role proj_role) {
  const std::vector<float> norm = ld.vector(norm_role);
  const std::vector<float> proj = ld.vector(proj_role);  // [1, hidden]
  AttnResSite site;
  site.key.resize(norm.size());
  for (size_t i = 0; i < norm.size(); ++i) site.key[i] = norm[i] * proj[i];
  return site;
}

KdaWeights load_kda(WeightLoader& ld, const ArchTraits& t) {
  KdaWeights w;
  w.q_proj = ld.matrix(Role::kKdaQProj);
  w.k_proj = ld.matrix(Role::kKdaKProj);
  w.v_proj = ld.matrix(Role::kKdaVProj);
  w.q_conv = ld.vector(Role::kKdaQConv);
  w.k_conv = ld.vector(Role::kKdaKConv);
  w.v_conv = ld.vector(Role::kKdaVConv);
  w.f_a = ld.matrix(Role::kKdaFAProj);
  w.f_b = ld.matrix(Role::kKdaFBProj);
  w.a_log = ld.per_head(Role::kKdaALog);
  w.dt_bias = ld.vector(Role::kKdaDtBias);
  w.b_proj = ld.matrix(Role::kKdaBProj);
  if (t.kda_full_rank_output_gate) {
    w.g_proj = ld.matrix(Role::kKdaGProj);
  } else {
    w.g_a = ld.matrix(Role::kKdaGAProj);
    w.g_b = ld.matrix(Role::kKdaGBProj);
  }
  w.o_norm = ld.vector(Role::kKdaONorm);
  w.o_proj = ld.matrix(Role::kKdaOProj);
  return w;
}

MlaWeights load_mla(WeightLoader& ld, const MlaShape& s) {
  MlaWeights w;
  if (s.q_lora_rank > 0) {
    w.q_a = ld.matrix(Role::kMlaQAProj);
    w.q_a_norm = ld.vector(Role::kMlaQANorm);
    w.q_b = ld.matrix(Role::kMlaQBProj);
  } else {
    w.q_proj = ld.matrix(Role::kMlaQProj);
  }
  w.kv_a = ld.matrix(Role::kMlaKvAProj);
  w.kv_a_norm = ld.vector(Role::kMlaKvANorm);
  w.kv_b = ld.matrix(Role::kMlaKvBProj);
  if (s.output_gate) w.g_proj = ld.matrix(Role::kMlaGProj);
  w.o_proj = ld.matrix(Role::kMlaOProj);
  return w;
}

GqaWeights load_gqa(WeightLoader& ld) {
  GqaWeights w;
  w.q_proj = ld.matrix(Role::kGqaQProj);
  w.k_proj = ld.matrix(Role::kGqaKProj);
  w.v_proj = ld.matrix(Role::kGqaVProj);
  w.o_proj = ld.matrix(Role::kGqaOProj);
  w.q_norm = ld.vector(Role::kGqaQNorm);
  w.k_norm = ld.vector(Role::kGqaKNorm);
  return w;
}

GluWeights load_glu(WeightLoader& ld, Role gate, Role up, Role down) {
  return {ld.matrix(gate), ld.matrix(up), ld.matrix(down)};
}

MoeWeights load_moe(WeightLoader& ld) {
  MoeWeights w;
  w.router = ld.matrix(Role::kRouter);
  w.score_bias = ld.vector(Role::kRouterBias);
  if (ld.has(Role::kLatentDown)) {
    w.latent_down = ld.matrix(Role::kLatentDown);
    w.latent_up = ld.matrix(Role::kLatentUp);
    if (ld.has(Role::kLatentNorm)) w.latent_norm = ld.vector(Role::kLatentNorm);
  }
  if (ld.has(Role::kSharedGate))
    w.shared = load_glu(ld, Role::kSharedGate, Role::kSharedUp, Role::kSharedDown);
  return w;
}

void check_supported(const format::ModelConfig& c) {
  // A dense model (Qwen3) has no router and its GQA shares keys between heads.
  if (c.count_layers(format::MlpKind::kMoe) == 0 &&
      c.count_layers(format::AttentionKind::kMla) == 0)
    return;
  if (c.moe_router_activation_func != "sigmoid")
    base::fail("config.json: moe_router_activation_func \"", c.moe_router_activation_func,
               "\" is not supported (expected \"sigmoid\")");
  if (c.num_experts > 0 && c.num_expert_group > 1 && c.num_experts % c.num_expert_group != 0)
    base::fail("config.json: num_experts ", c.num_experts,
               " is not a multiple of num_expert_group ", c.num_expert_group);
  if (c.num_attention_heads != c.num_key_value_heads)
    base::fail("config.json: num_key_value_heads ", c.num_key_value_heads,
               " differs from num_attention_heads ", c.num_attention_heads,
               " (MLA has one key per head)");
}

}  // namespace

LayerPlan build_layer_plan(const ModelPlan& plan, int64_t l, WeightSource& source) {
  const format::ModelConfig& c = plan.config;
  const ArchTraits& t = plan.traits;
  WeightLoader ld(source, format::layer_tensors(c, l));
  LayerPlan lp;
  lp.input_norm = ld.vector(Role::kInputNorm);
  lp.post_norm = ld.vector(Role::kPostAttentionNorm);
  if (t.attn_res_block_size > 0) {
    lp.attn_res = load_site(ld, Role::kAttnResNorm, Role::kAttnResProj);
    lp.mlp_res = load_site(ld, Role::kMlpResNorm, Role::kMlpResProj);
  }
  const format::LayerKind kind = c.layer_kinds[l];
  switch (kind.attention) {
    case format::AttentionKind::kKda:
      lp.attention = load_kda(ld, t);
      break;
    case format::AttentionKind::kMla:
      lp.attention = load_mla(ld, plan.mla_shape);
      break;
    case format::AttentionKind::kGqa:
      lp.attention = load_gqa(ld);
      break;
  }
  switch (kind.mlp) {
    case format::MlpKind::kDense:
      lp.mlp = load_glu(ld, Role::kMlpGate, Role::kMlpUp, Role::kMlpDown);
      break;
    case format::MlpKind::kMoe:
      lp.mlp = load_moe(ld);
      break;
  }
  return lp;
}

ModelPlan build_plan(const format::ModelConfig& c, WeightSource& source) {
  check_supported(c);
  ModelPlan plan;
  plan.config = c;
  plan.traits = arch_traits(c);
  const ArchTraits& t = plan.traits;
  const int64_t d = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  plan.kda_shape = {d,
                    c.kda_num_heads,
                    c.kda_head_dim,
                    c.short_conv_kernel_size,
                    t.kda_gate,
                    t.kda_gate_lower_bound,
                    eps};
  plan.mla_shape.hidden = d;
  plan.mla_shape.n_heads = c.num_attention_heads;
  plan.mla_shape.q_lora_rank = t.mla_q_low_rank ? c.q_lora_rank : 0;
  plan.mla_shape.kv_lora_rank = c.kv_lora_rank;
  plan.mla_shape.nope_dim = c.qk_nope_head_dim;
  plan.mla_shape.rope_dim = c.qk_rope_head_dim;
  plan.mla_shape.v_dim = c.v_head_dim;
  plan.mla_shape.output_gate = t.mla_output_gate;
  plan.mla_shape.latent_norm_eps = t.mla_latent_norm_eps;
  plan.gqa_shape = {d, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rope_theta, eps};
  plan.moe_shape.hidden = d;
  plan.moe_shape.width = c.expert_in_size();
  plan.moe_shape.router = {static_cast<int>(c.num_experts),
                           static_cast<int>(c.num_experts_per_token),
                           static_cast<int>(c.use_grouped_topk ? c.num_expert_group : 1),
                           static_cast<int>(c.topk_group),
                           c.moe_renormalize,
                           t.routed_scaling};
  plan.moe_shape.act = t.activation;
  plan.moe_shape.norm_eps = eps;

  WeightLoader ld(source, format::global_tensors(c));
  plan.embed = ld.matrix(Role::kTokenEmbedding);
  plan.final_norm = ld.vector(Role::kFinalNorm);
  if (t.attn_res_block_size > 0)
    plan.output_res = load_site(ld, Role::kOutputResNorm, Role::kOutputResProj);
  plan.lm_head = c.tie_word_embeddings ? plan.embed : ld.matrix(Role::kLmHead);

  plan.layers.reserve(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    plan.layers.push_back(build_layer_plan(plan, l, source));
  return plan;
}

experts::ExpertCatalog build_expert_catalog(const format::Checkpoint& ckpt,
                                            const format::ModelConfig& c) {
  experts::ExpertCatalog catalog;
  catalog.layers.resize(c.num_hidden_layers);
  const format::ExpertSchema schema = format::expert_schema(c);
  for (format::ExpertSpan& span : format::locate_experts(ckpt, c)) {
    experts::ExpertCatalog::Layer& layer = catalog.layers[span.layer];
    if (layer.spans.empty()) {
      layer.spans.resize(c.num_experts);
      // locate_experts checked every expert's tensors are back to back in the same order with
      // the same shapes, so the first expert's offsets hold for all.
      const std::string pre = format::expert_prefix(c, span.layer, span.expert);
      std::vector<uint64_t> rel;
      for (const format::ExpertSchema::Tensor& t : schema.tensors)
        rel.push_back(ckpt.get(pre + t.suffix).offset - span.offset);
      layer.layout = experts::expert_layout(schema, rel, span.nbytes);
    }
    layer.spans[span.expert] = std::move(span);
  }
  return catalog;
}

}  // namespace deltafin::model
