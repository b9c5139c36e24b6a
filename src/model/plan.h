// Config → plan: the validated config becomes one LayerPlan per layer (attention kind, MLP kind,
// resolved weight views) plus the global weights, and the catalog of routed experts. Every tensor
// is checked (name, shape, dtype) while the plan is built, so the forward pass never guesses.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "experts/expert_store.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "model/arch.h"
#include "model/attn_res.h"
#include "model/gqa.h"
#include "model/kda.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/weights.h"

namespace deltafin::model {

// A layer's token mixer: KDA (linear attention with a recurrent state), gated MLA (a latent
// cache per position) or GQA with RoPE (keys and values cached per position).
using AttentionBlock = std::variant<KdaWeights, MlaWeights, GqaWeights>;
// A layer's channel mixer: a dense gated MLP or a routed MoE.
using MlpBlock = std::variant<GluWeights, MoeWeights>;

struct LayerPlan {
  std::vector<float> input_norm;  // [hidden]
  std::vector<float> post_norm;   // [hidden]
  AttnResSite attn_res;           // before attention (K3)
  AttnResSite mlp_res;            // before the MLP (K3)
  AttentionBlock attention;
  MlpBlock mlp;

  // The block of that kind, or nullptr when the layer has the other one.
  const KdaWeights* kda() const { return std::get_if<KdaWeights>(&attention); }
  const MlaWeights* mla() const { return std::get_if<MlaWeights>(&attention); }
  const GqaWeights* gqa() const { return std::get_if<GqaWeights>(&attention); }
  const GluWeights* dense() const { return std::get_if<GluWeights>(&mlp); }
  const MoeWeights* moe() const { return std::get_if<MoeWeights>(&mlp); }
};

struct ModelPlan {
  format::ModelConfig config;
  ArchTraits traits;
  KdaShape kda_shape;
  MlaShape mla_shape;
  GqaShape gqa_shape;
  MoeShape moe_shape;
  WeightMatrix embed;             // [vocab, hidden]
  std::vector<float> final_norm;  // [hidden]
  AttnResSite output_res;         // (K3)
  WeightMatrix lm_head;           // [vocab, hidden] (the embedding when tied)
  std::vector<LayerPlan> layers;
};

// Builds the plan; throws base::Error naming the tensor or config field that does not fit.
ModelPlan build_plan(const format::ModelConfig& config, WeightSource& source);
// One layer's views, resolved through `source` (a streaming source re-resolves a layer this way
// once its bytes are in memory). `plan` supplies config, traits and shapes.
LayerPlan build_layer_plan(const ModelPlan& plan, int64_t layer, WeightSource& source);

// Every routed expert's span and the layout of its matrices within the span.
experts::ExpertCatalog build_expert_catalog(const format::Checkpoint& checkpoint,
                                            const format::ModelConfig& config);

}  // namespace deltafin::model
