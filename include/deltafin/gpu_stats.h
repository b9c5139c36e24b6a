// GpuStats: what the GPU backend's passes did, shared by the public API (Engine::gpu_stats) and
// the CUDA module that counts it (cuda::GpuCounters is this struct). Plain C++17, no engine types,
// so src/cuda can include it.
#pragma once

#include <cstdint>

namespace deltafin {

// What the GPU backend's passes did since load (all zero on the CPU backend); take differences
// around a pass. These are the pass counters (Engine::gpu_stats); what the VRAM tiers moved is in
// StreamStats' gpu_* fields (Engine::stream_stats). Bytes are those the passes touched in VRAM,
// each part once per pass (its rows share every load); `bench decode` divides them by the device's
// read rate.
struct GpuStats {
  uint64_t passes = 0, rows = 0;
  uint64_t spine_bytes = 0;            // every layer's weights and norms, the head's norms
  uint64_t expert_bytes = 0;           // routed experts, each distinct one once per pass and layer
  uint64_t experts = 0;                // their number
  uint64_t head_bytes = 0;             // the lm_head, in passes that computed logits
  uint64_t embed_bytes = 0;            // the embedding rows of the passes' ids
  uint64_t attention_cache_bytes = 0;  // every cached position's MLA latent and k_pe, per layer
  uint64_t kda_state_bytes = 0;        // each KDA layer's recurrent and conv state, read + written
  uint64_t launches = 0, copies = 0, syncs = 0;  // kernel launches, async copies, host waits
  // Of the launches: grouped expert products split by batch size, one per extra gate/up and
  // down launch pair (a multi-row pass whose experts were chosen by different numbers of rows).
  uint64_t expert_batch_splits = 0;
  // From an event before each pass's first operation to one after its last (gaps included).
  double device_seconds = 0;
  uint64_t touched_bytes() const {
    return spine_bytes + expert_bytes + head_bytes + embed_bytes + attention_cache_bytes +
           kda_state_bytes;
  }
};

}  // namespace deltafin
