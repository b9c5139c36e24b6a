// Hopper's warpgroup MMA (wgmma, sm_90a) for the tensor-core MXFP4 mode: m64nNk16 BF16 with A
// from registers and B from shared memory, its fences and waits, the B matrix descriptor, and a
// sub-chunk's decode into A fragments in the k order of gemv_mxfp4_tc.cu. Device code only, and
// only valid where __CUDA_ARCH_FEAT_SM90_ALL is defined (an sm_90a compile pass).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemv_common.cuh"
#include "cuda/mxfp4_layout.cuh"
#include "cuda/mxfp4_tc_math.cuh"

namespace deltafin::cuda::wgmma {

using gemv::cp_async_commit;
using gemv::cp_async_wait;
using gemv::e2m1x8_bf16_permuted;
using gemv::word;
using namespace tc_math;

// D (64 x 8·NT, fp32: thread (warp w, lane 4g + t) holds d[i] at row 16w + g + 8·((i >> 1) & 1),
// column 8·(i >> 2) + 2t + (i & 1)) += A (64 x 16, BF16 in registers: a[0] rows g, k 2t..2t+1;
// a[1] rows g + 8; a[2] and a[3] the same at k + 8) · B (16 x 8·NT, BF16 at `desc`). The
// immediates after the descriptor: scale-d 1 (accumulate), A and B not negated, B not
// transposed (K-major).
template <int NT>
struct Wgmma;
template <>
struct Wgmma<1> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, %8, 1, 1, 1, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
        : "memory");
  }
};
template <>
struct Wgmma<2> {
  static __device__ __forceinline__ void run(float (&d)[8], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, 1, 1, 1, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
        : "memory");
  }
};
template <>
struct Wgmma<3> {
  static __device__ __forceinline__ void run(float (&d)[12], const uint32_t (&a)[4],
                                             uint64_t desc) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, "
        "{%12, %13, %14, %15}, %16, 1, 1, 1, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
        : "memory");
  }
};
template <>
struct Wgmma<4> {
  static __device__ __forceinline__ void run(float (&d)[16], const uint32_t (&a)[4],
                                             uint64_t desc) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
        : "memory");
  }
};
template <>
struct Wgmma<6> {
  static __device__ __forceinline__ void run(float (&d)[24], const uint32_t (&a)[4],
                                             uint64_t desc) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23}, "
        "{%24, %25, %26, %27}, %28, 1, 1, 1, 0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
        : "memory");
  }
};

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Tells the compiler the accumulators change here, so no read of them moves above a wait.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Shared memory written through the generic proxy (cp.async) before wgmma reads it (async proxy).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The K-major, unswizzled matrix descriptor of B at shared address `addr`: core matrices (8
// columns x 8 k, 16 bytes a column) kLeading bytes apart along k and kStride apart along the
// columns (PTX's leading and stride byte offsets).
template <uint64_t kLeading = 128, uint64_t kStride = 256>
__device__ __forceinline__ uint64_t b_descriptor(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | ((kLeading >> 4) << 16) |
         ((kStride >> 4) << 32);
}

// One sub-chunk's A fragments (8 k-steps of 4 registers) from its two rows' words and scales.
template <bool kTwo>
__device__ __forceinline__ void decode_sub(const uint4 (&wq)[2], const uint32_t (&sq)[2],
                                           uint32_t (&a)[8][4]) {
  uint32_t first[2], second[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if constexpr (kTwo) {
      const ScaleTwo s = scale_two(sq[h]);
      first[h] = s.first;
      second[h] = s.second;
    } else {
      first[h] = scale_one(sq[h]);
    }
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t p[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      e2m1x8_bf16_permuted(word(wq[h], q), p[h]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        p[h][k] = bf16x2_mul(p[h][k], first[h]);
        if constexpr (kTwo) p[h][k] = bf16x2_mul(p[h][k], second[h]);
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      a[2 * q + hh][0] = p[0][2 * hh];
      a[2 * q + hh][1] = p[1][2 * hh];
      a[2 * q + hh][2] = p[0][2 * hh + 1];
      a[2 * q + hh][3] = p[1][2 * hh + 1];
    }
  }
}

}  // namespace deltafin::cuda::wgmma
