// The MoE block: route every row, fetch each selected expert once for all rows that chose it,
// sum the weighted expert outputs in a fixed order, optional latent projections, shared experts.
#pragma once

#include <cstdint>
#include <vector>

#include "experts/expert_store.h"
#include "model/mlp.h"
#include "model/router.h"

namespace deltafin::model {

struct MoeShape {
  int64_t hidden = 0;
  int64_t width = 0;  // routed experts' input/output width: routed_expert_hidden_size or hidden
  RouterConfig router;
  Activation act;
  float norm_eps = 0.0f;  // routed_expert_norm
};

struct MoeWeights {
  WeightMatrix router;             // [n_experts, hidden]
  std::vector<float> score_bias;   // [n_experts]: e_score_correction_bias, selection only
  WeightMatrix latent_down;        // [width, hidden]: routed_expert_down_proj, or empty
  std::vector<float> latent_norm;  // [width]: routed_expert_norm, or empty
  WeightMatrix latent_up;          // [hidden, width]: routed_expert_up_proj, or empty
  GluWeights shared;  // shared experts fused, [n_shared · moe_inter, hidden]; or empty
};

// The route of n rows: top_k experts per row in rank order and their weights.
struct Route {
  std::vector<int32_t> experts;  // [n, top_k]
  std::vector<float> weights;    // [n, top_k]
};

Route route_rows(const MoeShape& shape, const MoeWeights& w, const float* x, int64_t n);

// out[n, hidden] = MoE(x[n, hidden]) for layer `layer`, experts taken from `store`.
void moe_forward(const MoeShape& shape, const MoeWeights& w, int layer, experts::ExpertStore& store,
                 const float* x, int64_t n, float* out);

}  // namespace deltafin::model
