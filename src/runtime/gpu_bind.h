// Binds a loaded model's plan (weights mapped from its checkpoint) to the GPU model's host views:
// every matrix, norm and routed expert of a K3 checkpoint, checked for what the GPU path takes.
// Only in a build with the CUDA backend (DELTAFIN_WITH_CUDA).
#pragma once

#if DELTAFIN_WITH_CUDA
#include "cuda/gpu_model.h"
#include "model/model.h"

namespace deltafin::runtime {

// The views stay valid while `model` lives. Throws base::Error naming the layer, tensor or config
// field the GPU backend does not take (a GQA layer, SiLU, an F32 or int8 matrix, ...).
cuda::GpuModelDesc bind_gpu_model(const model::Model& model);

}  // namespace deltafin::runtime
#endif
