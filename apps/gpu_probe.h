// The device's costs for the GPU backend's floor (gpu_floor.h), measured in this process through
// the CUDA module's probes.
#pragma once

#include <cstdint>
#include <string>

#include "gpu_floor.h"

namespace deltafin::apps {

// device: the engine's "cuda:N". Reads a buffer of read_bytes, best of `repetitions`. A build
// without CUDA has no GPU backend, so there this is an error.
GpuCosts measure_gpu_costs(const std::string& device, uint64_t read_bytes, int repetitions);

}  // namespace deltafin::apps
