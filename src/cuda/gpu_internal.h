// The GPU model's device-side structures (gpu_model.h keeps them opaque): a bump allocator that
// also counts (so the VRAM plan is computed on the CPU by the same code that allocates), device
// views of the weights, one pass's workspace, one sequence's state, and the layer blocks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/gpu_meter.h"
#include "cuda/gpu_model.h"

namespace deltafin::cuda {

// Throws std::runtime_error naming `what` and the CUDA error.
void check_cuda(cudaError_t err, const char* what);

// Carves 256-byte aligned pieces out of one device allocation; with a null base it only counts,
// and every piece is null.
struct Arena {
  uint8_t* base = nullptr;
  uint64_t used = 0;
  template <typename T>
  T* take(uint64_t count) {
    const uint64_t off = used;
    used += (count * sizeof(T) + 255) / 256 * 256;
    return base == nullptr ? nullptr : reinterpret_cast<T*>(base + off);
  }
};

// A weight matrix on the device, in one of the two formats cuda::matmul takes.
struct DevMatrix {
  bool mxfp4 = false;
  DeviceBf16 bf16{};
  DeviceMxfp4 mx{};
  bool empty() const { return bf16.data == nullptr && mx.packed == nullptr; }
  int64_t rows() const { return mxfp4 ? mx.rows : bf16.rows; }
};
// y[n, rows] = x[n, cols] · Wᵀ on `stream`.
void mm(const DevMatrix& w, const float* x, int64_t n, float* y, cudaStream_t stream);

struct DevGlu {
  DevMatrix gate, up, down;
};
struct DevKda {
  DevMatrix q_proj, k_proj, v_proj, f_a, f_b, b_proj, g_proj, o_proj;
  float *q_conv = nullptr, *k_conv = nullptr, *v_conv = nullptr, *a_log = nullptr,
        *dt_bias = nullptr, *o_norm = nullptr;
};
struct DevMla {
  DevMatrix q_a, q_b, kv_a, kv_b, g_proj, o_proj;
  float *q_a_norm = nullptr, *kv_a_norm = nullptr;
};
struct DevMoe {
  DevMatrix router, latent_down, latent_up;
  float *score_bias = nullptr, *latent_norm = nullptr;
  DevGlu shared;
  std::vector<DevGlu> experts;
};
struct DevLayer {
  bool kda = true, moe = true;
  int64_t state_index = 0;  // among the layers of its attention kind
  float *input_norm = nullptr, *post_norm = nullptr, *attn_res = nullptr, *mlp_res = nullptr;
  DevKda kda_w;
  DevMla mla_w;
  DevGlu dense;
  DevMoe moe_w;
};

// Frees a device allocation (null: nothing, so counting walks never touch the runtime).
void free_device(void* p);

struct GpuWeights {
  ~GpuWeights() {
    free_device(spine_base);
    free_device(expert_base);
  }
  void* spine_base = nullptr;  // owned allocations
  void* expert_base = nullptr;
  DevMatrix embed, lm_head;
  float *final_norm = nullptr, *output_res = nullptr;
  std::vector<DevLayer> layers;
  int64_t n_kda = 0, n_mla = 0;
};

// Counts (null bases) or uploads (real bases, synchronous copies) every weight of desc; the
// spine into `spine`, the routed experts into `experts`.
void place_weights(const GpuModelDesc& desc, Arena& spine, Arena& experts, GpuWeights* out);

// The largest intermediate widths over the model's layers.
struct WorkspaceDims {
  int64_t glu_inter = 0;   // dense MLP, shared experts and routed experts
  int64_t max_blocks = 0;  // AttnRes blocks a pass stores
};
WorkspaceDims workspace_dims(const GpuModelDesc& desc);

// One pass's intermediates, [kGpuMaxBatch rows, ...] each.
struct GpuWorkspace {
  ~GpuWorkspace() { free_device(base); }
  void* base = nullptr;  // owned
  int32_t* ids = nullptr;
  float *partial = nullptr, *blocks = nullptr, *x = nullptr, *y = nullptr, *res = nullptr;
  // KDA
  float *q_in = nullptr, *k_in = nullptr, *v_in = nullptr, *q = nullptr, *k = nullptr, *v = nullptr,
        *g = nullptr, *gate = nullptr, *o = nullptr, *beta = nullptr, *low = nullptr,
        *replay = nullptr;  // replay: [max_tentative_rows, P], for commit
  // MLA
  float *mq = nullptr, *qa = nullptr, *ckv = nullptr, *mo = nullptr, *mgate = nullptr,
        *attend = nullptr;
  // MLP / MoE
  float *glu_g = nullptr, *glu_u = nullptr, *router = nullptr, *route_w = nullptr, *z = nullptr,
        *zin = nullptr, *contrib = nullptr, *ey = nullptr, *sum = nullptr, *shared = nullptr;
  int32_t* route_e = nullptr;
  float* logits = nullptr;
  // The residual stream's bookkeeping (model/attn_res.h) for the pass in flight.
  int64_t n = 0, n_blocks = 0;
  bool restart = false;
  std::vector<int32_t> host_route;  // one MoE layer's route, copied back to group its rows
  PassMeter meter;                  // what the passes did (gpu_counters.h)
};
void place_workspace(const GpuModelDesc& desc, const GpuLimits& limits, Arena& arena,
                     GpuWorkspace* ws);

struct DevKdaState {
  float *s = nullptr, *conv = nullptr;              // the state
  float *s_saved = nullptr, *conv_saved = nullptr;  // before a verify pass
  float *q_in = nullptr, *k_in = nullptr, *v_in = nullptr, *q = nullptr, *k = nullptr, *v = nullptr,
        *g = nullptr, *beta = nullptr;  // a verify pass's rows
};
struct DevMlaState {
  float *latent = nullptr, *k_pe = nullptr;  // [max_positions, rank], [max_positions, rope]
};
struct GpuSequenceState {
  ~GpuSequenceState() { free_device(base); }
  void* base = nullptr;  // owned
  std::vector<DevKdaState> kda;
  std::vector<DevMlaState> mla;
};
// layers: the placed weights' (their kinds decide the state).
void place_sequence(const GpuShape& shape, const std::vector<DevLayer>& layers,
                    const GpuLimits& limits, Arena& arena, GpuSequenceState* st);

// What a block needs besides its weights.
struct PassContext {
  const GpuShape& shape;
  const GpuLimits& limits;
  GpuWorkspace& ws;
  cudaStream_t stream;
};

// out[n, hidden] = the block over x[n, hidden] (device rows), as model/kda.cc, mla.cc, mlp.cc and
// moe.cc compute it with the decode numerics. kda: tentative logs the rows at log_offset.
void kda_block(const PassContext& c, const DevKda& w, DevKdaState& st, const float* x, int64_t n,
               float* out, bool tentative, int64_t log_offset);
// first: positions already cached; the n rows are appended at [first, first + n).
void mla_block(const PassContext& c, const DevMla& w, DevMlaState& st, int64_t first,
               const float* x, int64_t n, float* out);
void glu_block(const PassContext& c, const DevGlu& w, const float* x, int64_t n, float* out);
void moe_block(const PassContext& c, const DevMoe& w, const float* x, int64_t n, float* out);
// Replays the first `keep` logged rows of a verify pass from the saved state (kda_commit).
void kda_replay(const PassContext& c, const DevKda& w, DevKdaState& st, int64_t keep);

}  // namespace deltafin::cuda
