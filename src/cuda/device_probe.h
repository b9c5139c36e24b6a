// What the device does in this process, for `bench decode`'s floor on the GPU: the rate of a pure
// streaming read of a large buffer (the best of three read kernels), and the cost of each kind of
// stream operation a pass issues (an empty kernel launch, a small device copy, a launch the host
// waits for).
#pragma once

#include <cstdint>

namespace deltafin::cuda {

inline constexpr int kReadKernels = 3;

struct DeviceProbe {
  uint64_t read_bytes = 0;  // the buffer read
  double read_gbps = 0;     // the best repetition of any read kernel, GB = 10^9 bytes
  // Each read kernel's best (device_probe.cu: grid-stride, 8-load tiles, 4-load tiles).
  double read_gbps_by_kernel[kReadKernels] = {};
  double launch_seconds = 0;  // per empty kernel, launched back to back on one stream
  double copy_seconds = 0;    // per 16 KiB device-to-device cudaMemcpyAsync, back to back
  double sync_seconds = 0;    // per empty kernel the host launches and then waits for
  // Host-to-device copies from pinned memory, in pieces the size of a K3 expert (what the VRAM
  // tiers copy), back to back on one stream: the best repetition. The ceiling of the tiers'
  // streamed spine and expert misses.
  uint64_t pinned_h2d_bytes = 0;
  double pinned_h2d_gbps = 0;
};

// Reads a buffer of read_bytes (rounded down to 16 bytes, at least 16) `repetitions` times on
// `device`, and copies up to 512 MiB of pinned host memory into it as many times. Throws
// std::runtime_error naming the CUDA error (an allocation too large included).
DeviceProbe probe_device(int device, uint64_t read_bytes, int repetitions);

}  // namespace deltafin::cuda
