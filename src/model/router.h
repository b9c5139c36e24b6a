// The MoE router (DeepSeek-V3 / Kimi style): sigmoid scores in fp32, a bias used only to choose,
// optional group masking, top-k with a fixed tie rule, renormalized and scaled weights.
#pragma once

#include <cstdint>
#include <vector>

namespace deltafin::model {

struct RouterConfig {
  int n_experts = 0;
  int top_k = 0;
  int n_groups = 1;     // num_expert_group
  int topk_groups = 1;  // groups kept when n_groups > topk_groups
  bool renormalize = true;
  float scaling = 1.0f;  // routed_scaling_factor
};

// The router's per-row intermediates, reused from row to row and pass to pass.
struct RouterScratch {
  std::vector<float> score, choice, group_score;
  std::vector<int> ids, group_ids, group_best;
  std::vector<bool> keep;
};

// From one row of router logits [n_experts] and the correction bias [n_experts], writes the
// top_k chosen experts in rank order (highest biased score first; equal scores: lower id first)
// and their weights sigmoid(logit) (not biased), renormalized by (Σ + 1e-20) and scaled.
void route(const RouterConfig& cfg, const float* logits, const float* bias, RouterScratch& scratch,
           int32_t* experts, float* weights);

}  // namespace deltafin::model
