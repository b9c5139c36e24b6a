// measure_gpu_costs (gpu_probe.h) over cuda::probe_device, in a build with the CUDA backend.
#include "gpu_probe.h"

#include "base/error.h"

#if DELTAFIN_WITH_CUDA
#include <stdexcept>

#include "cuda/device_probe.h"
#endif

namespace deltafin::apps {

GpuCosts measure_gpu_costs(const std::string& device, uint64_t read_bytes, int repetitions) {
#if DELTAFIN_WITH_CUDA
  if (device.rfind("cuda:", 0) != 0) base::fail("bench decode: no CUDA device in '", device, "'");
  cuda::DeviceProbe p;
  try {
    p = cuda::probe_device(std::stoi(device.substr(5)), read_bytes, repetitions);
  } catch (const std::exception& e) {
    base::fail("bench decode: ", e.what());
  }
  GpuCosts c;
  c.read_bytes = p.read_bytes;
  c.read_gbps = p.read_gbps;
  c.launch_seconds = p.launch_seconds;
  c.copy_seconds = p.copy_seconds;
  c.sync_seconds = p.sync_seconds;
  c.pinned_h2d_gbps = p.pinned_h2d_gbps;
  return c;
#else
  (void)read_bytes;
  (void)repetitions;
  base::fail("bench decode: ", device, ": this deltafin was built without the CUDA backend");
#endif
}

}  // namespace deltafin::apps
