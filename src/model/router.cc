// Router selection. Ranks by (biased score descending, id ascending) so ties never depend on the
// sort implementation.
#include "model/router.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "kernels/elementwise.h"

namespace deltafin::model {

void route(const RouterConfig& cfg, const float* logits, const float* bias, RouterScratch& scratch,
           int32_t* experts, float* weights) {
  const int ne = cfg.n_experts;
  std::vector<float>& score = scratch.score;
  std::vector<float>& choice = scratch.choice;
  score.resize(ne);
  choice.resize(ne);
  for (int e = 0; e < ne; ++e) {
    score[e] = kernels::sigmoid(logits[e]);
    choice[e] = score[e] + bias[e];
  }
  auto better = [&](int a, int b) {
    return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
  };
  std::vector<int>& ids = scratch.ids;
  ids.resize(ne);
  std::iota(ids.begin(), ids.end(), 0);
  if (cfg.n_groups > 1 && cfg.n_groups > cfg.topk_groups) {
    // Group score = sum of its two best biased scores; keep the best topk_groups groups.
    const int per = ne / cfg.n_groups;
    std::vector<float>& gscore = scratch.group_score;
    gscore.resize(cfg.n_groups);
    for (int gi = 0; gi < cfg.n_groups; ++gi) {
      std::vector<int>& m = scratch.group_best;
      m.assign(ids.begin() + gi * per, ids.begin() + (gi + 1) * per);
      std::partial_sort(m.begin(), m.begin() + std::min(2, per), m.end(), better);
      gscore[gi] = choice[m[0]] + (per > 1 ? choice[m[1]] : 0.0f);
    }
    std::vector<int>& groups = scratch.group_ids;
    groups.resize(cfg.n_groups);
    std::iota(groups.begin(), groups.end(), 0);
    std::partial_sort(
        groups.begin(), groups.begin() + cfg.topk_groups, groups.end(),
        [&](int a, int b) { return gscore[a] > gscore[b] || (gscore[a] == gscore[b] && a < b); });
    std::vector<bool>& keep = scratch.keep;
    keep.assign(cfg.n_groups, false);
    for (int i = 0; i < cfg.topk_groups; ++i) keep[groups[i]] = true;
    ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int e) { return !keep[e / per]; }),
              ids.end());
  }
  DF_ASSERT(static_cast<int>(ids.size()) >= cfg.top_k);
  std::partial_sort(ids.begin(), ids.begin() + cfg.top_k, ids.end(), better);
  float sum = 0.0f;
  for (int i = 0; i < cfg.top_k; ++i) {
    experts[i] = ids[i];
    weights[i] = score[ids[i]];
    sum += weights[i];
  }
  for (int i = 0; i < cfg.top_k; ++i) {
    if (cfg.renormalize) weights[i] = weights[i] / (sum + 1e-20f);
    weights[i] *= cfg.scaling;
  }
}

}  // namespace deltafin::model
