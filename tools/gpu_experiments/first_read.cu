// Why the bench's first same-bytes read of a process measured ~15% low (docs/PERFORMANCE.md,
// 2026-12-07; the answer: a fresh allocation reads slow for a while): the read kernel of
// src/cuda/bench/harness.cu over allocations made in the bench's order (two 2 GiB buffers read and
// freed, then a layer's gates/ups sets), read again, beside a second set, after the first is freed,
// after two idle seconds, and as one launch instead of one a copy, each line with its seconds since
// start and its address. Run alone:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/first_read first_read.cu
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>
__global__ void read_kernel(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}
__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = (uint32_t)(i * 2654435761u) ^ seed;
}
static int sms;
static uint32_t* sink;
static auto t0 = std::chrono::steady_clock::now();
double since() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
void read(const char* what, const uint8_t* base, size_t set_bytes, int copies, int reps = 7) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int k = 0; k < copies; ++k)
    read_kernel<<<sms * 8, 256>>>((const uint4*)(base + k * set_bytes), set_bytes / 16, sink);
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a);
    for (int k = 0; k < copies; ++k)
      read_kernel<<<sms * 8, 256>>>((const uint4*)(base + k * set_bytes), set_bytes / 16, sink);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    v.push_back(set_bytes * (double)copies / (ms * 1e-3) / 1e9);
  }
  std::sort(v.begin(), v.end());
  std::printf("%6.3f s  %-40s %7.0f %7.0f %7.0f GB/s  (%p)\n", since(), what, v.front(),
              v[v.size() / 2], v.back(), (const void*)base);
}
uint8_t* alloc(size_t bytes) {
  uint8_t* p;
  cudaMalloc(&p, bytes);
  fill_kernel<<<1024, 256>>>((uint32_t*)p, bytes / 4, 7);
  cudaDeviceSynchronize();
  return p;
}
int main() {
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaMalloc(&sink, 4);
  const size_t gates = 32ull * 5851392 / 256 * 256, downs = 16ull * 5851392;  // ~ the bench's sets
  const int gc = (1 << 30) / gates < 4 ? 4 : (1 << 30) / gates, dc = (1 << 30) / downs;
  {
    uint8_t* a = alloc(2ull << 30);
    uint8_t* b = alloc(2ull << 30);
    read("2 GiB a", a, 2ull << 30, 1);
    cudaFree(a);
    cudaFree(b);
  }
  uint8_t* s1 = alloc(gates * gc);
  read("gates set 1, first", s1, gates, gc);
  read("gates set 1, again", s1, gates, gc);
  uint8_t* d1 = alloc(downs * dc);
  read("downs set 1", d1, downs, dc);
  read("gates set 1, third", s1, gates, gc);
  uint8_t* s2 = alloc(gates * gc);
  read("gates set 2 (beside set 1)", s2, gates, gc);
  cudaFree(s1);
  uint8_t* s3 = alloc(gates * gc);
  read("gates set 3 (set 1 freed)", s3, gates, gc);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  read("gates set 3 after 2 s idle", s3, gates, gc);
  read("gates set 2 after", s2, gates, gc);
  // one 935 MB read launch per rep instead of copies launches
  read("gates set 2 as one launch", s2, gates * gc, 1);
  read("gates set 2, 8 launches of 1/8", s2, gates * gc / 8, 8);
  cudaFree(s2);
  cudaFree(s3);
  cudaFree(d1);
  uint8_t* s4 = alloc(gates * gc);
  read("gates set 4 (all freed)", s4, gates, gc);
  return 0;
}
