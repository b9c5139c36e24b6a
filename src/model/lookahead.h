// Next-layer router lookahead: a guess at an MoE layer's route, made from the hidden state that
// enters the layer before it, so that the guessed experts' reads can start while that layer's
// attention still computes. A guess only starts reads; the route the layer really takes decides.
#pragma once

#include <cstdint>
#include <span>

#include "model/attn_res.h"
#include "model/plan.h"

namespace deltafin::model {

// The guess's intermediates, reused from guess to guess.
struct LookaheadWorkspace {
  Scratch<float> x;  // [hidden]
  Route route;
};

// Routes the stream's row `row` as layer `next` would if its MLP input were the current state: the
// mix before its MLP (K3), its post-attention norm, its router. `next` must be an MoE layer of
// `plan`. Returns top_k expert ids in rank order (valid until the next guess on `ws`).
std::span<const int32_t> predict_route(const ModelPlan& plan, const LayerPlan& next,
                                       const ResidualStream& stream, int64_t row,
                                       LookaheadWorkspace& ws);

}  // namespace deltafin::model
