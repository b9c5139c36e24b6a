// Row-wise RMSNorm for the blocks, on the shared kernel.
#include "model/ops.h"

#include "kernels/activation.h"

namespace deltafin::model {

void rmsnorm_rows(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y) {
  for (int64_t r = 0; r < n; ++r) kernels::rmsnorm(x + r * d, w, d, eps, y + r * d);
}

}  // namespace deltafin::model
