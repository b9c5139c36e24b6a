// Gated MLP: two projections, the activation in fp32, one projection back.
#include "model/mlp.h"

#include "kernels/activation.h"

namespace deltafin::model {

void glu(const Activation& act, const float* g, const float* u, int64_t n, float* y) {
  if (act.kind == Activation::Kind::kSiLU) {
    kernels::silu_glu(g, u, n, y);
  } else {
    kernels::situ_glu(g, u, n, act.beta, act.linear_beta, y);
  }
}

void glu_mlp(const Activation& act, const GluWeights& w, const float* x, int64_t n,
             GluWorkspace& ws, float* out) {
  const int64_t inter = w.gate.rows;
  float *g = ws.g.get(n * inter), *u = ws.u.get(n * inter);
  kernels::matmul(w.gate, x, n, g);
  kernels::matmul(w.up, x, n, u);
  glu(act, g, u, n * inter, g);
  kernels::matmul(w.down, g, n, out);
}

}  // namespace deltafin::model
