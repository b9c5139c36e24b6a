// The GPU model's device-side structures (gpu_model.h keeps them opaque): a bump allocator that
// also counts (so the VRAM plan is computed on the CPU by the same code that allocates), device
// views of the weights, the tiers' copy machinery (streamed spine, expert cache), one pass's
// workspace, one sequence's state, and the layer blocks.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda/gpu_meter.h"
#include "cuda/gpu_model.h"
#include "cuda/gpu_tiers.h"
#include "cuda/mxfp4_layout.h"

namespace deltafin::cuda {

// Throws std::runtime_error naming `what` and the CUDA error.
void check_cuda(cudaError_t err, const char* what);

// Carves 256-byte aligned pieces out of one allocation; with a null base it only counts, and every
// piece is null. `fill` says what placing a weight does with its bytes: upload them (device
// memory), copy them (pinned host memory, a streamed layer's image) or nothing (views of a
// buffer that copies fill later: the spine staging, the expert slots).
struct Arena {
  enum class Fill { kDevice, kHost, kNone };
  uint8_t* base = nullptr;
  uint64_t used = 0;
  Fill fill = Fill::kDevice;
  // kHost with a list: the copies are recorded here instead of made (parallel_copy makes them).
  std::vector<CopyPiece>* pieces = nullptr;
  // kNone: where the views' MXFP4 codes lie. Host memory holds the published layout, so whoever
  // copies a matrix into the views moves these spans into the kernels' layout after the copy
  // (mxfp4_layout.h); kDevice moves its uploads itself.
  std::vector<CodeSpan>* codes = nullptr;
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
// The products of one x by several matrices (empty ones skipped): one launch when they are all
// BF16 of the same cols (matmul_siblings, the same bits as one mm each), else one mm each.
struct MmOut {
  const DevMatrix* w;
  float* y;
};
void mm_siblings(std::initializer_list<MmOut> outs, const float* x, int64_t n, cudaStream_t stream);

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
  std::vector<DevGlu> experts;  // by id when every expert is resident, else empty (the cache)
  uint64_t expert_bytes = 0;    // one resident expert's VRAM bytes
  // The routed experts are all MXFP4 of one shape (experts_groupable), resident or cached: a
  // route's experts (or a cache's hits) run as grouped launches.
  bool groupable = false;
  // With the experts resident and all MXFP4 of one shape: n_experts × {gate, up, down} tasks (x,
  // y, n unset) in VRAM, from which a decode row's products are set up on the device.
  const DeviceMxfp4Task* expert_table = nullptr;
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
// The same with `device` made current first: for what a thread other than the model's may free
// (a session destroyed elsewhere would otherwise create a context on device 0).
void free_device_on(int device, void* p);

struct GpuWeights {
  ~GpuWeights() {
    free_device(spine_base);
    free_device(expert_base);
  }
  void* spine_base = nullptr;  // owned allocations
  void* expert_base = nullptr;
  DevMatrix embed, lm_head;
  float *final_norm = nullptr, *output_res = nullptr;
  // Every layer; a streamed one's matrices view staging buffer 0 (SpineStream has both views).
  std::vector<DevLayer> layers;
  std::vector<uint64_t> layer_bytes;  // each layer's spine in VRAM
};

// Counts (null bases) or places the globals: embedding, lm_head, final norm, output AttnRes key.
void place_globals(const GpuModelDesc& desc, Arena& g, GpuWeights* out);
// Layer l's spine (everything but its routed experts) into `a`; its KDA conv weights, which a
// commit replays outside a pass, into `g` with the globals. Routed experts are not placed.
DevLayer place_layer(const GpuModelDesc& desc, int64_t l, Arena& a, Arena& g);
// One routed expert (gate, up, down) in its slot layout.
DevGlu place_expert(Arena& a, const GpuGlu& e);
// Whether a layer's routed experts are all MXFP4 of one shape: what grouped launches and the
// device-side expert table (DevMoe::expert_table) take.
bool experts_groupable(const std::vector<GpuGlu>& experts);

// Counts (null bases) or uploads every weight of desc: the spine (globals and layers) into
// `spine`, the routed experts into `experts`.
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
  // The grouped MoE's table, uploaded once per MoE layer (gpu_blocks.cc, moe_table_bytes).
  uint8_t* moe_table = nullptr;
  std::vector<uint8_t> host_moe_table;
  float* logits = nullptr;
  // The residual stream's bookkeeping (model/attn_res.h) for the pass in flight.
  int64_t n = 0, n_blocks = 0;
  bool restart = false;
  std::vector<int32_t> host_route;  // one MoE layer's route, copied back to group its rows
  PassMeter meter;                  // what the passes did (gpu_counters.h)
};
void place_workspace(const GpuModelDesc& desc, const GpuLimits& limits, Arena& arena,
                     GpuWorkspace* ws);
// The grouped MoE's table for a pass of `slots` (row, rank) slots: at most `slots` distinct
// experts, 3 products each (gate, up, down), then three int32 per slot (its gathered input's
// row, its output's row, and by output row the slot).
uint64_t moe_table_bytes(int64_t slots);

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
  ~GpuSequenceState() { free_device_on(device, base); }
  void* base = nullptr;  // owned, on `device`
  int device = 0;
  std::vector<DevKdaState> kda;
  std::vector<DevMlaState> mla;
};
// layers: the placed weights' (their kinds decide the state).
void place_sequence(const GpuShape& shape, const std::vector<DevLayer>& layers,
                    const GpuLimits& limits, Arena& arena, GpuSequenceState* st);

// Times a stream's copies with CUDA event pairs (a ring of them) and sums their durations once
// they are done: a stream's copies run one at a time, so the sum is the time it was busy.
class CopyTimer {
 public:
  explicit CopyTimer(int pairs = 8);
  ~CopyTimer();
  CopyTimer(const CopyTimer&) = delete;
  CopyTimer& operator=(const CopyTimer&) = delete;
  void begin(cudaStream_t s);  // before a copy (waits for the oldest pair when all are in use)
  void end(cudaStream_t s);    // after it
  // Waits for every timed copy but the last `keep` and returns their seconds since the last call.
  double collect(int keep = 0);

 private:
  std::vector<cudaEvent_t> start_, stop_;
  int next_ = 0, pending_ = 0;
  double seconds_ = 0;
  void collect_oldest();
};

// Pinned host memory (cudaHostAlloc); an error names `part`, its bytes and the flags that help.
uint8_t* alloc_pinned(uint64_t bytes, const std::string& part);

// The streamed spine layers [first, n_layers), copied every pass on a copy stream into one of two
// VRAM staging buffers while the previous layer computes. Their bytes pass through a small ring
// of pinned host buffers that a worker thread fills from the host views (the mapping) a layer or
// two ahead of the pass, so no whole pinned image of the streamed spine exists. Events order the
// buffers: a VRAM buffer's copy waits for the compute that last read it, the compute waits for its
// copy, and a host buffer is refilled only after its copy out finished. Which buffer holds which
// layer is tracked, so a cancelled pass leaves nothing stale, and the next pass's first layer is
// copied while the head of this one runs.
class SpineStream {
 public:
  // Views of desc's layers [first, n) in both staging buffers; their conv weights uploaded into
  // `g`. staging: the VRAM for two buffers of `buffer_bytes` (the model frees it); ring_buffers
  // pinned host buffers of buffer_bytes each (owned). Starts the fill thread on `device`.
  SpineStream(const GpuModelDesc& desc, int64_t first, uint8_t* staging, uint64_t buffer_bytes,
              Arena& g, std::vector<DevLayer>* layers, int device, int64_t ring_buffers);
  ~SpineStream();
  SpineStream(const SpineStream&) = delete;
  SpineStream& operator=(const SpineStream&) = delete;
  int64_t first() const { return first_; }
  // Layer l (streamed) on `compute`: its copy issued if not already, the stream made to wait
  // for it. Returns its views. Adds the bytes copied to *copied_bytes.
  const DevLayer& acquire(int64_t l, cudaStream_t compute, uint64_t* copied_bytes);
  // The compute of layer l is issued: its buffer is free once that is done; the next streamed
  // layer (the first one after the last) is copied into the other buffer meanwhile.
  void release(int64_t l, cudaStream_t compute, uint64_t* copied_bytes);
  // After the pass's sync: the copies' busy seconds and the host's waits for the ring's fills
  // since the last call.
  void finish_pass(double* h2d_seconds, double* fill_wait_seconds);

 private:
  int issue(int64_t j, int buffer);  // copy of streamed layer j into `buffer`

  GpuModelDesc desc_;  // the host views (routed experts dropped)
  int device_;
  int64_t first_, n_;
  std::vector<uint64_t> bytes_;
  uint8_t* staging_[2] = {nullptr, nullptr};
  std::vector<DevLayer> views_[2];  // per streamed layer, in each buffer
  // Per streamed layer, in each buffer: its MXFP4 codes, moved into the kernels' layout after
  // each copy (K3's spine has none: its experts come through the expert cache).
  std::vector<std::vector<CodeSpan>> codes_[2];
  int64_t holds_[2] = {-1, -1};  // the streamed layer each buffer holds (copy issued)
  int current_ = 0;              // the buffer of the layer last acquired
  cudaStream_t copy_ = nullptr;
  cudaEvent_t copied_[2] = {nullptr, nullptr}, consumed_[2] = {nullptr, nullptr};
  CopyTimer timer_;
  double fill_wait_seconds_ = 0;
  std::vector<uint8_t*> ring_memory_;     // pinned, owned
  std::vector<cudaEvent_t> ring_copied_;  // per ring buffer: its last copy out finished
  std::unique_ptr<FillRing> ring_;        // last: its worker stops before the rest goes
};

// A layer's routed experts in VRAM slots (ExpertSlotIndex decides, run_route orders), filled from
// an ExpertSource (the mapping through pinned staging, or the RAM tier that O_DIRECT reads fill)
// by copies on their own stream. Per slot: `ready` (its copy done) and `freed` (the last products
// reading it done), so a hit computes while the misses land and a copy never overwrites an
// expert still being read.
class DevExpertCache : public ExpertDevice {
 public:
  DevExpertCache(const GpuModelDesc& desc, int64_t n_slots, uint64_t slot_bytes, uint8_t* slab,
                 std::unique_ptr<ExpertSource> source);
  ~DevExpertCache() override;
  DevExpertCache(const DevExpertCache&) = delete;
  DevExpertCache& operator=(const DevExpertCache&) = delete;
  // Runs run_expert(expert weights, i) for each distinct expert i of layer's route on `compute`
  // (run_route); adds its hits, misses, bytes and copy time to *stats.
  // run_hits takes the route's hits at once ((weights, i) each), run_expert each miss.
  using RunHits = std::function<void(const std::vector<std::pair<const DevGlu*, size_t>>&)>;
  void run(int64_t layer, const std::vector<int32_t>& experts, cudaStream_t compute,
           const std::function<void(const DevGlu&, size_t)>& run_expert, const RunHits& run_hits,
           GpuTierStats* stats);
  ExpertSourceStats source_stats() const { return source_->stats(); }

  uint64_t copy(int64_t slot, const GpuGlu& host) override;
  void wait_copied(uint64_t ticket) override;
  void compute(int64_t slot, size_t i, bool copied) override;
  void compute_hits(const std::vector<std::pair<int64_t, size_t>>& hits) override;

 private:
  ExpertSlotIndex index_;
  std::vector<std::vector<uint64_t>> expert_bytes_;  // by layer and id: VRAM bytes
  uint64_t slot_bytes_;
  uint8_t* slab_;  // n_slots · slot_bytes of VRAM (the model frees it)
  std::unique_ptr<ExpertSource> source_;
  std::vector<DevGlu> views_;  // per slot: the expert it holds
  std::vector<cudaEvent_t> ready_, freed_;
  std::vector<cudaEvent_t> done_;  // per ticket (mod size): a copy finished reading host memory
  uint64_t tickets_ = 0;
  cudaStream_t copy_ = nullptr;
  CopyTimer timer_;
  // The route in run(): where compute() issues.
  cudaStream_t compute_ = nullptr;
  const std::function<void(const DevGlu&, size_t)>* run_expert_ = nullptr;
  const RunHits* run_hits_ = nullptr;
};

// The mapped experts (desc's views) as an ExpertSource: each miss copied by the host into one of
// kExpertStagingBuffers pinned buffers in place_expert's layout.
std::unique_ptr<ExpertSource> mapped_expert_source(const GpuModelDesc& desc, uint64_t slot_bytes);

// What a block needs besides its weights.
struct PassContext {
  const GpuShape& shape;
  const GpuLimits& limits;
  GpuWorkspace& ws;
  cudaStream_t stream;
  DevExpertCache* cache;  // null: every expert resident
  GpuTierStats* stats;    // the pass's hits and misses (the model adds them up)
};

// out[n, hidden] = the block over x[n, hidden] (device rows), as model/kda.cc, mla.cc, mlp.cc and
// moe.cc compute it with the decode numerics. kda: tentative logs the rows at log_offset.
void kda_block(const PassContext& c, const DevKda& w, DevKdaState& st, const float* x, int64_t n,
               float* out, bool tentative, int64_t log_offset);
// first: positions already cached; the n rows are appended at [first, first + n).
void mla_block(const PassContext& c, const DevMla& w, DevMlaState& st, int64_t first,
               const float* x, int64_t n, float* out);
void glu_block(const PassContext& c, const DevGlu& w, const float* x, int64_t n, float* out);
// layer: the model's layer index (the expert cache's key).
// Returns whether the route came back to the host (ws.host_route holds it): a decode row whose
// experts are all resident is routed on the device instead, with no wait.
bool moe_block(const PassContext& c, const DevMoe& w, int64_t layer, const float* x, int64_t n,
               float* out);
// Replays the first `keep` logged rows of a verify pass from the saved state (kda_commit).
void kda_replay(const PassContext& c, const DevKda& w, DevKdaState& st, int64_t keep);

}  // namespace deltafin::cuda
