// Gated MLPs: the dense MLP, the shared experts and each routed expert are down(act(gate x, up x)),
// with SiTU (K3) or SiLU (Kimi-Linear) as the gate activation.
#pragma once

#include <cstdint>

#include "kernels/weight_matrix.h"
#include "model/scratch.h"

namespace deltafin::model {

using kernels::WeightMatrix;

struct Activation {
  enum class Kind { kSiLU, kSiTU } kind = Kind::kSiLU;
  float beta = 0.0f;         // SiTU gate beta (activation_situ_beta)
  float linear_beta = 0.0f;  // SiTU up beta (activation_situ_linear_beta)
};

// y[i] = act(g[i], u[i]): SiLU(g)·u, or SiTU: β·tanh(g/β)·σ(g) · βl·tanh(u/βl).
void glu(const Activation& act, const float* g, const float* u, int64_t n, float* y);

struct GluWeights {
  WeightMatrix gate;  // [intermediate, in]
  WeightMatrix up;    // [intermediate, in]
  WeightMatrix down;  // [in, intermediate]
};

// The gate and up products of a pass, reused from pass to pass (see scratch.h).
struct GluWorkspace {
  Scratch<float> g, u;  // [n, intermediate]
};

// out[n, in] = down(act(gate x, up x)) for n rows.
void glu_mlp(const Activation& act, const GluWeights& w, const float* x, int64_t n,
             GluWorkspace& ws, float* out);

}  // namespace deltafin::model
