// The tensor-core MXFP4 mode's number formats (gemv_mxfp4_tc.cu and gemv_mxfp4_wgmma.cu): an
// fp32 activation as three exact BF16 pieces, E2M1 codes and E8M0 scales as BF16 factors. Device
// code only; include from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deltafin::cuda::tc_math {

constexpr int kPieces = 3;  // BF16 pieces of an activation
// 8-column MMA tiles for n activation rows: their 3n piece columns (n = 1..16).
__host__ __device__ constexpr int column_tiles(int n) { return (kPieces * n + 7) / 8; }
// The weights are decoded as 2^-32 times their values and the activations staged times 2^32, so
// both fit BF16's range over the scales and activations that occur (gemv_mxfp4_tc.h).
constexpr float kXShift = 0x1p32f;

// An activation v's three BF16 pieces, each the top half of a float: v's top 8 significant bits,
// the next 8 (v - hi, exact), the last 8 (exact again); hi + mid + lo == v for normal v.
struct Pieces {
  uint32_t p[kPieces];
};
__device__ __forceinline__ Pieces split3(float x) {
  const float v = __fmul_rn(x, kXShift);
  const uint32_t hi = __float_as_uint(v) & 0xffff0000u;
  const float r = __fsub_rn(v, __uint_as_float(hi));
  const uint32_t mid = __float_as_uint(r) & 0xffff0000u;
  return {{hi, mid, __float_as_uint(__fsub_rn(r, __uint_as_float(mid)))}};
}
// Two pieces as BF16x2: a in the low half (the lower k index), b in the high.
__device__ __forceinline__ uint32_t pack_bf16x2(uint32_t a, uint32_t b) {
  return __byte_perm(a, b, 0x7632);
}

// The reference for the device layout's BF16x2 decode (mxfp4_layout.cuh, checked against this for
// every word; the kernels read that layout): the eight E2M1 codes of a published word (code j in
// bits 4j..4j+3) as BF16x2 pairs (j, j + 4) for j = 0..3, each 2^-126 times its value: e2m1x8_raw's
// placement on BF16's fields (magnitude at bits 6-8, so 0.5 is the subnormal 2^-127; sign at bit
// 15), both codes of a pair at once since they sit 16 bits apart. The pair's codes are isolated by
// one mask and copied to both fields by one multiply by 2^a + 2^b (a - b = 6); the copies do not
// overlap, so nothing carries.
__device__ __forceinline__ void e2m1x8_bf16(uint32_t w, uint32_t (&p)[4]) {
  constexpr uint32_t kFields = 0x81c081c0u;
  const uint32_t w8 = w >> 8;
  p[0] = ((w & 0x000f000fu) * 0x1040u) & kFields;   // codes 0 and 4
  p[1] = ((w & 0x00f000f0u) * 0x0104u) & kFields;   // codes 1 and 5
  p[2] = ((w8 & 0x000f000fu) * 0x1040u) & kFields;  // codes 2 and 6
  p[3] = ((w8 & 0x00f000f0u) * 0x0104u) & kFields;  // codes 3 and 7
}

// a · b in BF16x2, exact here (a product of powers of two and 2-bit significands in range).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

// BF16x2 2^(s - 1 - 32) for scale s <= 160: times e2m1x8_bf16's 2^-126 · code, code · 2^(s-127)
// · 2^-32. Larger s take two factors (scale_two).
__device__ __forceinline__ uint32_t scale_one(uint32_t s) { return (s + 94u) * 0x00800080u; }
struct ScaleTwo {
  uint32_t first, second;
};
__device__ __forceinline__ ScaleTwo scale_two(uint32_t s) {
  if (s == 255u) return {0x7fc07fc0u, 0x3f803f80u};             // NaN, then 1
  if (s > 160u) return {0x7f007f00u, (s - 33u) * 0x00800080u};  // 2^127, then 2^(s-160)
  return {scale_one(s), 0x3f803f80u};
}

}  // namespace deltafin::cuda::tc_math
