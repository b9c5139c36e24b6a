// Plan building: tensor names per block, shapes from the config, dtypes as stored.
#include "model/plan.h"

#include <string>

#include "base/error.h"
#include "format/inventory.h"

namespace deltafin::model {
namespace {

AttnResSite load_site(WeightLoader& ld, const std::string& p, int64_t hidden) {
  const std::vector<float> norm = ld.vector(p + "_norm.weight", hidden);
  const std::vector<float> proj = ld.vector(p + "_proj.weight", hidden);  // [1, hidden]
  AttnResSite site;
  site.key.resize(hidden);
  for (int64_t i = 0; i < hidden; ++i) site.key[i] = norm[i] * proj[i];
  return site;
}

KdaWeights load_kda(WeightLoader& ld, const std::string& p, const KdaShape& s,
                    const ArchTraits& t) {
  const int64_t d = s.hidden, pw = s.width(), hd = s.head_dim;
  KdaWeights w;
  w.q_proj = ld.matrix(p + "q_proj.weight", pw, d);
  w.k_proj = ld.matrix(p + "k_proj.weight", pw, d);
  w.v_proj = ld.matrix(p + "v_proj.weight", pw, d);
  w.q_conv = ld.vector(p + "q_conv1d.weight", pw * s.conv_kernel);
  w.k_conv = ld.vector(p + "k_conv1d.weight", pw * s.conv_kernel);
  w.v_conv = ld.vector(p + "v_conv1d.weight", pw * s.conv_kernel);
  w.f_a = ld.matrix(p + "f_a_proj.weight", hd, d);
  w.f_b = ld.matrix(p + "f_b_proj.weight", pw, hd);
  w.a_log = ld.per_head(p + "A_log", s.n_heads);
  w.dt_bias = ld.vector(p + "dt_bias", pw);
  w.b_proj = ld.matrix(p + "b_proj.weight", s.n_heads, d);
  if (t.kda_full_rank_output_gate) {
    w.g_proj = ld.matrix(p + "g_proj.weight", pw, d);
  } else {
    w.g_a = ld.matrix(p + "g_a_proj.weight", hd, d);
    w.g_b = ld.matrix(p + "g_b_proj.weight", pw, hd);
  }
  w.o_norm = ld.vector(p + "o_norm.weight", hd);
  w.o_proj = ld.matrix(p + "o_proj.weight", d, pw);
  return w;
}

MlaWeights load_mla(WeightLoader& ld, const std::string& p, const MlaShape& s) {
  const int64_t d = s.hidden, nh = s.n_heads;
  MlaWeights w;
  if (s.q_lora_rank > 0) {
    w.q_a = ld.matrix(p + "q_a_proj.weight", s.q_lora_rank, d);
    w.q_a_norm = ld.vector(p + "q_a_layernorm.weight", s.q_lora_rank);
    w.q_b = ld.matrix(p + "q_b_proj.weight", nh * s.qk_dim(), s.q_lora_rank);
  } else {
    w.q_proj = ld.matrix(p + "q_proj.weight", nh * s.qk_dim(), d);
  }
  w.kv_a = ld.matrix(p + "kv_a_proj_with_mqa.weight", s.kv_lora_rank + s.rope_dim, d);
  w.kv_a_norm = ld.vector(p + "kv_a_layernorm.weight", s.kv_lora_rank);
  w.kv_b = ld.matrix(p + "kv_b_proj.weight", nh * (s.nope_dim + s.v_dim), s.kv_lora_rank);
  if (s.output_gate) w.g_proj = ld.matrix(p + "g_proj.weight", nh * s.v_dim, d);
  w.o_proj = ld.matrix(p + "o_proj.weight", d, nh * s.v_dim);
  return w;
}

GluWeights load_glu(WeightLoader& ld, const std::string& p, int64_t inter, int64_t d) {
  return {ld.matrix(p + "gate_proj.weight", inter, d), ld.matrix(p + "up_proj.weight", inter, d),
          ld.matrix(p + "down_proj.weight", d, inter)};
}

MoeWeights load_moe(WeightLoader& ld, const std::string& p, const format::ModelConfig& c) {
  const int64_t d = c.hidden_size;
  MoeWeights w;
  w.router = ld.matrix(p + "gate.weight", c.num_experts, d, /*allow_f32=*/true);
  w.score_bias = ld.vector(p + "gate.e_score_correction_bias", c.num_experts);
  if (c.routed_expert_hidden_size > 0) {
    const int64_t lat = c.routed_expert_hidden_size;
    w.latent_down = ld.matrix(p + "routed_expert_down_proj.weight", lat, d);
    w.latent_up = ld.matrix(p + "routed_expert_up_proj.weight", d, lat);
    if (c.latent_moe_use_norm) w.latent_norm = ld.vector(p + "routed_expert_norm.weight", lat);
  }
  if (c.num_shared_experts > 0)
    w.shared =
        load_glu(ld, p + "shared_experts.", c.moe_intermediate_size * c.num_shared_experts, d);
  return w;
}

void check_supported(const format::ModelConfig& c) {
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
  const int64_t d = c.hidden_size;
  WeightLoader ld(source);
  LayerPlan lp;
  const std::string p = c.tensor_prefix + "model.layers." + std::to_string(l) + ".";
  lp.input_norm = ld.vector(p + "input_layernorm.weight", d);
  lp.post_norm = ld.vector(p + "post_attention_layernorm.weight", d);
  if (t.attn_res_block_size > 0) {
    lp.attn_res = load_site(ld, p + "self_attention_res", d);
    lp.mlp_res = load_site(ld, p + "mlp_res", d);
  }
  const format::LayerKind kind = c.layer_kinds[l];
  switch (kind.attention) {
    case format::AttentionKind::kKda:
      lp.attention = load_kda(ld, p + "self_attn.", plan.kda_shape, t);
      break;
    case format::AttentionKind::kMla:
      lp.attention = load_mla(ld, p + "self_attn.", plan.mla_shape);
      break;
  }
  switch (kind.mlp) {
    case format::MlpKind::kDense:
      lp.mlp = load_glu(ld, p + "mlp.", c.intermediate_size, d);
      break;
    case format::MlpKind::kMoe:
      lp.mlp = load_moe(ld, p + "block_sparse_moe.", c);
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

  WeightLoader ld(source);
  const std::string g = c.tensor_prefix;
  plan.embed = ld.matrix(g + "model.embed_tokens.weight", c.vocab_size, d);
  plan.final_norm = ld.vector(g + "model.norm.weight", d);
  if (t.attn_res_block_size > 0) plan.output_res = load_site(ld, g + "model.output_attn_res", d);
  plan.lm_head =
      c.tie_word_embeddings ? plan.embed : ld.matrix(g + "lm_head.weight", c.vocab_size, d);

  plan.layers.reserve(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    plan.layers.push_back(build_layer_plan(plan, l, source));
  return plan;
}

experts::ExpertCatalog build_expert_catalog(const format::Checkpoint& ckpt,
                                            const format::ModelConfig& c) {
  experts::ExpertCatalog catalog;
  catalog.layers.resize(c.num_hidden_layers);
  for (format::ExpertSpan& span : format::locate_experts(ckpt, c)) {
    experts::ExpertCatalog::Layer& layer = catalog.layers[span.layer];
    if (layer.spans.empty()) {
      layer.spans.resize(c.num_experts);
      // locate_experts checked every expert's tensors are back to back in the same order with
      // the same shapes, so the first expert's offsets hold for all.
      const std::vector<std::string>& sfx = format::expert_tensor_suffixes(c);
      const std::string pre = format::expert_prefix(c, span.layer, span.expert);
      auto rel = [&](size_t i) { return ckpt.get(pre + sfx[i]).offset - span.offset; };
      const int64_t in = c.expert_in_size(), mid = c.moe_intermediate_size;
      experts::ExpertLayout& lay = layer.layout;
      if (c.experts_mxfp4) {
        lay.gate = {kernels::WeightDType::kMxfp4, rel(0), rel(1), mid, in};
        lay.down = {kernels::WeightDType::kMxfp4, rel(2), rel(3), in, mid};
        lay.up = {kernels::WeightDType::kMxfp4, rel(4), rel(5), mid, in};
      } else {
        lay.gate = {kernels::WeightDType::kBF16, rel(0), 0, mid, in};
        lay.down = {kernels::WeightDType::kBF16, rel(1), 0, in, mid};
        lay.up = {kernels::WeightDType::kBF16, rel(2), 0, mid, in};
      }
      lay.span_bytes = span.nbytes;
    }
    layer.spans[span.expert] = std::move(span);
  }
  return catalog;
}

}  // namespace deltafin::model
