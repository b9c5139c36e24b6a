// Next-layer router lookahead (one row of the stream): mix → norm → router, as the MoE block would
// route.
#include "model/lookahead.h"

#include "base/error.h"
#include "kernels/activation.h"

namespace deltafin::model {

std::span<const int32_t> predict_route(const ModelPlan& plan, const LayerPlan& next,
                                       const ResidualStream& stream, int64_t row,
                                       LookaheadWorkspace& ws) {
  DF_ASSERT(next.moe() != nullptr);
  const int64_t d = plan.config.hidden_size;
  const float eps = static_cast<float>(plan.config.rms_norm_eps);
  float* x = ws.x.get(d);
  stream.mix_rows(next.mlp_res, row, 1, x);
  kernels::rmsnorm(x, next.post_norm.data(), d, eps, x);
  route_rows(plan.moe_shape, *next.moe(), x, 1, ws.route);
  return ws.route.experts;
}

}  // namespace deltafin::model
