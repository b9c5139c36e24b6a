// The tensor-core MXFP4 products on Hopper's warpgroup MMA (gemv_mxfp4_wgmma.cu), a block shape of
// gemv_mxfp4_tc.cu's mode ("3 warpgroups of 64 rows"): the same contract as gemv_mxfp4_tc.h's,
// for sm_90 GPUs and builds with sm_90a code. Internal to src/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/gemv.h"

namespace deltafin::cuda::detail {

// Weight rows a block of the wgmma kernel takes (3 warpgroups of 64): one block an SM, so the
// pick (mxfp4_tc_pick) sizes its grid's waves by it.
inline constexpr int kMxfp4WgmmaBlockRows = 192;

// Whether the current device runs the wgmma kernel: an sm_90 GPU and this build's sm_90a code
// for it (found once, by a probe kernel that reports which compile pass it came from).
bool mxfp4_wgmma_available();

// `count` tasks of `tasks` (grouped) or, count == 0, w · x for n activation rows (1-16); the
// caller has checked the shapes. Throws std::runtime_error where mxfp4_wgmma_available() is false.
void launch_mxfp4_wgmma(int64_t n, int rows, int cols, int count, cudaStream_t stream,
                        const DeviceMxfp4Task* tasks, const DeviceMxfp4& w, const float* x,
                        float* y);

}  // namespace deltafin::cuda::detail
