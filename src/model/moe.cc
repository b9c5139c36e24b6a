// MoE forward. Expert outputs land in one slot per (row, rank) whatever order the store delivers
// them in, and are summed by rank afterwards, so results never depend on I/O timing.
#include "model/moe.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "base/error.h"
#include "model/ops.h"

namespace deltafin::model {

Route route_rows(const MoeShape& shape, const MoeWeights& w, const float* x, int64_t n) {
  const int ne = shape.router.n_experts, k = shape.router.top_k;
  std::vector<float> logits(n * ne);
  kernels::matmul(w.router, x, n, logits.data());
  Route rt;
  rt.experts.resize(n * k);
  rt.weights.resize(n * k);
  for (int64_t r = 0; r < n; ++r)
    route(shape.router, logits.data() + r * ne, w.score_bias.data(), rt.experts.data() + r * k,
          rt.weights.data() + r * k);
  return rt;
}

void moe_forward(const MoeShape& shape, const MoeWeights& w, int layer, experts::ExpertStore& store,
                 const float* x, int64_t n, float* out) {
  const int k = shape.router.top_k;
  const int64_t width = shape.width;
  const Route rt = route_rows(shape, w, x, n);

  // Distinct experts in order of first use, each with the (row, rank) slots that chose it.
  std::vector<int32_t> distinct;
  std::vector<std::vector<int64_t>> slots;  // slot = row * k + rank
  std::unordered_map<int32_t, size_t> index;
  for (int64_t s = 0; s < n * k; ++s) {
    auto [it, fresh] = index.try_emplace(rt.experts[s], distinct.size());
    if (fresh) {
      distinct.push_back(rt.experts[s]);
      slots.emplace_back();
    }
    slots[it->second].push_back(s);
  }
  std::unique_ptr<experts::ExpertBatch> batch = store.request(layer, distinct);

  // The shared experts need no read: computing them while the routed experts' reads are in flight
  // keeps their time off the critical path when the disk is the bound. They are added last, as
  // before, so the sum's order (and every bit of the result) is unchanged.
  std::vector<float> shared;
  if (!w.shared.gate.empty()) {
    shared.resize(n * shape.hidden);
    glu_mlp(shape.act, w.shared, x, n, shared.data());
  }

  std::vector<float> z(n * width);
  if (!w.latent_down.empty()) {
    kernels::matmul(w.latent_down, x, n, z.data());
  } else {
    std::memcpy(z.data(), x, n * width * sizeof(float));
  }

  std::vector<float> contrib(n * k * width);
  std::vector<float> zin, g, u, y;
  for (size_t i = 0; i < distinct.size(); ++i) {
    const experts::ReadyExpert ready = batch->acquire_next();
    const std::vector<int64_t>& sl = slots[ready.index];
    const int64_t m = static_cast<int64_t>(sl.size());
    const int64_t inter = ready.weights.gate.rows;
    DF_ASSERT(ready.weights.gate.cols == width && ready.weights.down.rows == width);
    zin.resize(m * width);
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(zin.data() + j * width, z.data() + (sl[j] / k) * width, width * sizeof(float));
    g.resize(m * inter);
    u.resize(m * inter);
    y.resize(m * width);
    kernels::matmul(ready.weights.gate, zin.data(), m, g.data());
    kernels::matmul(ready.weights.up, zin.data(), m, u.data());
    glu(shape.act, g.data(), u.data(), m * inter, g.data());
    kernels::matmul(ready.weights.down, g.data(), m, y.data());
    batch->release(ready.index);
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(contrib.data() + sl[j] * width, y.data() + j * width, width * sizeof(float));
  }
  batch.reset();

  std::vector<float> sum(n * width, 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    float* sr = sum.data() + r * width;
    for (int rank = 0; rank < k; ++rank) {
      const float wgt = rt.weights[r * k + rank];
      const float* c = contrib.data() + (r * k + rank) * width;
      for (int64_t j = 0; j < width; ++j) sr[j] += wgt * c[j];
    }
  }
  if (!w.latent_up.empty()) {
    if (!w.latent_norm.empty())
      rmsnorm_rows(sum.data(), w.latent_norm.data(), n, width, shape.norm_eps, sum.data());
    kernels::matmul(w.latent_up, sum.data(), n, out);
  } else {
    std::memcpy(out, sum.data(), n * width * sizeof(float));
  }
  if (!shared.empty()) {
    for (int64_t i = 0; i < n * shape.hidden; ++i) out[i] += shared[i];
  }
}

}  // namespace deltafin::model
