// The MXFP4 products on the tensor cores (gemv_mxfp4_tc.cu): an opt-in mode beside the exact
// kernels of gemv.h, for the GPU model's experts under --gpu-expert-math tensor. Host-callable;
// every pointer is a device pointer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/gemv.h"

namespace deltafin::cuda {

// y[n, rows] = x[n, cols] · Wᵀ as matmul() / matmul_grouped() take it (same layouts, limits and
// errors), with the products formed on the tensor cores (docs/CUDA.md "Tensor-core experts"):
// - each fp32 activation, times 2^32, is split exactly into three BF16 pieces (8 + 8 + 8
//   significant bits) and each weight is decoded exactly to BF16 times 2^-32, so every product
//   of a weight and a piece is exact;
// - the tensor cores sum each piece's products in fp32 in their own order and rounding
//   (truncation within each 16-term step), and the three sums are added last, (hi + mid) + lo,
//   not the FMA chain of gemv.h: results differ from matmul()'s in the last bits.
// What stays: a row's bits depend only on its activations and the weights, never on n or on the
// row's position in the batch (every row runs the same steps), so speculation stays lossless,
// and a grouped task's bits equal its single launch's. Exact splitting needs normal activations
// below 2^96 and scales 2^-100..2^127 (E8M0 27..254); outside them pieces or weights round.
// Requires sm_80 or newer.
void matmul_tc(const DeviceMxfp4& w, const float* x, int64_t n, float* y, cudaStream_t stream = 0);
void matmul_grouped_tc(const DeviceMxfp4Task* tasks, int64_t count, int64_t rows, int64_t cols,
                       int64_t max_n, cudaStream_t stream = 0);

namespace detail {
// A block shape of the kernels: warps a block (4 or 8) and weight rows a warp (32: two 16-row
// tiles share each activation fragment; 16: a warp's loads of a row fill its 128-byte lines);
// on sm_90 GPUs also 12 warps of 16 rows, the warpgroup-MMA kernel (gemv_mxfp4_wgmma.h). Every
// shape gives every output the same bits.
struct Mxfp4TcShape {
  int warps = 0;
  int warp_rows = 32;
};
// The bench's and the GPU test's switch: every launch runs `shape` (warps 0: the default again).
// Throws std::invalid_argument for a shape not compiled. Not thread-safe; the model never calls it.
void set_mxfp4_tc_shape(Mxfp4TcShape shape);
std::vector<Mxfp4TcShape> mxfp4_tc_shapes();          // the compiled ones this GPU runs
std::string mxfp4_tc_shape_name(Mxfp4TcShape shape);  // "8 warps of 32 rows"
// The shape a launch over `count` matrices (0: one) of `rows` rows with n activation rows runs on
// a GPU of `sms` SMs, `wgmma` saying whether it runs the warpgroup-MMA kernel. Where the
// activations take one column tile (n <= 2): 4 warps of 16 rows, whose loads fill whole lines.
// With at least a block an SM, from six tiles (n >= 11), and from three (n >= 6) where its
// blocks fill their last wave at least 90%: the wgmma kernel. Else 32 rows a warp, where a fragment
// shared by two tiles halves the shared-memory reads, in 8 warps, or 4 where 8-warp blocks would
// leave SMs idle (one matrix alone). docs/PERFORMANCE.md, 2026-12-07.
Mxfp4TcShape mxfp4_tc_pick(int64_t rows, int64_t count, int64_t n, int sms, bool wgmma);
}  // namespace detail

}  // namespace deltafin::cuda
