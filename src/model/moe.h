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

// The route of n rows: top_k experts per row in rank order and their weights. Reused from pass to
// pass: its vectors keep their storage.
struct Route {
  std::vector<int32_t> experts;  // [n, top_k]
  std::vector<float> weights;    // [n, top_k]
  std::vector<float> logits;     // [n, n_experts]: the router's products
  RouterScratch router;
};

// Routes n rows into `rt`.
void route_rows(const MoeShape& shape, const MoeWeights& w, const float* x, int64_t n, Route& rt);

// The block's intermediates, reused from pass to pass (see scratch.h).
struct MoeWorkspace {
  Route route;
  // The distinct experts of the route in order of first use; the (row, rank) slots that chose
  // distinct expert i are slots[slot_begin[i], slot_begin[i + 1]) in ascending order.
  std::vector<int32_t> distinct;
  std::vector<int64_t> slot_begin, slots, cursor;
  std::vector<int32_t> expert_index;  // [n_experts]: position in `distinct`, or -1 (between passes)
  Scratch<float> z;                   // [n, width]: the routed experts' input
  Scratch<float> contrib;             // [n, top_k, width]: each slot's expert output
  Scratch<float> zin, g, u, y;        // one expert's rows
  Scratch<float> sum;                 // [n, width]
  Scratch<float> shared;              // [n, hidden]: the shared experts' output
  GluWorkspace shared_glu;
};

// out[n, hidden] = MoE(x[n, hidden]) for layer `layer`, experts taken from `store`.
void moe_forward(const MoeShape& shape, const MoeWeights& w, int layer, experts::ExpertStore& store,
                 const float* x, int64_t n, MoeWorkspace& ws, float* out);

}  // namespace deltafin::model
