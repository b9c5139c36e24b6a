// Pinned host memory as a std::pmr::memory_resource, for the host buffers a pass copies into
// (the sessions' logits): the copy is a DMA at the link's rate, not the driver's staged copy
// through pageable memory (K3's 655 KB logits row on the H200: 19 us against 96, docs/CUDA.md).
#pragma once

#include <memory_resource>

namespace deltafin::cuda {

// cudaHostAlloc'd (portable) blocks; an allocation that fails throws std::runtime_error naming
// the bytes and the flag that helps. One resource for the process, never destroyed: the buffers
// it gave may outlive any model.
std::pmr::memory_resource* pinned_host_memory();

}  // namespace deltafin::cuda
