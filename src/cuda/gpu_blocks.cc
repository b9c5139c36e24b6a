// The GPU model's layer blocks over device rows, each the CPU block's steps in its order
// (model/kda.cc, mla.cc, mlp.cc, moe.cc) with the decode numerics: recurrent KDA, absorbed MLA.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/expert_runs.h"
#include "cuda/gemv_mxfp4_tc.h"
#include "cuda/gpu_internal.h"
#include "cuda/norm.h"
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

void copy_d2d(float* dst, const float* src, int64_t count, cudaStream_t stream, const char* what) {
  count_copy();
  check_cuda(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream),
             what);
}

// y = x · Wᵀ for a weight of either format: an MXFP4 one on the tensor cores under
// --gpu-expert-math tensor (gemv_mxfp4_tc.h), else the exact kernels (mm).
void product(const PassContext& c, const DevMatrix& w, const float* x, int64_t n, float* y) {
  if (w.mxfp4 && c.limits.mxfp4_tensor_cores) return matmul_tc(w.mx, x, n, y, c.stream);
  mm(w, x, n, y, c.stream);
}

// matmul_grouped, or its tensor-core twin under --gpu-expert-math tensor.
void grouped(const PassContext& c, const DeviceMxfp4Task* tasks, int64_t count, int64_t rows,
             int64_t cols, int64_t max_n) {
  if (c.limits.mxfp4_tensor_cores)
    matmul_grouped_tc(tasks, count, rows, cols, max_n, c.stream);
  else
    matmul_grouped(tasks, count, rows, cols, max_n, c.stream);
}

// Every gate and up of `count` experts (tasks[2i], tasks[2i + 1], x into ws.glu_g / glu_u) in one
// grouped launch per run (expert_runs: the experts of one batch size), SiTU over their `rows`
// rows, every down (tasks[2·count + i], into ws.ey) in one more per run: the routed experts'
// products whichever side filled the table.
void grouped_glu(const PassContext& c, const DeviceMxfp4Task* tasks, int64_t count, int64_t inter,
                 int64_t rows, const std::vector<ExpertRun>& runs) {
  const GpuShape& sh = c.shape;
  const int64_t width = sh.moe_width;
  for (const ExpertRun& r : runs)
    grouped(c, tasks + 2 * r.begin, 2 * (r.end - r.begin), inter, width, r.max_rows);
  situ_glu(c.ws.glu_g, c.ws.glu_u, rows * inter, sh.situ_beta, sh.situ_linear_beta, c.ws.glu_g,
           c.stream);
  for (const ExpertRun& r : runs)
    grouped(c, tasks + 2 * count + r.begin, r.end - r.begin, width, inter, r.max_rows);
  if (runs.size() > 1) count_batch_splits(runs.size() - 1);
}

// Where grouped_products left its outputs: device tables over the pass's n·k (row, rank) slots.
struct GroupedRows {
  const int32_t* output_row;  // by slot: its output's row of ws.ey (slots of these experts)
  const int32_t* slot_of;     // by output row: its slot
  int64_t rows;               // output rows written, ws.ey[0, rows)
};

// The products of `experts`, (weights, i) each with the route's (row, rank) slots slots[i] that
// chose expert i, in 2R + 2 launches and one upload (R: the batch sizes among the experts' row
// counts, 1 in a decode pass), where one expert at a time takes four each and a copy per row: the
// slots' inputs gathered expert by expert, every gate and up in one grouped launch per batch size,
// SiTU over all of them, every down in one more per batch size. Each grouped product is
// bit-identical to its single launch (gemv.h), so each output row is what one expert at a time
// computes, in whatever order the experts run. The experts must be all MXFP4 of one shape
// (DevMoe::groupable).
GroupedRows grouped_products(const PassContext& c,
                             const std::vector<std::pair<const DevGlu*, size_t>>& experts,
                             const std::vector<std::vector<int32_t>>& slots, int64_t n) {
  GpuWorkspace& ws = c.ws;
  const GpuShape& sh = c.shape;
  const cudaStream_t s = c.stream;
  const int64_t k = sh.router.top_k, width = sh.moe_width, m_all = n * k;
  const int64_t count = static_cast<int64_t>(experts.size());
  const int64_t inter = experts.front().first->gate.mx.rows;
  // The table: tasks (gates and ups interleaved, then downs), then by row the gather's source
  // rows, by slot the output rows, by output row the slots.
  const uint64_t task_bytes = 3 * static_cast<uint64_t>(m_all) * sizeof(DeviceMxfp4Task);
  ws.host_moe_table.assign(moe_table_bytes(m_all), 0);
  auto* tasks = reinterpret_cast<DeviceMxfp4Task*>(ws.host_moe_table.data());
  auto* gather_from = reinterpret_cast<int32_t*>(ws.host_moe_table.data() + task_bytes);
  int32_t* output_row = gather_from + m_all;
  int32_t* slot_of = output_row + m_all;
  std::vector<int64_t> rows_of(count);
  for (int64_t i = 0; i < count; ++i)
    rows_of[i] = static_cast<int64_t>(slots[experts[i].second].size());
  std::vector<size_t> order;
  const std::vector<ExpertRun> runs = expert_runs(rows_of, order);
  int64_t p = 0;
  for (int64_t i = 0; i < count; ++i) {
    const DevGlu& e = *experts[order[i]].first;
    const std::vector<int32_t>& chose = slots[experts[order[i]].second];
    const int m = static_cast<int>(chose.size());
    float *xin = ws.zin + p * width, *g = ws.glu_g + p * inter, *u = ws.glu_u + p * inter;
    tasks[2 * i] = DeviceMxfp4Task{e.gate.mx.packed, e.gate.mx.scales, xin, g, m};
    tasks[2 * i + 1] = DeviceMxfp4Task{e.up.mx.packed, e.up.mx.scales, xin, u, m};
    tasks[2 * count + i] =
        DeviceMxfp4Task{e.down.mx.packed, e.down.mx.scales, g, ws.ey + p * width, m};
    for (int32_t sl : chose) {
      gather_from[p] = static_cast<int32_t>(sl / k);
      output_row[sl] = static_cast<int32_t>(p);
      slot_of[p] = sl;
      ++p;
    }
  }
  const auto* d_tasks = reinterpret_cast<const DeviceMxfp4Task*>(ws.moe_table);
  const auto* d_gather_from = reinterpret_cast<const int32_t*>(ws.moe_table + task_bytes);
  // From pageable memory: the call returns once the bytes are staged, so the table is free again.
  count_copy();
  check_cuda(cudaMemcpyAsync(ws.moe_table, ws.host_moe_table.data(), ws.host_moe_table.size(),
                             cudaMemcpyHostToDevice, s),
             "MoE table");
  gather_rows(ws.z, d_gather_from, p, width, ws.zin, s);
  grouped_glu(c, d_tasks, count, inter, p, runs);
  return {d_gather_from + m_all, d_gather_from + 2 * m_all, p};
}

}  // namespace

void kda_block(const PassContext& c, const DevKda& w, DevKdaState& st, const float* x, int64_t n,
               float* out, bool tentative, int64_t log_offset) {
  const GpuShape& sh = c.shape;
  GpuWorkspace& ws = c.ws;
  const cudaStream_t s = c.stream;
  const int64_t nh = sh.kda_heads, dim = sh.kda_dim, p = nh * dim;
  // The six projections of x in one launch (K3: 3 x 12288 + 128 + 96 + 12288 rows).
  mm_siblings({{&w.q_proj, ws.q_in},
               {&w.k_proj, ws.k_in},
               {&w.v_proj, ws.v_in},
               {&w.f_a, ws.low},
               {&w.b_proj, ws.beta},
               {&w.g_proj, ws.gate}},
              x, n, s);
  mm(w.f_b, ws.low, n, ws.g, s);
  if (tentative) {
    copy_d2d(st.q_in + log_offset * p, ws.q_in, n * p, s, "KDA log");
    copy_d2d(st.k_in + log_offset * p, ws.k_in, n * p, s, "KDA log");
    copy_d2d(st.v_in + log_offset * p, ws.v_in, n * p, s, "KDA log");
  }
  const int64_t kernel = sh.conv_kernel, hist = (kernel - 1) * p;
  short_conv_silu(ws.q_in, n, p, kernel, w.q_conv, st.conv, ws.q, s);
  short_conv_silu(ws.k_in, n, p, kernel, w.k_conv, st.conv + hist, ws.k, s);
  short_conv_silu(ws.v_in, n, p, kernel, w.v_conv, st.conv + 2 * hist, ws.v, s);
  l2norm_rows(ws.q, n * nh, dim, 1.0f / std::sqrt(static_cast<float>(dim)), s);
  l2norm_rows(ws.k, n * nh, dim, 1.0f, s);
  kda_gates(ws.g, ws.beta, n, nh, dim, w.a_log, w.dt_bias, sh.kda_lower_bound, s);
  if (tentative) {
    copy_d2d(st.q + log_offset * p, ws.q, n * p, s, "KDA log");
    copy_d2d(st.k + log_offset * p, ws.k, n * p, s, "KDA log");
    copy_d2d(st.v + log_offset * p, ws.v, n * p, s, "KDA log");
    copy_d2d(st.g + log_offset * p, ws.g, n * p, s, "KDA log");
    copy_d2d(st.beta + log_offset * nh, ws.beta, n * nh, s, "KDA log");
  }
  kda_decode(ws.q, ws.k, ws.v, ws.g, ws.beta, n, nh, dim, st.s, ws.o, s);
  // Per-head RMSNorm, then the sigmoid output gate (norm first, as FusedRMSNormGated does).
  rmsnorm_rows(ws.o, w.o_norm, n * nh, dim, sh.kda_norm_eps, ws.o, s);
  mul_sigmoid(ws.gate, n * p, ws.o, s);
  mm(w.o_proj, ws.o, n, out, s);
}

void kda_replay(const PassContext& c, const DevKda& w, DevKdaState& st, int64_t keep) {
  const GpuShape& sh = c.shape;
  const cudaStream_t s = c.stream;
  const int64_t nh = sh.kda_heads, dim = sh.kda_dim, p = nh * dim;
  const int64_t kernel = sh.conv_kernel, hist = (kernel - 1) * p;
  copy_d2d(st.s, st.s_saved, nh * dim * dim, s, "restore KDA state");
  copy_d2d(st.conv, st.conv_saved, 3 * hist, s, "restore KDA conv state");
  if (keep == 0) return;
  float* scratch = c.ws.replay;  // outputs the pass already gave
  kda_decode(st.q, st.k, st.v, st.g, st.beta, keep, nh, dim, st.s, scratch, s);
  short_conv_silu(st.q_in, keep, p, kernel, w.q_conv, st.conv, scratch, s);
  short_conv_silu(st.k_in, keep, p, kernel, w.k_conv, st.conv + hist, scratch, s);
  short_conv_silu(st.v_in, keep, p, kernel, w.v_conv, st.conv + 2 * hist, scratch, s);
}

void mla_block(const PassContext& c, const DevMla& w, DevMlaState& st, int64_t first,
               const float* x, int64_t n, float* out) {
  const GpuShape& sh = c.shape;
  GpuWorkspace& ws = c.ws;
  const cudaStream_t s = c.stream;
  const int64_t nh = sh.mla_heads, rank = sh.kv_rank, rope = sh.rope;
  mm_siblings({{&w.q_a, ws.qa}, {&w.kv_a, ws.ckv}, {&w.g_proj, ws.mgate}}, x, n, s);
  rmsnorm_rows(ws.qa, w.q_a_norm, n, sh.q_lora, sh.mla_latent_eps, ws.qa, s);
  mm(w.q_b, ws.qa, n, ws.mq, s);
  const int64_t ckv_w = rank + rope;
  // The new positions: the latent part normalized in place in the cache, k_pe copied beside it.
  float* latent = st.latent + first * rank;
  count_copy();
  check_cuda(cudaMemcpy2DAsync(latent, rank * sizeof(float), ws.ckv, ckv_w * sizeof(float),
                               rank * sizeof(float), n, cudaMemcpyDeviceToDevice, s),
             "MLA latent");
  rmsnorm_rows(latent, w.kv_a_norm, n, rank, sh.mla_latent_eps, latent, s);
  if (rope > 0) {
    count_copy();
    check_cuda(cudaMemcpy2DAsync(st.k_pe + first * rope, rope * sizeof(float), ws.ckv + rank,
                                 ckv_w * sizeof(float), rope * sizeof(float), n,
                                 cudaMemcpyDeviceToDevice, s),
               "MLA k_pe");
  }
  const MlaGpuShape ms{nh, rank, sh.nope, rope, sh.v_dim};
  mla_absorbed(ms, w.kv_b.bf16.data, st.latent, st.k_pe, first + n, ws.mq, n, ws.attend, ws.mo, s);
  if (!w.g_proj.empty()) mul_sigmoid(ws.mgate, n * nh * sh.v_dim, ws.mo, s);
  mm(w.o_proj, ws.mo, n, out, s);
}

void glu_block(const PassContext& c, const DevGlu& w, const float* x, int64_t n, float* out) {
  const int64_t inter = w.gate.rows();
  if (w.gate.mxfp4) {
    product(c, w.gate, x, n, c.ws.glu_g);
    product(c, w.up, x, n, c.ws.glu_u);
  } else {
    mm_siblings({{&w.gate, c.ws.glu_g}, {&w.up, c.ws.glu_u}}, x, n, c.stream);
  }
  situ_glu(c.ws.glu_g, c.ws.glu_u, n * inter, c.shape.situ_beta, c.shape.situ_linear_beta,
           c.ws.glu_g, c.stream);
  product(c, w.down, c.ws.glu_g, n, out);
}

namespace {

// A decode row of a model whose experts are all resident and groupable (the layer's table was
// placed with them): its k experts are distinct, so the products' table is set up on the device
// from the route and nothing waits for the host. The same grouped products (grouped_glu, one row
// each) and the combine in rank order as grouped_products and moe_combine_rows: the same bits.
// Leaves the sum in ws.sum.
void route_row_on_device(const PassContext& c, const DevMoe& w) {
  const GpuShape& sh = c.shape;
  GpuWorkspace& ws = c.ws;
  const int64_t k = sh.router.top_k, width = sh.moe_width;
  const int64_t inter = w.experts.front().gate.mx.rows;
  auto* tasks = reinterpret_cast<DeviceMxfp4Task*>(ws.moe_table);
  expert_tasks_one_row(w.expert_table, sh.router.n_experts, ws.route_e, k, ws.z, ws.glu_g, ws.glu_u,
                       inter, ws.ey, width, tasks, c.stream);
  grouped_glu(c, tasks, k, inter, k, {ExpertRun{0, k, 1}});
  moe_combine(ws.ey, ws.route_w, 1, k, width, ws.sum, c.stream);
  c.stats->expert_hits += k;
  c.stats->expert_hit_bytes += k * w.expert_bytes;
}

// The route brought back to the host (one wait), which then launches each distinct expert once
// for the rows that chose it: grouped when every expert is resident and groupable, else through
// the expert cache or one at a time. Leaves the sum in ws.sum and the route in ws.host_route.
void route_on_host(const PassContext& c, const DevMoe& w, int64_t layer, int64_t n) {
  const GpuShape& sh = c.shape;
  GpuWorkspace& ws = c.ws;
  const cudaStream_t s = c.stream;
  const int k = sh.router.top_k;
  const int64_t width = sh.moe_width;
  ws.host_route.resize(n * k);
  count_copy();
  check_cuda(cudaMemcpyAsync(ws.host_route.data(), ws.route_e, n * k * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, s),
             "route");
  count_sync();
  check_cuda(cudaStreamSynchronize(s), "route");
  // The distinct experts in order of first appearance, each with the (row, rank) slots that
  // chose it (an expert appears at most once per row).
  std::vector<int32_t> experts;
  std::vector<std::vector<int32_t>> slots;
  std::vector<bool> done(n * k, false);
  for (int64_t first = 0; first < n * k; ++first) {
    if (done[first]) continue;
    const int32_t e = ws.host_route[first];
    if (e < 0 || e >= sh.router.n_experts)
      throw std::runtime_error("CUDA backend: the router chose expert " + std::to_string(e) +
                               " of " + std::to_string(sh.router.n_experts));
    experts.push_back(e);
    slots.emplace_back();
    for (int64_t sl = first; sl < n * k; ++sl)
      if (ws.host_route[sl] == e) {
        slots.back().push_back(static_cast<int32_t>(sl));
        done[sl] = true;
      }
  }
  // Each expert's outputs land in its own (row, rank) slots, summed by rank afterwards, so the
  // order the experts run in (a cache's hits first) does not change a bit of the result.
  const auto run_expert = [&](const DevGlu& ew, size_t i) {
    const std::vector<int32_t>& rows = slots[i];
    const int64_t m = static_cast<int64_t>(rows.size());
    for (int64_t j = 0; j < m; ++j)
      copy_d2d(ws.zin + j * width, ws.z + (rows[j] / k) * width, width, s, "expert rows");
    const int64_t inter = ew.gate.rows();
    product(c, ew.gate, ws.zin, m, ws.glu_g);
    product(c, ew.up, ws.zin, m, ws.glu_u);
    situ_glu(ws.glu_g, ws.glu_u, m * inter, sh.situ_beta, sh.situ_linear_beta, ws.glu_g, s);
    product(c, ew.down, ws.glu_g, m, ws.ey);
    for (int64_t j = 0; j < m; ++j)
      copy_d2d(ws.contrib + static_cast<int64_t>(rows[j]) * width, ws.ey + j * width, width, s,
               "expert slots");
  };
  if (c.cache != nullptr) {
    // The cache's hits (in VRAM already) as grouped launches, their outputs moved to their slots;
    // each miss one expert at a time as its weights arrive.
    const auto run_hits = [&](const std::vector<std::pair<const DevGlu*, size_t>>& hits) {
      if (!w.groupable) {
        for (const auto& [view, i] : hits) run_expert(*view, i);
        return;
      }
      const GroupedRows out = grouped_products(c, hits, slots, n);
      scatter_rows(ws.ey, out.slot_of, out.rows, width, ws.contrib, s);
    };
    c.cache->run(layer, experts, s, run_expert, run_hits, c.stats);
    moe_combine(ws.contrib, ws.route_w, n, k, width, ws.sum, s);
  } else {
    if (w.experts.size() != static_cast<size_t>(sh.router.n_experts))
      throw std::logic_error("CUDA backend: layer " + std::to_string(layer) +
                             " has no resident experts and no cache");
    if (w.groupable) {
      // The whole route: the combine reads each slot's output where its expert left it.
      std::vector<std::pair<const DevGlu*, size_t>> route;
      for (size_t i = 0; i < experts.size(); ++i) route.emplace_back(&w.experts[experts[i]], i);
      const GroupedRows out = grouped_products(c, route, slots, n);
      moe_combine_rows(ws.ey, out.output_row, ws.route_w, n, k, width, ws.sum, s);
      c.stats->expert_hits += experts.size();
      c.stats->expert_hit_bytes += experts.size() * w.expert_bytes;
    } else {
      for (size_t i = 0; i < experts.size(); ++i) {
        const DevGlu& ew = w.experts[experts[i]];
        run_expert(ew, i);
        ++c.stats->expert_hits;
        c.stats->expert_hit_bytes += w.expert_bytes;
      }
      moe_combine(ws.contrib, ws.route_w, n, k, width, ws.sum, s);
    }
  }
}

}  // namespace

bool moe_block(const PassContext& c, const DevMoe& w, int64_t layer, const float* x, int64_t n,
               float* out) {
  const GpuShape& sh = c.shape;
  GpuWorkspace& ws = c.ws;
  const cudaStream_t s = c.stream;
  const int64_t width = sh.moe_width, d = sh.hidden;
  // The router and the latent projection read the same x: one launch (ws.z waits for the
  // experts). Without a latent projection the experts read x itself, copied below.
  mm_siblings({{&w.router, ws.router}, {&w.latent_down, ws.z}}, x, n, s);
  route(sh.router, ws.router, w.score_bias, n, ws.route_e, ws.route_w, s);
  // The shared experts and the experts' input do not wait for the route.
  const bool has_shared = !w.shared.gate.empty();
  if (has_shared) glu_block(c, w.shared, x, n, ws.shared);
  if (w.latent_down.empty()) copy_d2d(ws.z, x, n * width, s, "MoE input");
  const bool on_device = n == 1 && c.cache == nullptr && w.expert_table != nullptr;
  if (on_device) {
    route_row_on_device(c, w);
  } else {
    route_on_host(c, w, layer, n);
  }
  if (!w.latent_up.empty()) {
    if (w.latent_norm != nullptr)
      rmsnorm_rows(ws.sum, w.latent_norm, n, width, sh.moe_norm_eps, ws.sum, s);
    mm(w.latent_up, ws.sum, n, out, s);
  } else {
    copy_d2d(out, ws.sum, n * d, s, "MoE output");
  }
  if (has_shared) add(ws.shared, n * d, out, s);
  return !on_device;
}

}  // namespace deltafin::cuda
