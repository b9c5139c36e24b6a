// The exact MXFP4 GEMV at one activation row for K3's expert row widths (gemv_mxfp4_pairs.cu):
// what gemv.cu's launchers call before their general kernel. Internal to src/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda/gemv.h"

namespace deltafin::cuda::detail {

// Whether the row-pair kernel takes matrices of `cols` columns (3072 and 3584: K3's downs and its
// gates and ups).
bool mxfp4_pairs_takes(int64_t cols);

// y = x · Wᵀ for one activation row, bit-identical to the general kernel (the same arithmetic in
// the same order, gemv.h). Returns false, launching nothing, where it does not take the shape or
// where the bench turned it off; the caller then runs the general kernel.
bool mxfp4_pairs_single(const DeviceMxfp4& w, const float* x, float* y, cudaStream_t stream);
// All `count` tasks of a grouped launch whose max_n is 1 (so every task's n is 0 or 1).
bool mxfp4_pairs_grouped(const DeviceMxfp4Task* tasks, int count, int rows, int cols,
                         cudaStream_t stream);

// The kernel's shape: weight rows a warp step (2 or 4: the rows that share each activation read
// and the butterfly's shuffles) and cp.async stages a warp (1: the stage is read into registers
// before the next step's loads go into it; 2 or 3: the loads run 1 or 2 steps ahead). Every shape
// computes the same bits.
struct Mxfp4PairsShape {
  int rows_per_warp = 2, stages = 2;
};
// The shape the model runs for rows of `cols` columns on a device whose DRAM feeds each SM at
// `dram_gbps_per_sm` (gemv::device_dram_gbps_per_sm), in a grouped launch or alone: 4 rows a warp
// step with the loads 2 steps ahead on 96-group rows (downs); on 112-group rows (gates, ups) 4
// rows 1 step ahead, or on cards past gemv::kFastDramGbpsPerSm 4 rows with no loads ahead grouped
// and 2 rows 1 step ahead alone. Each is that width's fastest shape on its card
// (docs/PERFORMANCE.md, "H200, 2026-12-07 17:20-17:27 UTC"; 2026-12-06 for the H100).
Mxfp4PairsShape mxfp4_pairs_default(int64_t cols, double dram_gbps_per_sm, bool grouped);
// Every compiled shape (2 or 4 rows, depth 1-3): what the bench times and the GPU test checks.
std::vector<Mxfp4PairsShape> mxfp4_pairs_shapes();
// The bench's and the GPU test's choice: every width runs `shape` (stages 0: the general kernel
// everywhere) until reset_mxfp4_pairs_shape gives each width its default again. Throws
// std::invalid_argument for a shape not compiled. Not thread-safe: the model never calls them.
void set_mxfp4_pairs_shape(Mxfp4PairsShape shape);
void reset_mxfp4_pairs_shape();

}  // namespace deltafin::cuda::detail
