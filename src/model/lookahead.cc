// Next-layer router lookahead (one row): mix → norm → router, as the MoE block would route.
#include "model/lookahead.h"

#include "base/error.h"
#include "model/moe.h"
#include "model/ops.h"

namespace deltafin::model {

std::vector<int32_t> predict_route(const ModelPlan& plan, const LayerPlan& next,
                                   const std::vector<const float*>& blocks, const float* h) {
  DF_ASSERT(next.moe() != nullptr);
  const int64_t d = plan.config.hidden_size;
  const float eps = static_cast<float>(plan.config.rms_norm_eps);
  std::vector<float> x(d);
  if (plan.traits.attn_res_block_size > 0 && !blocks.empty()) {
    attn_res_mix(next.mlp_res, blocks, h, 1, d, eps, x.data());
  } else {
    x.assign(h, h + d);
  }
  rmsnorm_rows(x.data(), next.post_norm.data(), 1, d, eps, x.data());
  return route_rows(plan.moe_shape, *next.moe(), x.data(), 1).experts;
}

}  // namespace deltafin::model
