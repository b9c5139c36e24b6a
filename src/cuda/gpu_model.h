// A K3 model decoded on the GPU: the weights placed by tiers from host views (GpuModelDesc): all
// in VRAM when they fit, else the spine layers that fit resident and the rest streamed each pass,
// the routed experts in a VRAM cache; one sequence's state per GpuSequence (KDA recurrent and conv
// state, MLA latent cache) on the device, passes of 1-16 rows with the decode numerics for every
// row. Plain C++17 types, so the engine binds its plan here without this folder seeing model/.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/decode_ops.h"
#include "cuda/gemv.h"
#include "deltafin/gpu_stats.h"

namespace deltafin::cuda {

// A weight matrix in host memory (a checkpoint mapping), in a dtype the GPU products take.
struct HostMatrix {
  enum class DType { kBf16, kMxfp4 };
  DType dtype = DType::kBf16;
  const uint8_t* data = nullptr;    // BF16 [rows, cols], or MXFP4 packed [rows, cols/2]
  const uint8_t* scales = nullptr;  // MXFP4: E8M0 [rows, cols/32]
  int64_t rows = 0;
  int64_t cols = 0;
  bool empty() const { return data == nullptr; }
};

struct GpuGlu {
  HostMatrix gate, up;  // [intermediate, in]
  HostMatrix down;      // [in, intermediate]
};

// K3's KDA (lower-bounded gate, full-rank output gate). Vectors are fp32 host arrays.
struct GpuKdaLayer {
  HostMatrix q_proj, k_proj, v_proj;                                    // [P, hidden]
  const float *q_conv = nullptr, *k_conv = nullptr, *v_conv = nullptr;  // [P, kernel]
  HostMatrix f_a;                                                       // [head_dim, hidden]
  HostMatrix f_b;                                                       // [P, head_dim]
  const float* a_log = nullptr;                                         // [n_heads]
  const float* dt_bias = nullptr;                                       // [P]
  HostMatrix b_proj;                                                    // [n_heads, hidden]
  HostMatrix g_proj;                                                    // [P, hidden]
  const float* o_norm = nullptr;                                        // [head_dim]
  HostMatrix o_proj;                                                    // [hidden, P]
};

// K3's gated MLA with q low rank.
struct GpuMlaLayer {
  HostMatrix q_a;                    // [q_lora, hidden]
  const float* q_a_norm = nullptr;   // [q_lora]
  HostMatrix q_b;                    // [n_heads · (nope + rope), q_lora]
  HostMatrix kv_a;                   // [rank + rope, hidden]
  const float* kv_a_norm = nullptr;  // [rank]
  HostMatrix kv_b;                   // [n_heads · (nope + v), rank], BF16
  HostMatrix g_proj;                 // [n_heads · v, hidden]: sigmoid output gate, or empty
  HostMatrix o_proj;                 // [hidden, n_heads · v]
};

struct GpuMoeLayer {
  HostMatrix router;                   // [n_experts, hidden]
  const float* score_bias = nullptr;   // [n_experts]
  HostMatrix latent_down;              // [width, hidden], or empty (width == hidden)
  const float* latent_norm = nullptr;  // [width], or null
  HostMatrix latent_up;                // [hidden, width], or empty
  GpuGlu shared;                       // fused shared experts, or empty
  std::vector<GpuGlu> experts;         // by id: [moe_inter, width] / [width, moe_inter]
};

struct GpuLayer {
  bool kda = true;                    // else MLA
  bool moe = true;                    // else dense
  const float* input_norm = nullptr;  // [hidden]
  const float* post_norm = nullptr;   // [hidden]
  const float* attn_res = nullptr;    // [hidden]: the AttnRes keys before attention and the MLP
  const float* mlp_res = nullptr;
  GpuKdaLayer kda_w{};
  GpuMlaLayer mla_w{};
  GpuGlu dense;
  GpuMoeLayer moe_w;
};

struct GpuShape {
  int64_t hidden = 0, vocab = 0;
  float rms_eps = 0.0f;
  int64_t attn_res_block = 0;  // 0: plain residuals
  int64_t kda_heads = 0, kda_dim = 0, conv_kernel = 0;
  float kda_lower_bound = 0.0f, kda_norm_eps = 0.0f;
  int64_t mla_heads = 0, q_lora = 0, kv_rank = 0, nope = 0, rope = 0, v_dim = 0;
  float mla_latent_eps = 0.0f;
  int64_t moe_width = 0;
  RouterShape router;
  float moe_norm_eps = 0.0f;
  float situ_beta = 0.0f, situ_linear_beta = 0.0f;
};

// Everything the GPU model uploads, viewed in host memory that outlives the upload.
struct GpuModelDesc {
  GpuShape shape;
  HostMatrix embed;                   // [vocab, hidden], BF16
  const float* final_norm = nullptr;  // [hidden]
  const float* output_res = nullptr;  // [hidden], or null without AttnRes
  HostMatrix lm_head;                 // [vocab, hidden]
  std::vector<GpuLayer> layers;
};

// VRAM the model takes, by part (bytes, each allocation rounded up to 256).
struct VramPlan {
  uint64_t spine_bytes = 0;      // embeddings, lm_head, every non-expert tensor
  uint64_t expert_bytes = 0;     // routed experts
  uint64_t workspace_bytes = 0;  // one pass's intermediates (for the planned context)
  uint64_t sequence_bytes = 0;   // one sequence: KDA state, MLA cache, a verify pass's log
  uint64_t total() const { return spine_bytes + expert_bytes + workspace_bytes + sequence_bytes; }
};

// Largest verify pass (rows kept tentative) a sequence logs for; more rows than kGpuMaxBatch run
// as several device passes.
struct GpuLimits {
  int64_t max_positions = 0;       // the planned context
  int64_t max_tentative_rows = 0;  // 0: no verify passes
  // Tier sizes forced instead of taken from the budget (tests, tuning). resident_layers >= 0:
  // that many spine layers in VRAM, the rest streamed. expert_slots >= 1: an expert cache of that
  // many slots even when every expert would fit (fewer than one row's route runs it in waves).
  int64_t resident_layers = -1;
  int64_t expert_slots = 0;
  // --gpu-expert-math tensor: MXFP4 products on the tensor cores (gemv_mxfp4_tc.h), not the
  // exact kernels.
  bool mxfp4_tensor_cores = false;
};

// Sizes the whole model on the CPU, without a device: everything resident.
VramPlan plan_vram(const GpuModelDesc& desc, const GpuLimits& limits);

// How the model is spread over VRAM (bytes, each piece rounded up to 256), from plan_tiers.
struct TierPlan {
  bool whole = true;  // every weight resident: no streamed layer, every expert uploaded at load
  // The working set, whatever the tiers: the globals (embedding, lm_head, final norm, the output
  // AttnRes key, each KDA layer's conv weights, which a commit replays outside a pass), one pass's
  // workspace, one sequence at the planned context.
  uint64_t global_bytes = 0, workspace_bytes = 0, sequence_bytes = 0;
  int64_t n_layers = 0;
  int64_t resident_layers = 0;        // spine layers [0, resident_layers) stay in VRAM
  uint64_t resident_spine_bytes = 0;  // their bytes
  uint64_t streamed_spine_bytes = 0;  // the others': pinned host memory, copied in every pass
  uint64_t staging_bytes = 0;         // two VRAM buffers of the largest streamed layer
  // Pinned host memory: the ring the streamed layers pass through (spine_ring_buffers of the
  // largest streamed layer; none without streamed layers) and the staging buffers mapped experts
  // are copied through (kExpertStagingBuffers slots; none when every expert is resident).
  int64_t spine_ring_buffers = 0;
  uint64_t spine_ring_bytes = 0, expert_staging_bytes = 0;
  int64_t n_experts = 0;           // routed experts in the model
  int64_t expert_slots = 0;        // whole: n_experts; else the cache's slots
  int64_t min_expert_slots = 0;    // the fewest a plan from the budget takes: one row's route
  uint64_t expert_slot_bytes = 0;  // the largest expert
  uint64_t expert_bytes = 0;       // whole: every expert; else slots · slot bytes
  uint64_t working_bytes() const { return global_bytes + workspace_bytes + sequence_bytes; }
  int64_t streamed_layers() const { return n_layers - resident_layers; }
  uint64_t total() const {
    return working_bytes() + resident_spine_bytes + staging_bytes + expert_bytes;
  }
  uint64_t pinned_host_bytes() const { return spine_ring_bytes + expert_staging_bytes; }
};
// Pinned buffers in the streamed spine's host ring (a layer copied out, one filled, one filling)
// and in the mapped experts' staging.
inline constexpr int64_t kSpineRingBuffers = 3;
inline constexpr int64_t kExpertStagingBuffers = 4;
// The tiers under `budget_bytes` of VRAM: the whole model when it fits (and no tier is forced);
// else the working set, the minimum expert cache and the spine staging, then as many spine layers
// as fit in layer order, then as many expert slots as fit (at most one per expert). Throws
// std::runtime_error naming the tier that does not fit and its bytes.
TierPlan plan_tiers(const GpuModelDesc& desc, const GpuLimits& limits, uint64_t budget_bytes);
// One line per tier for the startup log.
std::string describe_tiers(const TierPlan& plan);
// Checks the plan's pinned host memory against `host_budget_bytes` (the RAM budget less what the
// process holds); throws std::runtime_error naming the part that does not fit and the flags.
void check_host_tiers(const TierPlan& plan, uint64_t host_budget_bytes);

// What an ExpertSource did since load: misses served from host memory it held (the RAM tier, or
// the mapping) and those read from the disk first.
struct ExpertSourceStats {
  uint64_t ram_hits = 0, ram_hit_bytes = 0;
  uint64_t disk_reads = 0, disk_bytes = 0;
  double wait_seconds = 0;  // the pass's thread blocked on the source (reads, host copies)
};

// What the passes moved per tier since load. Hits and misses count a (pass, layer, expert) once
// however many rows chose it; bytes are the experts' VRAM layout.
struct GpuTierStats {
  uint64_t passes = 0;                // device passes (up to kGpuMaxBatch rows each)
  uint64_t resident_spine_bytes = 0;  // resident spine layers the passes read
  uint64_t streamed_spine_bytes = 0;  // streamed spine layers copied host → VRAM
  uint64_t expert_hits = 0, expert_misses = 0;
  uint64_t expert_hit_bytes = 0, expert_miss_bytes = 0;  // miss bytes: copied host → VRAM
  // Time the device's host-to-device copies were busy (CUDA events around each copy; a stream's
  // copies run one at a time, so the sum is its busy time): bytes / seconds is the link rate the
  // tier got, to compare with the pinned copy rate.
  double spine_h2d_seconds = 0, expert_h2d_seconds = 0;
  double spine_fill_wait_seconds = 0;  // the pass waited for the host ring's fill of a layer
  ExpertSourceStats source;            // where the misses came from (RAM tier, disk)
};
// Checks that the shapes are ones the kernels take; throws std::invalid_argument naming the field.
void check_gpu_shapes(const GpuModelDesc& desc);

// Thrown by GpuModel::forward when its cancel poll asked it to stop between two layers.
struct GpuPassCancelled {};

struct GpuSequenceState;  // device buffers of one sequence

class GpuSequence {
 public:
  ~GpuSequence();
  int64_t n_positions() const { return n_positions_; }
  int64_t tentative_rows() const { return tentative_rows_; }

 private:
  friend class GpuModel;
  GpuSequence() = default;
  std::unique_ptr<GpuSequenceState> state_;
  int64_t n_positions_ = 0;
  int64_t tentative_rows_ = 0;
};

struct GpuWeights;     // device views of the uploaded weights
struct GpuWorkspace;   // one pass's device intermediates
class SpineStream;     // the streamed spine layers' copies
class DevExpertCache;  // the routed experts' VRAM cache
class ExpertSource;    // gpu_tiers.h: where the cache's misses come from
// What the passes did (the public deltafin::GpuStats; the byte arithmetic is gpu_counters.h).
using GpuCounters = ::deltafin::GpuStats;

class GpuModel {
 public:
  // Places desc on device `device` by `tiers` (plan_tiers of the same desc and limits). The
  // views must outlive the model when tiers stream (the experts, unless whole). `experts`: where
  // the expert cache's misses come from (its memory pinned by the caller, e.g. the RAM tier that
  // O_DIRECT reads fill); null: copied from desc's views (the mapping) through pinned staging.
  // Throws std::runtime_error naming the part that did not fit (or the CUDA error),
  // std::invalid_argument for a shape the kernels do not take.
  GpuModel(const GpuModelDesc& desc, int device, const GpuLimits& limits, const TierPlan& tiers,
           std::unique_ptr<ExpertSource> experts = nullptr);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  const TierPlan& tiers() const { return tiers_; }
  int device() const { return device_; }
  // What the passes did so far (gpu_counters.h), for bench decode's floor: bytes touched in VRAM
  // by part, stream operations, device time. Read between passes.
  const GpuCounters& counters() const;
  const GpuShape& shape() const { return shape_; }
  GpuTierStats tier_stats() const;  // what the tiers moved (safe from any thread)

  // A new empty sequence; its state takes tiers().sequence_bytes of VRAM.
  std::unique_ptr<GpuSequence> new_sequence();
  void reset(GpuSequence& seq);
  // Runs n ids at positions seq.n_positions() ... in passes of at most kGpuMaxBatch rows. Writes
  // logits [n, vocab] when all_rows, else the last row's [vocab] (host memory). tentative: a
  // verify pass (n <= max_tentative_rows): the rows stay tentative until commit(). cancel: polled
  // between layers; when it returns true, throws GpuPassCancelled leaving seq part-run (reset it).
  void forward(GpuSequence& seq, const int32_t* ids, int64_t n, bool all_rows, float* logits,
               bool tentative = false, const std::function<bool()>* cancel = nullptr);
  // Keeps the first `keep` rows of the last verify pass: the state is then what `keep` decode
  // passes over those ids would have left, bit for bit.
  void commit(GpuSequence& seq, int64_t keep);

 private:
  // One device pass of n <= kGpuMaxBatch rows; the logits of rows [first, n) into `logits`.
  // tentative: the rows' KDA inputs are logged at row log_offset of the sequence's log.
  void pass(GpuSequence& seq, const int32_t* ids, int64_t n, int64_t first, float* logits,
            bool tentative, int64_t log_offset, const std::function<bool()>* cancel);

  GpuShape shape_;
  GpuLimits limits_;
  TierPlan tiers_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GpuWeights> w_;
  std::unique_ptr<GpuWorkspace> ws_;
  std::unique_ptr<SpineStream> spine_;     // null: every layer resident
  std::unique_ptr<DevExpertCache> cache_;  // null: every expert resident
  mutable std::mutex tier_stats_mu_;
  GpuTierStats tier_stats_;
};

}  // namespace deltafin::cuda
