// MoE forward. Expert outputs land in one slot per (row, rank) whatever order the store delivers
// them in, and are summed by rank afterwards, so results never depend on I/O timing.
#include "model/moe.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"

namespace deltafin::model {
namespace {

// Groups the route's n_slots (row, rank) slots by expert: ws.distinct, slot_begin and slots.
void group_slots(int n_experts, int64_t n_slots, MoeWorkspace& ws) {
  const int32_t* experts = ws.route.experts.data();
  if (static_cast<int>(ws.expert_index.size()) != n_experts) ws.expert_index.assign(n_experts, -1);
  ws.distinct.clear();
  ws.cursor.clear();  // per distinct expert: its slot count, then where its next slot goes
  for (int64_t s = 0; s < n_slots; ++s) {
    int32_t& index = ws.expert_index[experts[s]];
    if (index < 0) {
      index = static_cast<int32_t>(ws.distinct.size());
      ws.distinct.push_back(experts[s]);
      ws.cursor.push_back(0);
    }
    ++ws.cursor[index];
  }
  ws.slot_begin.resize(ws.distinct.size() + 1);
  ws.slot_begin[0] = 0;
  for (size_t i = 0; i < ws.distinct.size(); ++i) {
    ws.slot_begin[i + 1] = ws.slot_begin[i] + ws.cursor[i];
    ws.cursor[i] = ws.slot_begin[i];
  }
  ws.slots.resize(n_slots);
  for (int64_t s = 0; s < n_slots; ++s) ws.slots[ws.cursor[ws.expert_index[experts[s]]]++] = s;
  for (int32_t e : ws.distinct) ws.expert_index[e] = -1;
}

}  // namespace

void route_rows(const MoeShape& shape, const MoeWeights& w, const float* x, int64_t n, Route& rt) {
  const int ne = shape.router.n_experts, k = shape.router.top_k;
  rt.logits.resize(n * ne);
  kernels::matmul(w.router, x, n, rt.logits.data());
  rt.experts.resize(n * k);
  rt.weights.resize(n * k);
  for (int64_t r = 0; r < n; ++r)
    route(shape.router, rt.logits.data() + r * ne, w.score_bias.data(), rt.router,
          rt.experts.data() + r * k, rt.weights.data() + r * k);
}

void moe_forward(const MoeShape& shape, const MoeWeights& w, int layer, experts::ExpertStore& store,
                 const float* x, int64_t n, MoeWorkspace& ws, float* out) {
  const int k = shape.router.top_k;
  const int64_t width = shape.width;
  route_rows(shape, w, x, n, ws.route);
  group_slots(shape.router.n_experts, n * k, ws);
  std::unique_ptr<experts::ExpertBatch> batch = store.request(layer, ws.distinct);

  // The shared experts need no read: computing them while the routed experts' reads are in flight
  // keeps their time off the critical path when the disk is the bound. They are added last, as
  // before, so the sum's order (and every bit of the result) is unchanged.
  const bool has_shared = !w.shared.gate.empty();
  float* shared = has_shared ? ws.shared.get(n * shape.hidden) : nullptr;
  if (has_shared) glu_mlp(shape.act, w.shared, x, n, ws.shared_glu, shared);

  float* z = ws.z.get(n * width);
  if (!w.latent_down.empty()) {
    kernels::matmul(w.latent_down, x, n, z);
  } else {
    std::memcpy(z, x, n * width * sizeof(float));
  }

  float* contrib = ws.contrib.get(n * k * width);
  for (size_t i = 0; i < ws.distinct.size(); ++i) {
    const experts::ReadyExpert ready = batch->acquire_next();
    const int64_t* sl = ws.slots.data() + ws.slot_begin[ready.index];
    const int64_t m = ws.slot_begin[ready.index + 1] - ws.slot_begin[ready.index];
    const int64_t inter = ready.weights.gate.rows;
    DF_ASSERT(ready.weights.gate.cols == width && ready.weights.down.rows == width);
    float* zin = ws.zin.get(m * width);
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(zin + j * width, z + (sl[j] / k) * width, width * sizeof(float));
    float *g = ws.g.get(m * inter), *u = ws.u.get(m * inter), *y = ws.y.get(m * width);
    kernels::matmul(ready.weights.gate, zin, m, g);
    kernels::matmul(ready.weights.up, zin, m, u);
    glu(shape.act, g, u, m * inter, g);
    kernels::matmul(ready.weights.down, g, m, y);
    batch->release(ready.index);
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(contrib + sl[j] * width, y + j * width, width * sizeof(float));
  }
  batch.reset();

  float* sum = ws.sum.get(n * width);
  std::fill(sum, sum + n * width, 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    float* sr = sum + r * width;
    for (int rank = 0; rank < k; ++rank) {
      const float wgt = ws.route.weights[r * k + rank];
      const float* c = contrib + (r * k + rank) * width;
      for (int64_t j = 0; j < width; ++j) sr[j] += wgt * c[j];
    }
  }
  if (!w.latent_up.empty()) {
    if (!w.latent_norm.empty())
      kernels::rmsnorm_rows(sum, w.latent_norm.data(), n, width, shape.norm_eps, sum);
    kernels::matmul(w.latent_up, sum, n, out);
  } else {
    std::memcpy(out, sum, n * width * sizeof(float));
  }
  if (has_shared) kernels::add(shared, n * shape.hidden, out);
}

}  // namespace deltafin::model
