// The device probes of device_probe.h: reads of 16-byte loads over a buffer much larger than L2,
// by three kernels (the best is the rate); empty launches, small copies and waited-for launches
// timed back to back on a stream of the GPU model's kind; expert-sized copies from pinned host
// memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "cuda/device_probe.h"

namespace deltafin::cuda {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA device probe: ") + what + ": " +
                             cudaGetErrorString(err));
}

__global__ void read_kernel(const uint4* __restrict__ p, uint64_t n, uint32_t* sink) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = p[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // the loads must not be dropped as unused
}

// Each block reads tiles of kLoads · blockDim.x contiguous 16-byte words, a tile's loads all in
// flight before any is used, streaming (evict-first), tiles blockIdx.x, + gridDim.x, ...
template <int kLoads>
__global__ void read_tiles_kernel(const uint4* __restrict__ p, uint64_t n, uint32_t* sink) {
  const uint64_t tile = static_cast<uint64_t>(blockDim.x) * kLoads;
  uint32_t acc = 0;
  for (uint64_t base = blockIdx.x * tile; base < n; base += gridDim.x * tile) {
    uint4 v[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const uint64_t i = base + static_cast<uint64_t>(k) * blockDim.x + threadIdx.x;
      v[k] = i < n ? __ldcs(p + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kLoads; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void empty_kernel() {}

// Owns the probe's device memory, stream and events.
struct Resources {
  ~Resources() {
    if (buffer) cudaFree(buffer);
    if (pinned) cudaFreeHost(pinned);
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (stream) cudaStreamDestroy(stream);
  }
  void* buffer = nullptr;
  void* pinned = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  cudaStream_t stream = nullptr;
};

constexpr uint64_t kCopyBytes = 16 << 10;
constexpr uint64_t kExpertCopyBytes = 17'547'264;  // one K3 expert's span
constexpr uint64_t kPinnedBytes = uint64_t{512} << 20;

}  // namespace

DeviceProbe probe_device(int device, uint64_t read_bytes, int repetitions) {
  check(cudaSetDevice(device), "cudaSetDevice");
  DeviceProbe r;
  const uint64_t n = std::max<uint64_t>(read_bytes / 16, 1);
  r.read_bytes = n * 16;
  Resources res;
  // The copies use the buffer's first 2 x 16 KiB; the sink sits after them.
  check(cudaMalloc(&res.buffer, std::max<uint64_t>(r.read_bytes, 2 * kCopyBytes + 16)),
        "allocating the read buffer");
  check(cudaMemset(res.buffer, 0, r.read_bytes), "filling the read buffer");
  check(cudaStreamCreateWithFlags(&res.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&res.a), "cudaEventCreate");
  check(cudaEventCreate(&res.b), "cudaEventCreate");
  auto* bytes = static_cast<uint8_t*>(res.buffer);
  auto* sink = reinterpret_cast<uint32_t*>(bytes + 2 * kCopyBytes);
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  const auto span = [&](auto&& issue) {  // device seconds between two events around `issue`
    check(cudaEventRecord(res.a, res.stream), "cudaEventRecord");
    issue();
    check(cudaEventRecord(res.b, res.stream), "cudaEventRecord");
    check(cudaEventSynchronize(res.b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, res.a, res.b), "cudaEventElapsedTime");
    return ms / 1e3;
  };

  // One kernel's grid-stride read alone measured 4.0 TB/s on some H200 leases and 4.5-4.6 on
  // others, where GEMVs streamed 4.59: so three kernels, their repetitions interleaved, and the
  // rate is the best of all (the ceiling a kernel can reach, not one kernel's luck).
  const auto* words = static_cast<const uint4*>(res.buffer);
  const auto read_with = [&](int kernel) {
    switch (kernel) {
      case 0:  // grid-stride, 4 loads in flight a thread
        read_kernel<<<static_cast<unsigned>(sms) * 8, 256, 0, res.stream>>>(words, n, sink);
        break;
      case 1:  // contiguous tiles, 8 loads in flight a thread, 2048 threads an SM
        read_tiles_kernel<8>
            <<<static_cast<unsigned>(sms) * 4, 512, 0, res.stream>>>(words, n, sink);
        break;
      default:  // contiguous tiles, 4 loads in flight, 16 blocks an SM
        read_tiles_kernel<4>
            <<<static_cast<unsigned>(sms) * 16, 128, 0, res.stream>>>(words, n, sink);
    }
  };
  double best[kReadKernels] = {};
  for (int rep = 0; rep <= repetitions; ++rep)  // the first one warms up
    for (int k = 0; k < kReadKernels; ++k) {
      const double s = span([&] { read_with(k); });
      check(cudaGetLastError(), "read kernel");
      if (rep > 0 && (best[k] == 0 || s < best[k])) best[k] = s;
    }
  for (int k = 0; k < kReadKernels; ++k) {
    r.read_gbps_by_kernel[k] = static_cast<double>(r.read_bytes) / best[k] / 1e9;
    r.read_gbps = std::max(r.read_gbps, r.read_gbps_by_kernel[k]);
  }

  constexpr int kLaunches = 4096, kCopies = 2048, kSyncs = 512;
  span([&] {
    for (int i = 0; i < 64; ++i) empty_kernel<<<1, 32, 0, res.stream>>>();
  });
  r.launch_seconds = span([&] {
                       for (int i = 0; i < kLaunches; ++i) empty_kernel<<<1, 32, 0, res.stream>>>();
                     }) /
                     kLaunches;
  check(cudaGetLastError(), "empty kernel");
  r.copy_seconds = span([&] {
                     for (int i = 0; i < kCopies; ++i)
                       check(cudaMemcpyAsync(bytes + kCopyBytes, bytes, kCopyBytes,
                                             cudaMemcpyDeviceToDevice, res.stream),
                             "cudaMemcpyAsync");
                   }) /
                   kCopies;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kSyncs; ++i) {
    empty_kernel<<<1, 32, 0, res.stream>>>();
    check(cudaStreamSynchronize(res.stream), "cudaStreamSynchronize");
  }
  r.sync_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kSyncs;

  // Whole expert-sized pieces only, into the read buffer (at least one piece).
  const uint64_t pieces =
      std::max<uint64_t>(std::min(kPinnedBytes, r.read_bytes) / kExpertCopyBytes, 1);
  r.pinned_h2d_bytes = pieces * kExpertCopyBytes;
  if (r.pinned_h2d_bytes > r.read_bytes) {  // a small read buffer: room for the one piece
    check(cudaFree(res.buffer), "cudaFree");
    res.buffer = nullptr;
    check(cudaMalloc(&res.buffer, r.pinned_h2d_bytes), "allocating the copy target");
    bytes = static_cast<uint8_t*>(res.buffer);
  }
  check(cudaHostAlloc(&res.pinned, r.pinned_h2d_bytes, cudaHostAllocDefault),
        "allocating pinned host memory");
  std::fill_n(static_cast<uint8_t*>(res.pinned), r.pinned_h2d_bytes, uint8_t{0x5a});
  const auto* host = static_cast<const uint8_t*>(res.pinned);
  double best_copy = 0;
  for (int rep = 0; rep <= repetitions; ++rep) {  // the first one warms up
    const double s = span([&] {
      for (uint64_t i = 0; i < pieces; ++i)
        check(cudaMemcpyAsync(bytes + i * kExpertCopyBytes, host + i * kExpertCopyBytes,
                              kExpertCopyBytes, cudaMemcpyHostToDevice, res.stream),
              "cudaMemcpyAsync (host to device)");
    });
    if (rep > 0 && (best_copy == 0 || s < best_copy)) best_copy = s;
  }
  r.pinned_h2d_gbps = static_cast<double>(r.pinned_h2d_bytes) / best_copy / 1e9;
  return r;
}

}  // namespace deltafin::cuda
