// Where the GPU model's bytes go: the weights (spine and experts), one pass's workspace and one
// sequence's state, laid out by one walk that either counts (the VRAM plan, no device needed) or
// allocates and uploads; and the shape checks the kernels need.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda/gpu_internal.h"

namespace deltafin::cuda {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}

void free_device(void* p) {
  if (p != nullptr) cudaFree(p);
}

void free_device_on(int device, void* p) {
  if (p != nullptr && cudaSetDevice(device) == cudaSuccess) cudaFree(p);
}

void mm(const DevMatrix& w, const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (w.mxfp4) {
    matmul(w.mx, x, n, y, stream);
  } else {
    matmul(w.bf16, x, n, y, stream);
  }
}

void mm_siblings(std::initializer_list<MmOut> outs, const float* x, int64_t n,
                 cudaStream_t stream) {
  DeviceBf16Out group[kMaxBf16Siblings];
  int count = 0;
  bool together = true;
  for (const MmOut& o : outs) {
    if (o.w->empty()) continue;
    together = together && !o.w->mxfp4 && count < kMaxBf16Siblings &&
               (count == 0 || o.w->bf16.cols == group[0].w.cols);
    if (together) group[count] = {o.w->bf16, o.y};
    ++count;
  }
  if (together && count > 1) return matmul_siblings(group, count, x, n, stream);
  for (const MmOut& o : outs)
    if (!o.w->empty()) mm(*o.w, x, n, o.y, stream);
}

namespace {

constexpr int64_t kRows = kGpuMaxBatch;

uint64_t matrix_bytes(const HostMatrix& m) {
  return m.dtype == HostMatrix::DType::kBf16 ? static_cast<uint64_t>(m.rows * m.cols) * 2
                                             : static_cast<uint64_t>(m.rows * m.cols) / 2;
}

// Counts, or takes and fills, `count` values of host memory (the arena's fill says how).
template <typename T>
T* put(Arena& arena, const void* host, uint64_t count) {
  T* dev = arena.take<T>(count);
  if (dev != nullptr && count > 0) {
    if (arena.fill == Arena::Fill::kDevice) {
      check_cuda(cudaMemcpy(dev, host, count * sizeof(T), cudaMemcpyHostToDevice), "upload");
    } else if (arena.fill == Arena::Fill::kHost && arena.pieces != nullptr) {
      arena.pieces->push_back(
          {static_cast<const uint8_t*>(host), reinterpret_cast<uint8_t*>(dev), count * sizeof(T)});
    } else if (arena.fill == Arena::Fill::kHost) {
      std::memcpy(dev, host, count * sizeof(T));
    }
  }
  return dev;
}

DevMatrix put_matrix(Arena& arena, const HostMatrix& m) {
  DevMatrix d;
  if (m.empty()) return d;
  auto* data = put<uint8_t>(arena, m.data, matrix_bytes(m));
  if (m.dtype == HostMatrix::DType::kMxfp4) {
    d.mxfp4 = true;
    const uint64_t code_bytes = static_cast<uint64_t>(m.rows) * m.cols / 2;
    if (data != nullptr && arena.fill == Arena::Fill::kDevice) {
      permute_mxfp4_codes(data, code_bytes, true);
      check_cuda(cudaStreamSynchronize(nullptr), "moving MXFP4 codes into the device layout");
    } else if (data != nullptr && arena.fill == Arena::Fill::kNone && arena.codes != nullptr) {
      arena.codes->push_back({data, code_bytes});
    }
    const auto* scales = put<uint8_t>(arena, m.scales, static_cast<uint64_t>(m.rows * m.cols / 32));
    d.mx = {data, scales, m.rows, m.cols};
  } else {
    d.bf16 = {reinterpret_cast<const uint16_t*>(data), m.rows, m.cols};
  }
  return d;
}

float* put_floats(Arena& arena, const float* host, int64_t count) {
  return host == nullptr ? nullptr : put<float>(arena, host, static_cast<uint64_t>(count));
}

DevGlu put_glu(Arena& arena, const GpuGlu& g) {
  return {put_matrix(arena, g.gate), put_matrix(arena, g.up), put_matrix(arena, g.down)};
}

}  // namespace

void place_globals(const GpuModelDesc& desc, Arena& g, GpuWeights* out) {
  const int64_t d = desc.shape.hidden;
  out->embed = put_matrix(g, desc.embed);
  out->lm_head = put_matrix(g, desc.lm_head);
  out->final_norm = put_floats(g, desc.final_norm, d);
  out->output_res = put_floats(g, desc.output_res, d);
}

DevLayer place_layer(const GpuModelDesc& desc, int64_t index, Arena& a, Arena& g) {
  const GpuShape& sh = desc.shape;
  const int64_t d = sh.hidden, p = sh.kda_heads * sh.kda_dim;
  const GpuLayer& l = desc.layers[index];
  DevLayer dl;
  dl.kda = l.kda;
  dl.moe = l.moe;
  for (int64_t i = 0; i < index; ++i) dl.state_index += desc.layers[i].kda == l.kda ? 1 : 0;
  dl.input_norm = put_floats(a, l.input_norm, d);
  dl.post_norm = put_floats(a, l.post_norm, d);
  dl.attn_res = put_floats(a, l.attn_res, d);
  dl.mlp_res = put_floats(a, l.mlp_res, d);
  if (l.kda) {
    const GpuKdaLayer& k = l.kda_w;
    DevKda& dk = dl.kda_w;
    dk.q_proj = put_matrix(a, k.q_proj);
    dk.k_proj = put_matrix(a, k.k_proj);
    dk.v_proj = put_matrix(a, k.v_proj);
    dk.f_a = put_matrix(a, k.f_a);
    dk.f_b = put_matrix(a, k.f_b);
    dk.b_proj = put_matrix(a, k.b_proj);
    dk.g_proj = put_matrix(a, k.g_proj);
    dk.o_proj = put_matrix(a, k.o_proj);
    dk.q_conv = put_floats(g, k.q_conv, p * sh.conv_kernel);
    dk.k_conv = put_floats(g, k.k_conv, p * sh.conv_kernel);
    dk.v_conv = put_floats(g, k.v_conv, p * sh.conv_kernel);
    dk.a_log = put_floats(a, k.a_log, sh.kda_heads);
    dk.dt_bias = put_floats(a, k.dt_bias, p);
    dk.o_norm = put_floats(a, k.o_norm, sh.kda_dim);
  } else {
    const GpuMlaLayer& m = l.mla_w;
    DevMla& dm = dl.mla_w;
    dm.q_a = put_matrix(a, m.q_a);
    dm.q_b = put_matrix(a, m.q_b);
    dm.kv_a = put_matrix(a, m.kv_a);
    dm.kv_b = put_matrix(a, m.kv_b);
    dm.g_proj = put_matrix(a, m.g_proj);
    dm.o_proj = put_matrix(a, m.o_proj);
    dm.q_a_norm = put_floats(a, m.q_a_norm, sh.q_lora);
    dm.kv_a_norm = put_floats(a, m.kv_a_norm, sh.kv_rank);
  }
  if (l.moe) {
    const GpuMoeLayer& m = l.moe_w;
    DevMoe& dm = dl.moe_w;
    dm.router = put_matrix(a, m.router);
    dm.score_bias = put_floats(a, m.score_bias, sh.router.n_experts);
    dm.latent_down = put_matrix(a, m.latent_down);
    dm.latent_norm = put_floats(a, m.latent_norm, sh.moe_width);
    dm.latent_up = put_matrix(a, m.latent_up);
    dm.shared = put_glu(a, m.shared);
    dm.groupable = experts_groupable(m.experts);
  } else {
    dl.dense = put_glu(a, l.dense);
  }
  return dl;
}

DevGlu place_expert(Arena& a, const GpuGlu& e) { return put_glu(a, e); }

bool experts_groupable(const std::vector<GpuGlu>& experts) {
  if (experts.empty()) return false;
  const GpuGlu& a = experts.front();
  const auto same = [](const HostMatrix& x, const HostMatrix& y) {
    return x.dtype == HostMatrix::DType::kMxfp4 && y.dtype == HostMatrix::DType::kMxfp4 &&
           x.rows == y.rows && x.cols == y.cols;
  };
  for (const GpuGlu& b : experts)
    if (!same(a.gate, b.gate) || !same(a.up, b.up) || !same(a.down, b.down)) return false;
  return a.up.rows == a.gate.rows && a.down.cols == a.gate.rows && a.down.rows == a.gate.cols;
}

uint64_t expert_table_bytes(int64_t count) {
  Arena a;
  a.take<DeviceMxfp4Task>(3 * static_cast<uint64_t>(count));
  return a.used;
}

void place_weights(const GpuModelDesc& desc, Arena& spine, Arena& experts, GpuWeights* out) {
  place_globals(desc, spine, out);
  out->layers.clear();
  out->layer_bytes.clear();
  for (int64_t l = 0; l < static_cast<int64_t>(desc.layers.size()); ++l) {
    Arena layer, conv;  // count the layer's own bytes as the tiers do (conv weights are globals)
    place_layer(desc, l, layer, conv);
    out->layer_bytes.push_back(layer.used);
    DevLayer dl = place_layer(desc, l, spine, spine);
    if (desc.layers[l].moe) {
      const std::vector<GpuGlu>& host = desc.layers[l].moe_w.experts;
      for (const GpuGlu& e : host) {
        const uint64_t before = experts.used;
        dl.moe_w.experts.push_back(place_expert(experts, e));
        dl.moe_w.expert_bytes = experts.used - before;
      }
      if (dl.moe_w.groupable) {  // place_layer decided it from the same experts
        std::vector<DeviceMxfp4Task> table;
        for (const DevGlu& e : dl.moe_w.experts)
          for (const DevMatrix* m : {&e.gate, &e.up, &e.down})
            table.push_back(DeviceMxfp4Task{m->mx.packed, m->mx.scales, nullptr, nullptr, 0});
        dl.moe_w.expert_table = put<DeviceMxfp4Task>(experts, table.data(), table.size());
      }
    }
    out->layers.push_back(std::move(dl));
  }
}

WorkspaceDims workspace_dims(const GpuModelDesc& desc) {
  WorkspaceDims dims;
  int64_t inter = 0;
  for (const GpuLayer& l : desc.layers) {
    if (!l.moe) inter = std::max(inter, l.dense.gate.rows);
    if (l.moe) {
      inter = std::max(inter, l.moe_w.shared.gate.rows);
      for (const GpuGlu& e : l.moe_w.experts) inter = std::max(inter, e.gate.rows);
    }
  }
  dims.glu_inter = inter;
  const int64_t bs = desc.shape.attn_res_block;
  const int64_t n_layers = static_cast<int64_t>(desc.layers.size());
  dims.max_blocks = bs > 0 ? (n_layers + bs - 1) / bs : 0;
  return dims;
}

uint64_t moe_table_bytes(int64_t slots) {
  return static_cast<uint64_t>(slots) * (3 * sizeof(DeviceMxfp4Task) + 3 * sizeof(int32_t));
}

void place_workspace(const GpuModelDesc& desc, const GpuLimits& limits, Arena& a,
                     GpuWorkspace* ws) {
  const GpuShape& sh = desc.shape;
  const WorkspaceDims dims = workspace_dims(desc);
  const int64_t d = sh.hidden, p = sh.kda_heads * sh.kda_dim, r = kRows;
  bool any_kda = false, any_mla = false, any_moe = false;
  for (const GpuLayer& l : desc.layers) {
    any_kda |= l.kda;
    any_mla |= !l.kda;
    any_moe |= l.moe;
  }
  ws->ids = a.take<int32_t>(r);
  ws->partial = a.take<float>(r * d);
  ws->blocks = a.take<float>(std::max<int64_t>(dims.max_blocks, 1) * r * d);
  ws->x = a.take<float>(r * d);
  ws->y = a.take<float>(r * d);
  ws->res = a.take<float>(attn_res_scratch_floats(r, d));
  if (any_kda) {
    for (float** b :
         {&ws->q_in, &ws->k_in, &ws->v_in, &ws->q, &ws->k, &ws->v, &ws->g, &ws->gate, &ws->o})
      *b = a.take<float>(r * p);
    ws->beta = a.take<float>(r * sh.kda_heads);
    ws->low = a.take<float>(r * sh.kda_dim);
    if (limits.max_tentative_rows > 0) ws->replay = a.take<float>(limits.max_tentative_rows * p);
  }
  if (any_mla) {
    const int64_t heads_v = sh.mla_heads * sh.v_dim;
    ws->mq = a.take<float>(r * sh.mla_heads * (sh.nope + sh.rope));
    ws->qa = a.take<float>(r * sh.q_lora);
    ws->ckv = a.take<float>(r * (sh.kv_rank + sh.rope));
    ws->mo = a.take<float>(r * heads_v);
    ws->mgate = a.take<float>(r * heads_v);
    const MlaGpuShape ms{sh.mla_heads, sh.kv_rank, sh.nope, sh.rope, sh.v_dim};
    ws->attend = a.take<float>(
        mla_absorbed_gpu_scratch_floats(ms, r, std::max<int64_t>(limits.max_positions, r)));
  }
  // The grouped MoE computes all of a pass's (row, rank) slots at once, r·top_k rows.
  const int64_t glu_rows = any_moe ? r * sh.router.top_k : r;
  ws->glu_g = a.take<float>(glu_rows * dims.glu_inter);
  ws->glu_u = a.take<float>(glu_rows * dims.glu_inter);
  if (any_moe) {
    const int64_t k = sh.router.top_k, width = sh.moe_width;
    ws->router = a.take<float>(r * sh.router.n_experts);
    ws->route_e = a.take<int32_t>(r * k);
    ws->route_w = a.take<float>(r * k);
    ws->z = a.take<float>(r * width);
    ws->zin = a.take<float>(r * k * width);
    ws->contrib = a.take<float>(r * k * width);
    ws->ey = a.take<float>(r * k * width);
    ws->moe_table = a.take<uint8_t>(moe_table_bytes(r * k));
    ws->sum = a.take<float>(r * width);
    ws->shared = a.take<float>(r * d);
  }
  ws->logits = a.take<float>(r * sh.vocab);
}

void place_sequence(const GpuShape& sh, const std::vector<DevLayer>& layers,
                    const GpuLimits& limits, Arena& a, GpuSequenceState* st) {
  const int64_t p = sh.kda_heads * sh.kda_dim, t = limits.max_tentative_rows;
  const int64_t state = sh.kda_heads * sh.kda_dim * sh.kda_dim;
  const int64_t conv = 3 * (sh.conv_kernel - 1) * p;
  st->kda.clear();
  st->mla.clear();
  for (const DevLayer& l : layers) {
    if (l.kda) {
      DevKdaState k;
      k.s = a.take<float>(state);
      k.conv = a.take<float>(conv);
      if (t > 0) {
        k.s_saved = a.take<float>(state);
        k.conv_saved = a.take<float>(conv);
        for (float** b : {&k.q_in, &k.k_in, &k.v_in, &k.q, &k.k, &k.v, &k.g})
          *b = a.take<float>(t * p);
        k.beta = a.take<float>(t * sh.kda_heads);
      }
      st->kda.push_back(k);
    } else {
      DevMlaState m;
      m.latent = a.take<float>(limits.max_positions * sh.kv_rank);
      m.k_pe = a.take<float>(limits.max_positions * sh.rope);
      st->mla.push_back(m);
    }
  }
}

VramPlan plan_vram(const GpuModelDesc& desc, const GpuLimits& limits) {
  Arena spine, experts, work, seq;
  GpuWeights w;
  place_weights(desc, spine, experts, &w);
  GpuWorkspace ws;
  place_workspace(desc, limits, work, &ws);
  GpuSequenceState st;
  place_sequence(desc.shape, w.layers, limits, seq, &st);
  return {spine.used, experts.used, work.used, seq.used};
}

namespace {

[[noreturn]] void refuse(const std::string& field, int64_t value, const std::string& expected) {
  throw std::invalid_argument("CUDA backend: " + field + " is " + std::to_string(value) +
                              ", the GPU kernels take " + expected);
}

}  // namespace

void check_gpu_shapes(const GpuModelDesc& desc) {
  const GpuShape& sh = desc.shape;
  bool any_kda = false, any_mla = false;
  for (const GpuLayer& l : desc.layers) {
    any_kda |= l.kda;
    any_mla |= !l.kda;
  }
  if (sh.hidden % 8 != 0) refuse("hidden_size", sh.hidden, "a multiple of 8");
  if (any_kda) {
    if (sh.kda_dim % 16 != 0 || sh.kda_dim > 128)
      refuse("linear_attn_config.head_dim", sh.kda_dim, "a multiple of 16 up to 128");
    if (sh.conv_kernel < 1 || sh.conv_kernel > 8)
      refuse("linear_attn_config.short_conv_kernel_size", sh.conv_kernel, "1..8");
  }
  if (any_mla) {
    if (sh.kv_rank % 8 != 0 || sh.kv_rank > 512)
      refuse("kv_lora_rank", sh.kv_rank, "a multiple of 8 up to 512");
    if (sh.rope % 2 != 0 || sh.rope > 64)
      refuse("qk_rope_head_dim", sh.rope, "an even number up to 64");
    if (sh.v_dim % 8 != 0) refuse("v_head_dim", sh.v_dim, "a multiple of 8");
    if (sh.q_lora % 8 != 0) refuse("q_lora_rank", sh.q_lora, "a multiple of 8");
  }
  if (sh.router.n_experts > 1024) refuse("num_experts", sh.router.n_experts, "at most 1024");
  if (sh.attn_res_block > 0 &&
      (static_cast<int64_t>(desc.layers.size()) + sh.attn_res_block - 1) / sh.attn_res_block > 63)
    refuse("attn_res_block_size", sh.attn_res_block, "at most 63 blocks over the layers");
}

}  // namespace deltafin::cuda
