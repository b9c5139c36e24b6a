// The device layout of MXFP4 codes, the one every kernel decodes (gemv.h DeviceMxfp4): where the
// bits of a 32-bit word's eight E2M1 codes move so that they decode to floats in 17 instructions
// instead of the published layout's 21 (e2m1x8_raw) and to BF16x2 pairs in 9 instead of 13
// (e2m1x8_bf16), the move itself (host and device) and the decodes. A word's low half holds its
// codes 0-3 and the high half codes 4-7, laid out alike: three codes with their magnitude at bits
// p..p+2 and their sign at p + 9 (p = 0, 3, 6), which one shift and one mask turn into a float,
// and the fourth in the gaps (magnitude bits m, e0, e1 at 13, 14, 10, sign at 11).
#pragma once

#include <cstdint>

namespace deltafin::cuda::gemv {

// Code j's bits (m, e0, e1, sign: bits 4j..4j+3 of the published word) after the move.
constexpr int kE2m1Moved[8][4] = {{0, 1, 2, 9},     {3, 4, 5, 12},    {6, 7, 8, 15},
                                  {13, 14, 10, 11}, {16, 17, 18, 25}, {19, 20, 21, 28},
                                  {22, 23, 24, 31}, {29, 30, 26, 27}};

// The move, bits grouped by how far they go (the same 8 distances in both halves), and back. Each
// bit of kE2m1Moved is checked against it by the GPU test.
__host__ __device__ constexpr uint32_t permute_e2m1_word(uint32_t w) {
  return ((w & 0xc000c000u) >> 4) | ((w & 0x07000700u) >> 2) | ((w & 0x00700070u) >> 1) |
         (w & 0x00070007u) | ((w & 0x30003000u) << 1) | ((w & 0x08000800u) << 4) |
         ((w & 0x00800080u) << 5) | ((w & 0x00080008u) << 6);
}
__host__ __device__ constexpr uint32_t unpermute_e2m1_word(uint32_t w) {
  return ((w & 0x02000200u) >> 6) | ((w & 0x10001000u) >> 5) | ((w & 0x80008000u) >> 4) |
         ((w & 0x60006000u) >> 1) | (w & 0x00070007u) | ((w & 0x00380038u) << 1) |
         ((w & 0x01c001c0u) << 2) | ((w & 0x0c000c00u) << 4);
}

// e2m1x8_raw's floats (2^-126 times each code's value, code j in f[j]) from a permuted word. Codes
// at p = 0, 3, 6 (+16): the word shifted by 22 - p puts the magnitude at float bits 22-24 and the
// sign at 31, and the mask keeps those (code 6 needs no shift). Codes 3 and 7: the mask 0x6c006c00
// leaves their 8 bits alone; a multiply by 2^9 + 2^14 + 2^20 moves code 3's m and e0 by 9, its e1
// by 14 and its sign by 20, and a shift by 7 then a multiply by 1 + 2^5 + 2^11 does the same for
// code 7. No two copies meet below a kept bit, so nothing carries into one (every word checked).
__device__ __forceinline__ void e2m1x8_permuted(uint32_t w, float (&f)[8]) {
  constexpr uint32_t kFields = 0x81c00000u;
  const uint32_t gaps = w & 0x6c006c00u;
  f[0] = __uint_as_float((w << 22) & kFields);
  f[1] = __uint_as_float((w << 19) & kFields);
  f[2] = __uint_as_float((w << 16) & kFields);
  f[3] = __uint_as_float((gaps * 0x00104200u) & kFields);
  f[4] = __uint_as_float((w << 6) & kFields);
  f[5] = __uint_as_float((w << 3) & kFields);
  f[6] = __uint_as_float(w & kFields);
  f[7] = __uint_as_float(((gaps >> 7) * 0x00000821u) & kFields);
}

// e2m1x8_bf16's BF16x2 pairs (codes j and j + 4 in p[j], each 2^-126 times its value) from a
// permuted word: the two codes of a pair sit at the same place in the two halves, so the fields of
// BF16 (magnitude at bits 6-8 of a half, sign at 15) take a shift by 6 - p and the mask for codes
// at p = 0, 3, 6; the gap codes, shifted down by 7 and multiplied by 1 + 2^5 + 2^11, land on them
// with no two copies on one bit (checked for every word). 9 instructions against 13.
__device__ __forceinline__ void e2m1x8_bf16_permuted(uint32_t w, uint32_t (&p)[4]) {
  constexpr uint32_t kFields = 0x81c081c0u;
  p[0] = (w << 6) & kFields;
  p[1] = (w << 3) & kFields;
  p[2] = w & kFields;
  p[3] = (((w & 0x6c006c00u) >> 7) * 0x00000821u) & kFields;
}

}  // namespace deltafin::cuda::gemv
