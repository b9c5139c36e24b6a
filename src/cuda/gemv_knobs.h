// The benchmark's switches between bit-identical variants of the gemv.cu kernels, so one run can
// time them side by side. Not thread-safe; the model never calls them.
#pragma once

namespace deltafin::cuda::detail {

// Chunks of 8 values a lane takes per tile in the BF16 kernel at 8 activation rows: 2 (512-column
// tiles) or 1 (256 columns: fewer registers, 4 blocks an SM), or 0 (the default) for gemv.cu's
// choice per matrix by how full the waves of each are.
void set_bf16_n8_chunks(int chunks);

}  // namespace deltafin::cuda::detail
