// Pinned host memory as a std::pmr::memory_resource, for the host buffers a pass copies into
// (the sessions' logits): the copy is a DMA at the link's rate, not the driver's staged copy
// through pageable memory (docs/CUDA.md, "Logits").
#pragma once

#include <memory_resource>

namespace deltafin::cuda {

// cudaHostAlloc'd (portable) blocks, allocated and freed with `device` current (the calling
// thread keeps it), so a session on cuda:N never creates a context on another device, whichever
// thread frees its buffers. An allocation that
// fails throws std::runtime_error naming the bytes and the flag that helps. One resource per
// device for the process, never destroyed: the buffers it gave may outlive any model. Throws
// std::invalid_argument for a device outside 0..63.
std::pmr::memory_resource* pinned_host_memory(int device);

}  // namespace deltafin::cuda
