// AVX-512 matmul. MXFP4: 64 packed bytes (4 blocks, 128 elements) are read as 16 dwords; shifting
// them right by 4k puts nibble k of every dword in the low 4 bits, where vpermps looks its E2M1
// value up in a 16-float table. That vector holds elements 8j + k (lane j), so activations are
// laid out once per call to match, and the four block scales are applied to the per-lane sums of a
// group with one FMA. BF16: a dword holds elements 2j (low half) and 2j + 1 (high half); a shift
// and a mask make both f32 without shuffles, against activations split into even and odd halves.
// GCC 12 flags its own AVX-512 intrinsics (the _mm512_undefined_* they start from) as
// uninitialized after inlining: GCC bug 105593, fixed in GCC 13.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul_variant.h"
#include "quant/e2m1.h"

namespace deltafin::kernels::detail::avx512 {
namespace {

constexpr int64_t kMxGroupElems = 128;  // elements per 64 packed bytes
constexpr int64_t kBfChunkElems = 32;   // bf16 elements per 64 bytes

// x [n, cols] -> xp [n, groups * 128]: within group g, vector k lane j holds x[128g + 8j + k]
// (zero past cols, so a partial last group contributes exactly 0).
float* prepare_mxfp4_x(const float* x, int64_t n, int64_t cols, int64_t* stride) {
  const int64_t n_groups = (cols + kMxGroupElems - 1) / kMxGroupElems;
  *stride = n_groups * kMxGroupElems;
  float* xp = thread_scratch(n * *stride);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * cols;
    float* out = xp + i * *stride;
    for (int64_t g = 0; g < n_groups; ++g)
      for (int64_t k = 0; k < 8; ++k)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t c = g * kMxGroupElems + 8 * j + k;
          out[g * kMxGroupElems + 16 * k + j] = c < cols ? xi[c] : 0.0f;
        }
  }
  return xp;
}

// Block scales of one group as f32 lanes: lanes 4b..4b+3 get 2^(s_b - 127). Built as s << 23;
// fixupimm then turns s = 0 (bits 0) into the subnormal 2^-127 and s = 255 (+Inf) into NaN.
struct ScaleDecoder {
  __m512i spread = _mm512_set_epi32(0x80038080, 0x80038080, 0x80038080, 0x80038080,  //
                                    0x80028080, 0x80028080, 0x80028080, 0x80028080,  //
                                    0x80018080, 0x80018080, 0x80018080, 0x80018080,  //
                                    0x80008080, 0x80008080, 0x80008080, 0x80008080);
  __m512 min_scale = _mm512_castsi512_ps(_mm512_set1_epi32(0x00400000));
  // vfixupimm response per input class (4 bits each, class 0 lowest): QNaN, SNaN -> pass,
  // zero -> keep min_scale, one -> pass, -Inf -> pass, +Inf -> QNaN, negative, positive -> pass.
  __m512i fixup = _mm512_set1_epi32(0x11311011);

  __m512 decode(uint32_t four_scales) const {
    __m512i s = _mm512_shuffle_epi8(_mm512_set1_epi32(static_cast<int>(four_scales)), spread);
    s = _mm512_slli_epi32(s, 7);
    return _mm512_fixupimm_ps(min_scale, _mm512_castsi512_ps(s), fixup, 0);
  }
};

// kN > 0 fixes the batch at compile time (accumulators stay in registers); 0 reads n_runtime.
template <int kN>
void mxfp4_kernel(const Mxfp4Matrix& w, const float* xp, int64_t x_stride, int64_t n_runtime,
                  float* y, int64_t r0, int64_t r1) {
  const int64_t n = kN > 0 ? kN : n_runtime;
  const int64_t row_bytes = w.cols / 2, n_blocks = w.cols / 32;
  const int64_t full_groups = n_blocks / 4, tail_blocks = n_blocks % 4;
  const __m512 table = _mm512_loadu_ps(quant::kE2m1Values);
  const ScaleDecoder scales;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wp = w.packed + r * row_bytes;
    const uint8_t* sp = w.scales + r * n_blocks;
    __m512 acc[kN > 0 ? kN : kMatmulMaxBatch];
    for (int64_t i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
    auto group = [&](__m512i q, __m512 sc, int64_t g) {
      __m512 v[8];
      v[0] = _mm512_permutexvar_ps(q, table);
      for (int k = 1; k < 8; ++k) v[k] = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4 * k), table);
      for (int64_t i = 0; i < n; ++i) {
        const float* xg = xp + i * x_stride + g * kMxGroupElems;
        __m512 p = _mm512_mul_ps(v[0], _mm512_load_ps(xg));
        for (int k = 1; k < 8; ++k) p = _mm512_fmadd_ps(v[k], _mm512_load_ps(xg + 16 * k), p);
        acc[i] = _mm512_fmadd_ps(p, sc, acc[i]);
      }
    };
    for (int64_t g = 0; g < full_groups; ++g) {
      uint32_t four;
      std::memcpy(&four, sp + 4 * g, 4);
      group(_mm512_loadu_si512(wp + 64 * g), scales.decode(four), g);
    }
    if (tail_blocks > 0) {
      uint32_t four = 0;
      std::memcpy(&four, sp + 4 * full_groups, tail_blocks);
      const __mmask16 m = static_cast<__mmask16>((1u << (4 * tail_blocks)) - 1);
      group(_mm512_maskz_loadu_epi32(m, wp + 64 * full_groups), scales.decode(four), full_groups);
    }
    for (int64_t i = 0; i < n; ++i) y[i * w.rows + r] = _mm512_reduce_add_ps(acc[i]);
  }
}

// x [n, cols] -> xp [n, chunks * 32]: chunk c holds x[32c + 2j] in lanes 0..15 and x[32c + 2j + 1]
// in lanes 16..31, zero past cols.
float* prepare_bf16_x(const float* x, int64_t n, int64_t cols, int64_t* stride) {
  const int64_t n_chunks = (cols + kBfChunkElems - 1) / kBfChunkElems;
  *stride = n_chunks * kBfChunkElems;
  float* xp = thread_scratch(n * *stride);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * cols;
    float* out = xp + i * *stride;
    for (int64_t c = 0; c < n_chunks; ++c)
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t even = c * kBfChunkElems + 2 * j;
        out[c * kBfChunkElems + j] = even < cols ? xi[even] : 0.0f;
        out[c * kBfChunkElems + 16 + j] = even + 1 < cols ? xi[even + 1] : 0.0f;
      }
  }
  return xp;
}

template <int kN>
void bf16_kernel(const Bf16Matrix& w, const float* xp, int64_t x_stride, int64_t n_runtime,
                 float* y, int64_t r0, int64_t r1) {
  const int64_t n = kN > 0 ? kN : n_runtime;
  const int64_t full_chunks = w.cols / kBfChunkElems, tail = w.cols % kBfChunkElems;
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* wr = w.data + r * w.cols;
    __m512 acc_even[kN > 0 ? kN : kMatmulMaxBatch], acc_odd[kN > 0 ? kN : kMatmulMaxBatch];
    for (int64_t i = 0; i < n; ++i) acc_even[i] = acc_odd[i] = _mm512_setzero_ps();
    auto chunk = [&](__m512i q, int64_t c) {
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(q, 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(q, high_half));
      for (int64_t i = 0; i < n; ++i) {
        const float* xc = xp + i * x_stride + c * kBfChunkElems;
        acc_even[i] = _mm512_fmadd_ps(even, _mm512_load_ps(xc), acc_even[i]);
        acc_odd[i] = _mm512_fmadd_ps(odd, _mm512_load_ps(xc + 16), acc_odd[i]);
      }
    };
    for (int64_t c = 0; c < full_chunks; ++c) chunk(_mm512_loadu_si512(wr + c * kBfChunkElems), c);
    if (tail > 0) {
      const __mmask32 m = static_cast<__mmask32>((1ull << tail) - 1);
      chunk(_mm512_maskz_loadu_epi16(m, wr + full_chunks * kBfChunkElems), full_chunks);
    }
    for (int64_t i = 0; i < n; ++i)
      y[i * w.rows + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc_even[i], acc_odd[i]));
  }
}

template <int kN>
void f32_kernel(const F32Matrix& w, const float* x, int64_t n_runtime, float* y, int64_t r0,
                int64_t r1) {
  const int64_t n = kN > 0 ? kN : n_runtime;
  const int64_t full = w.cols / 16, tail = w.cols % 16;
  const __mmask16 tail_mask = static_cast<__mmask16>((1u << tail) - 1);
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr = w.data + r * w.cols;
    __m512 acc[kN > 0 ? kN : kMatmulMaxBatch];
    for (int64_t i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < full; ++c) {
      const __m512 wv = _mm512_loadu_ps(wr + 16 * c);
      for (int64_t i = 0; i < n; ++i)
        acc[i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i * w.cols + 16 * c), acc[i]);
    }
    if (tail > 0) {
      const __m512 wv = _mm512_maskz_loadu_ps(tail_mask, wr + 16 * full);
      for (int64_t i = 0; i < n; ++i)
        acc[i] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(tail_mask, x + i * w.cols + 16 * full),
                                 acc[i]);
    }
    for (int64_t i = 0; i < n; ++i) y[i * w.rows + r] = _mm512_reduce_add_ps(acc[i]);
  }
}

}  // namespace

void mxfp4_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  int64_t stride;
  const float* xp = prepare_mxfp4_x(x, n, w.cols, &stride);
  if (n == 1) {
    mxfp4_kernel<1>(w, xp, stride, n, y, r0, r1);
  } else if (n == 2) {
    mxfp4_kernel<2>(w, xp, stride, n, y, r0, r1);
  } else {
    mxfp4_kernel<0>(w, xp, stride, n, y, r0, r1);
  }
}

void bf16_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  int64_t stride;
  const float* xp = prepare_bf16_x(x, n, w.cols, &stride);
  if (n == 1) {
    bf16_kernel<1>(w, xp, stride, n, y, r0, r1);
  } else if (n == 2) {
    bf16_kernel<2>(w, xp, stride, n, y, r0, r1);
  } else {
    bf16_kernel<0>(w, xp, stride, n, y, r0, r1);
  }
}

void f32_rows(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  if (n == 1) {
    f32_kernel<1>(w, x, n, y, r0, r1);
  } else {
    f32_kernel<0>(w, x, n, y, r0, r1);
  }
}

int64_t find_scale_nan(const uint8_t* scales, int64_t n) {
  const __m512i nan = _mm512_set1_epi8(static_cast<char>(0xff));
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __mmask64 hit = _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(scales + i), nan);
    if (hit) return i + __builtin_ctzll(hit);
  }
  if (i < n) {
    const __mmask64 m = (1ull << (n - i)) - 1;
    const __mmask64 hit =
        _mm512_mask_cmpeq_epi8_mask(m, _mm512_maskz_loadu_epi8(m, scales + i), nan);
    if (hit) return i + __builtin_ctzll(hit);
  }
  return -1;
}

}  // namespace deltafin::kernels::detail::avx512
