// What the exact GEMV kernels share (gemv.cu's MXFP4 and BF16 ones, gemv_mxfp4_pairs.cu's for
// fixed row widths, gemv_bf16_narrow.cu's for short rows): the E2M1 and BF16 decodes, the
// activations' scaling, the fused multiply-add order of eight values, the warp's butterfly sum and
// its reduce-scatter for several sums, a word of a 16-byte load, the streaming weight load and the
// cp.async copies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deltafin::cuda::gemv {

constexpr unsigned kFullMask = 0xffffffffu;
// MXFP4 decodes a weight as 2^-126 times its value (e2m1x8_raw), so the staged activations are
// x · 2^63 and a group's sum is scaled back by 2^63: the products are w·x·2^-63, and the bits
// equal those of unscaled arithmetic unless |x| >= 2^65 or a group's partial sum falls below
// 2^-63 in magnitude (docs/CUDA.md "Exactness").
constexpr float kXScale = 0x1p63f;

// MXFP4: a group's 32 floats sit 36 apart in shared memory (the 4-float pad makes the 8 lanes of
// a float4 phase hit distinct banks).
constexpr int kMxGroupStride = 36;

// The eight E2M1 codes of a published word (code j in bits 4j..4j+3) as 2^-126 times their values,
// the reference the device layout's decode (mxfp4_layout.cuh) is checked against for every word;
// the kernels read that layout. The 3 magnitude bits at float bits 22-24 read as that (0.5 is the
// subnormal 2^-127), the sign at bit 31. Codes j and j+4 sit 16 bits apart, so one mask isolates
// the pair and one multiply by 2^a + 2^b (a - b = 6, the sign's distance from the magnitude) places
// a copy of the code at bits 22-25 and another at 28-31 without the copies overlapping (no
// carries); the high code of the pair either overflows out of the word or lands below bit 16, and
// the mask 0x81c00000 keeps the magnitude of one copy and the sign of the other. 21 instructions
// per 8 weights in SASS (the byte-permute decode before it: 23), 8 of them integer multiplies,
// which issue to the FMA pipe and leave the ALU pipe (half the issue rate) to the masks. No table.
// The 2^126 is folded into the activations and the group sum (see mxfp4_body).
__device__ __forceinline__ void e2m1x8_raw(uint32_t w, float (&f)[8]) {
  constexpr uint32_t kFields = 0x81c00000u;  // sign and magnitude of a float's top code
  const uint32_t w8 = w >> 8;
  const uint32_t c04 = w & 0x000f000fu, c15 = w & 0x00f000f0u;  // codes 0 and 4, 1 and 5
  const uint32_t c26 = w8 & 0x000f000fu, c37 = w8 & 0x00f000f0u;
  // Low code of a pair at bit s (0 or 4): times 2^(22-s) + 2^(28-s); high code: 2^(6-s) + 2^(12-s).
  f[0] = __uint_as_float((c04 * 0x10400000u) & kFields);
  f[4] = __uint_as_float((c04 * 0x00001040u) & kFields);
  f[1] = __uint_as_float((c15 * 0x01040000u) & kFields);
  f[5] = __uint_as_float((c15 * 0x00000104u) & kFields);
  f[2] = __uint_as_float((c26 * 0x10400000u) & kFields);
  f[6] = __uint_as_float((c26 * 0x00001040u) & kFields);
  f[3] = __uint_as_float((c37 * 0x01040000u) & kFields);
  f[7] = __uint_as_float((c37 * 0x00000104u) & kFields);
}

// Word k (0-3) of a 16-byte load: an MXFP4 group's codes 8k..8k+7.
__device__ __forceinline__ uint32_t word(const uint4& w, int k) {
  return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w;
}

// A 16-byte chunk's eight BF16 weights as floats, in column order: a bf16 is a float's top half
// (the low half of each word holds the even column).
__device__ __forceinline__ void bf16x8_to_f32(const uint4& w, float (&f)[8]) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    f[2 * k] = __uint_as_float(words[k] << 16);
    f[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
  }
}

__device__ __forceinline__ float e8m0_to_f32(uint32_t s) {
  // 2^(s-127): the exponent field for s >= 1, the subnormal 2^-127 for s = 0, NaN for 255.
  if (s == 255u) return __uint_as_float(0x7fc00000u);
  return s == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(s << 23);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

// Halves v[0..2K) into v[0..K) across the lanes that differ in bit `off`: the lane whose bit is
// clear keeps v[i] + (its partner's v[i]) for i < K, the other v[i + K] + (its partner's v[i + K]):
// the addition warp_sum makes at offset `off`, one shuffle for two sums.
template <int K, int N>
__device__ __forceinline__ void scatter_level(float (&v)[N], int lane, int off) {
  static_assert(2 * K <= N, "the level halves v[0..2K)");
  const bool upper = (lane & off) != 0;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const float keep = upper ? v[i + K] : v[i], send = upper ? v[i] : v[i + K];
    v[i] = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, off));
  }
}

template <int K, int kOff, int N>
__device__ __forceinline__ float scatter_from(float (&v)[N], int lane) {
  if constexpr (K == 0) {  // one sum left: the plain butterfly's remaining levels
    float u = v[0];
#pragma unroll
    for (int off = kOff; off > 0; off /= 2) u = __fadd_rn(u, __shfl_xor_sync(kFullMask, u, off));
    return u;
  } else {
    scatter_level<K>(v, lane, kOff);
    return scatter_from<K / 2, kOff / 2>(v, lane);
  }
}

// The N lane chains v[i] (N a power of two, at most kWidth) each summed over the lanes of a
// kWidth-lane group (16 or 32) in the order of warp_sum's levels from offset kWidth / 2 down to 1,
// with N - 1 shuffles for the halving levels where N butterflies would take N · log2(kWidth):
// every sum is formed from the same two values at every level, so its bits are warp_sum's. Returns
// this lane's sum: chain (lane % kWidth) / (kWidth / N), which lanes differing only in the bits
// below kWidth / N hold alike. v is overwritten.
template <int kWidth, int N>
__device__ __forceinline__ float scatter_sums(float (&v)[N], int lane) {
  static_assert(kWidth == 16 || kWidth == 32, "a half-warp or a warp");
  static_assert(N >= 1 && N <= kWidth && (N & (N - 1)) == 0, "a power of two, at most kWidth");
  return scatter_from<N / 2, kWidth / 2>(v, lane);
}

// v + w[0]·a.x + ... + w[7]·b.w, one fused multiply-add at a time in this order: the order the
// CPU emulation (gemv_order_ref.cc) reproduces, shared by the MXFP4 and BF16 kernels.
__device__ __forceinline__ float fma8(const float (&w)[8], float4 a, float4 b, float v) {
  v = __fmaf_rn(w[0], a.x, v);
  v = __fmaf_rn(w[1], a.y, v);
  v = __fmaf_rn(w[2], a.z, v);
  v = __fmaf_rn(w[3], a.w, v);
  v = __fmaf_rn(w[4], b.x, v);
  v = __fmaf_rn(w[5], b.y, v);
  v = __fmaf_rn(w[6], b.z, v);
  return __fmaf_rn(w[7], b.w, v);
}

// 16 bytes global -> shared without registers, through L2 only (.cg: data read once); valid ==
// false fills zeros and reads nothing. dst as a shared-space address or a generic pointer.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, valid);
}
// The same through L1 (.ca): for data many blocks of an SM read, such as activation tiles, whose
// later readers then hit L1 instead of L2.
__device__ __forceinline__ void cp_async16_l1(void* dst, const void* src, bool valid) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ uint4 load_stream(const void* p) {
  // Weights are read once per pass: don't let them evict the activations from L1.
  return __ldcs(reinterpret_cast<const uint4*>(p));
}

}  // namespace deltafin::cuda::gemv
