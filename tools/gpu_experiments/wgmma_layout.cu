// An experiment, not built by CMake: whether the fragment and descriptor layouts that
// src/cuda/gemv_mxfp4_wgmma.cu assumes are the hardware's, on one wgmma alone, so that a failure
// of its GPU tests can be told from a misread layout. B's two descriptor offsets are tried both
// ways round. wgmma_check.sh runs it; alone, on an sm_90 GPU, from the repository root:
//   nvcc -std=c++17 -O3 -Isrc -gencode=arch=compute_90a,code=sm_90a \
//     -o /tmp/wgmma_layout tools/gpu_experiments/wgmma_layout.cu && /tmp/wgmma_layout
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/mxfp4_wgmma.cuh"

namespace {

using namespace deltafin::cuda::wgmma;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// The layouts gemv_mxfp4_wgmma.cu assumes, on one m64n24k16: B[k][c] = (2k + 1)·2^c in the
// descriptor's core matrices, A one-hot (row m's 1 at k = m % 16, in the A fragment order the
// kernel writes), so D[m][c] must be (2(m % 16) + 1)·2^c read through the D fragment order; a
// wrong value names the B element it holds (odd part and exponent), which shows the real mapping.
template <uint64_t kLeading, uint64_t kStride>
__global__ void layout_probe(float* d_out) {
  __shared__ __align__(1024) uint16_t b[24 * 16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  for (int i = threadIdx.x; i < 24 * 16; i += 128) {
    const int k = i / 24, c = i % 24;
    const float v = std::ldexp(float(2 * k + 1), c);
    b[(c >> 3) * 128 + (k >> 3) * 64 + (c & 7) * 8 + (k & 7)] =
        static_cast<uint16_t>(__float_as_uint(v) >> 16);
  }
  fence_proxy_async();
  __syncthreads();
  uint32_t a[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i & 1), k0 = 2 * t + 8 * (i >> 1);
    a[i] = (k0 == row ? 0x3f80u : 0u) | (k0 + 1 == row ? 0x3f800000u : 0u);
  }
  float d[12];
#pragma unroll
  for (int i = 0; i < 12; ++i) d[i] = 0.0f;
  fence_operands(d);
  wgmma_fence();
  Wgmma<3>::run(
      d, a, b_descriptor<kLeading, kStride>(static_cast<uint32_t>(__cvta_generic_to_shared(b))));
  wgmma_commit();
  wgmma_wait<0>();
  fence_operands(d);
#pragma unroll
  for (int i = 0; i < 12; ++i)
    d_out[(16 * warp + g + 8 * ((i >> 1) & 1)) * 24 + 8 * (i >> 2) + 2 * t + (i & 1)] = d[i];
}

template <uint64_t kLeading, uint64_t kStride>
bool layout_ok() {
  float* dev = nullptr;
  check(cudaMalloc(&dev, 64 * 24 * 4), "malloc");
  check(cudaMemset(dev, 0, 64 * 24 * 4), "memset");
  layout_probe<kLeading, kStride><<<1, 128>>>(dev);
  check(cudaDeviceSynchronize(), "layout probe");
  std::vector<float> d(64 * 24);
  check(cudaMemcpy(d.data(), dev, d.size() * 4, cudaMemcpyDeviceToHost), "d");
  cudaFree(dev);
  int wrong = 0;
  for (int m = 0; m < 64; ++m)
    for (int c = 0; c < 24; ++c) {
      const float want = std::ldexp(float(2 * (m % 16) + 1), c), got = d[m * 24 + c];
      if (got == want) continue;
      if (wrong++ < 24) {
        int e = 0;
        const float f = std::frexp(got, &e);  // got = f·2^e; odd part 2k + 1 names k
        int odd = static_cast<int>(std::ldexp(f, e)), c2 = 0;
        while (odd != 0 && odd % 2 == 0) {
          odd /= 2;
          ++c2;
        }
        std::printf("layout: D[%d][%d] = %g, want %g (B[k=%d][c=%d]?)\n", m, c, got, want,
                    (odd - 1) / 2, c2);
      }
    }
  std::printf("layout probe, B offsets %d along k and %d along the columns: %d of %d wrong\n",
              int(kLeading), int(kStride), wrong, 64 * 24);
  return wrong == 0;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "props");
  if (prop.major != 9) {
    std::printf("wgmma needs an sm_90 GPU; this is %s (sm_%d%d)\n", prop.name, prop.major,
                prop.minor);
    return 0;
  }
  const bool assumed = layout_ok<128, 256>();
  const bool swapped = layout_ok<256, 128>();
  std::printf("LAYOUT %s\n", assumed ? "AS ASSUMED" : swapped ? "OFFSETS SWAPPED" : "MISREAD");
  return assumed ? 0 : 1;
}
