// Binds a loaded model's plan (weights mapped from its checkpoint) to the GPU model's host views:
// every matrix, norm and routed expert of a K3 checkpoint, checked for what the GPU path takes;
// and the expert source that reads the experts from the disk for the GPU's expert cache.
// Only in a build with the CUDA backend (DELTAFIN_WITH_CUDA).
#pragma once

#if DELTAFIN_WITH_CUDA
#include <memory>

#include "cuda/gpu_model.h"
#include "cuda/gpu_tiers.h"
#include "experts/streaming_expert_store.h"
#include "io/read_scheduler.h"
#include "model/model.h"

namespace deltafin::runtime {

// The views stay valid while `model` lives. Throws base::Error naming the layer, tensor or config
// field the GPU backend does not take (a GQA layer, SiLU, an F32 or int8 matrix, ...).
cuda::GpuModelDesc bind_gpu_model(const model::Model& model);

// The GPU expert cache's misses from the disk (`--experts stream`): the CPU's streaming store
// over the model's catalog, one O_DIRECT read per expert through `scheduler` (the engine's reader
// and drive objects) into its slots, which are the RAM tier between VRAM and the disk (a released
// slot keeps its expert; the store's LFU rule picks what a read replaces). Its slots are pinned
// (cudaHostRegister) so the device copies out of them at the pinned rate. `*store` is set to the
// store (owned by the source) for its statistics. Throws base::Error naming what failed.
// The source over a store the caller made; pin: register its slots with CUDA (false: tests
// without a GPU, whose fake device copies with memcpy). span_bytes: an expert's largest span.
std::unique_ptr<cuda::ExpertSource> store_expert_source(
    std::unique_ptr<experts::StreamingExpertStore> store, uint64_t span_bytes, bool pin);
std::unique_ptr<cuda::ExpertSource> streaming_expert_source(
    const model::Model& model, const experts::StreamingStoreOptions& options,
    std::shared_ptr<io::ReadScheduler> scheduler, const experts::StreamingExpertStore** store);

}  // namespace deltafin::runtime
#endif
