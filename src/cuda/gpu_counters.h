// The per-pass byte arithmetic of the GPU model's counters (GpuCounters, the public
// deltafin::GpuStats: the bytes each pass touched in VRAM by part, its stream operations and the
// device's time, cumulative since the model was made), which needs no device.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/gpu_model.h"

namespace deltafin::cuda {

// The bytes a pass touches apart from its routed experts, for the model placed from a desc. The
// same whatever the tiers: a streamed spine layer is read from its staging buffer in VRAM like a
// resident one (its copy into VRAM is the tiers' count, GpuTierStats), and a cached expert has
// the bytes of a resident one.
struct PassByteModel {
  uint64_t spine_bytes = 0;           // the VRAM plan's spine less the embedding and the lm_head
  uint64_t head_bytes = 0;            // the lm_head
  uint64_t embed_row_bytes = 0;       // one BF16 embedding row
  uint64_t cache_position_bytes = 0;  // one position in every MLA layer: latent + k_pe, fp32
  uint64_t kda_state_bytes = 0;       // every KDA layer's state and conv history, read + written
  // Adds a pass of n rows, head_rows of them through the lm_head, after which `positions` are
  // cached (attention read all of them).
  void add_pass(GpuCounters& c, int64_t n, int64_t head_rows, int64_t positions) const;
  // By layer: one routed expert's bytes (expert_bytes), 0 in a dense layer; experts per layer.
  std::vector<uint64_t> layer_expert_bytes;
  int64_t n_experts = 0;
};
// The spine is the plan's: the whole model's (plan_vram), or the tiers' globals, resident and
// streamed layers together (plan_tiers), which are the same bytes.
PassByteModel pass_byte_model(const GpuModelDesc& desc, const VramPlan& plan);
PassByteModel pass_byte_model(const GpuModelDesc& desc, const TierPlan& tiers);

// One routed expert's bytes: its three MXFP4 matrices, packed codes and scales.
uint64_t expert_bytes(const GpuGlu& e);

}  // namespace deltafin::cuda
