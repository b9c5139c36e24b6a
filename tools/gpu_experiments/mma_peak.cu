// The rate of mma.sync m16n8k16 (BF16 in, fp32 accumulate) on this GPU, with no memory traffic:
// the ceiling of the tensor-core MXFP4 mode (src/cuda/gemv_mxfp4_tc.cu), which issues 3n MMA
// columns for n activation rows (each fp32 activation as three BF16 pieces). Two kernels: `peak`,
// C independent accumulator chains a warp; `n8 mix`, the mode's step at n = 8 (a word's decode to
// BF16x2 and its scaling, then 3 MMAs into each of 2 row tiles). Build and run on the GPU host:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/mma_peak mma_peak.cu
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The sums go to `sink` only if they hit a value they never do, so nothing is optimized away.
template <int C>
__global__ void peak(int iters, float* sink, uint32_t seed) {
  float acc[C][4] = {};
  const uint32_t a = seed ^ threadIdx.x, b = seed * 3 + threadIdx.x;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < C; ++c) mma(acc[c], a, a + c, a ^ c, a + 1, b, b + c);
  }
  float s = 0;
#pragma unroll
  for (int c = 0; c < C; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (s == 12345.f) *sink = s;
}

__global__ void n8_mix(int iters, float* sink, uint32_t seed) {
  float acc[2][3][4] = {};
  uint32_t w = seed ^ threadIdx.x;
  const uint32_t b = seed * 3 + threadIdx.x;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      uint32_t p[4];
      const uint32_t w8 = w >> 8;
      p[0] = ((w & 0x000f000fu) * 0x1040u) & 0x81c081c0u;
      p[1] = ((w & 0x00f000f0u) * 0x0104u) & 0x81c081c0u;
      p[2] = ((w8 & 0x000f000fu) * 0x1040u) & 0x81c081c0u;
      p[3] = ((w8 & 0x00f000f0u) * 0x0104u) & 0x81c081c0u;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(p[k]) : "r"(p[k]), "r"(b), "r"(0x80008000u));
#pragma unroll
      for (int nt = 0; nt < 3; ++nt) mma(acc[m][nt], p[0], p[1], p[2], p[3], b + nt, b ^ nt);
      w = w * 1664525u + 1013904223u;
    }
  }
  float s = 0;
  for (int m = 0; m < 2; ++m)
    for (int nt = 0; nt < 3; ++nt) s += acc[m][nt][0] + acc[m][nt][3];
  if (s == 12345.f) *sink = s;
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink = nullptr;
  cudaMalloc(&sink, 4);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  constexpr int kIters = 1000;
  constexpr double kMmaFlops = 2.0 * 16 * 8 * 16;
  const auto time = [&](auto launch, double mmas, const char* name) {
    launch();
    cudaDeviceSynchronize();
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
      cudaEventRecord(e0);
      launch();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      best = ms < best ? ms : best;
    }
    std::printf("%-34s %7.1f TFLOP/s  (%s)\n", name, mmas * kMmaFlops / (best * 1e-3) / 1e12,
                cudaGetErrorString(cudaGetLastError()));
  };
  const int configs[][2] = {{4, 4}, {8, 1}, {8, 2}, {16, 1}};  // warps a block, blocks an SM
  for (const auto& cfg : configs) {
    const int warps = cfg[0], blocks = cfg[1];
    const double warp_iters = double(sms) * blocks * warps * kIters;
    char name[64];
    std::snprintf(name, sizeof name, "peak C=8, %2d warps x %d blocks", warps, blocks);
    time([&] { peak<8><<<sms * blocks, warps * 32>>>(kIters, sink, 1); }, warp_iters * 8, name);
    std::snprintf(name, sizeof name, "peak C=4, %2d warps x %d blocks", warps, blocks);
    time([&] { peak<4><<<sms * blocks, warps * 32>>>(kIters, sink, 1); }, warp_iters * 4, name);
    std::snprintf(name, sizeof name, "n8 mix,   %2d warps x %d blocks", warps, blocks);
    time([&] { n8_mix<<<sms * blocks, warps * 32>>>(kIters, sink, 1); }, warp_iters * 6, name);
  }
  // n8 mix: 6 MMAs (24576 flops) take 512 weights at 3 column tiles, so weights/s = TFLOP/s ·
  // 1e12 / 48, and MXFP4 bytes/s = weights/s · 17/32 (a nibble and a 32nd of a scale byte each).
  std::printf("n8 mix: MXFP4 GB/s at the MMA rate = TFLOP/s x 1e3 / 48 x 17 / 32\n");
  return 0;
}
