// Moving packed MXFP4 weights on the device into mxfp4_layout.cuh's permuted code layout and back
// (an experiment: the bench and the GPU test time and check the row-pair kernel on it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deltafin::cuda {

// Every 32-bit word of packed[0, bytes) in place: into the permuted layout (forward) or back.
// bytes a multiple of 16 and packed 16-byte aligned; throws std::invalid_argument otherwise.
void permute_mxfp4_codes(uint8_t* packed, size_t bytes, bool forward, cudaStream_t stream = 0);

}  // namespace deltafin::cuda
