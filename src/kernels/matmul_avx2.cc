// AVX2 matmul, the same scheme as matmul_avx512.cc at 8 lanes. MXFP4: 32 packed bytes (2 blocks,
// 64 elements) as 8 dwords; nibble k of each dword (elements 8j + k) is looked up by magnitude with
// vpermps (8 entries, 3 index bits) and gets its sign from bit 3 moved to bit 31. BF16: shift and
// mask split a dword into its even and odd element.
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul_variant.h"
#include "quant/e8m0.h"

namespace deltafin::kernels::detail::avx2 {
namespace {

constexpr int64_t kMxGroupElems = 64;  // elements per 32 packed bytes
constexpr int64_t kBfChunkElems = 16;  // bf16 elements per 32 bytes

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// x [n, cols] -> xp [n, groups * 64]: within group g, vector k lane j holds x[64g + 8j + k].
float* prepare_mxfp4_x(const float* x, int64_t n, int64_t cols, int64_t* stride) {
  const int64_t n_groups = (cols + kMxGroupElems - 1) / kMxGroupElems;
  *stride = n_groups * kMxGroupElems;
  float* xp = thread_scratch(n * *stride);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * cols;
    float* out = xp + i * *stride;
    for (int64_t g = 0; g < n_groups; ++g)
      for (int64_t k = 0; k < 8; ++k)
        for (int64_t j = 0; j < 8; ++j) {
          const int64_t c = g * kMxGroupElems + 8 * j + k;
          out[g * kMxGroupElems + 8 * k + j] = c < cols ? xi[c] : 0.0f;
        }
  }
  return xp;
}

template <int kN>
void mxfp4_kernel(const Mxfp4Matrix& w, const float* xp, int64_t x_stride, int64_t n_runtime,
                  float* y, int64_t r0, int64_t r1) {
  const int64_t n = kN > 0 ? kN : n_runtime;
  const int64_t row_bytes = w.cols / 2, n_blocks = w.cols / 32;
  const int64_t full_groups = n_blocks / 2, tail_blocks = n_blocks % 2;
  const __m256 magnitude = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256i sign_bit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const float* scale_table = quant::e8m0_table();
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wp = w.packed + r * row_bytes;
    const uint8_t* sp = w.scales + r * n_blocks;
    __m256 acc[kN > 0 ? kN : kMatmulMaxBatch];
    for (int64_t i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
    auto group = [&](__m256i q, __m256 sc, int64_t g) {
      __m256 v[8];
      for (int k = 0; k < 8; ++k) {
        const __m256 mag = _mm256_permutevar8x32_ps(magnitude, _mm256_srli_epi32(q, 4 * k));
        const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(q, 28 - 4 * k), sign_bit);
        v[k] = _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
      }
      for (int64_t i = 0; i < n; ++i) {
        const float* xg = xp + i * x_stride + g * kMxGroupElems;
        __m256 p = _mm256_mul_ps(v[0], _mm256_load_ps(xg));
        for (int k = 1; k < 8; ++k) p = _mm256_fmadd_ps(v[k], _mm256_load_ps(xg + 8 * k), p);
        acc[i] = _mm256_fmadd_ps(p, sc, acc[i]);
      }
    };
    for (int64_t g = 0; g < full_groups; ++g) {
      const __m256 sc = _mm256_set_m128(_mm_set1_ps(scale_table[sp[2 * g + 1]]),
                                        _mm_set1_ps(scale_table[sp[2 * g]]));
      group(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 32 * g)), sc, g);
    }
    if (tail_blocks > 0) {
      // Lanes 4..7 load zero codes (value +0) against zero activations; their scale is never NaN.
      const __m256 sc =
          _mm256_set_m128(_mm_set1_ps(1.0f), _mm_set1_ps(scale_table[sp[2 * full_groups]]));
      const __m256i m = _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0);
      group(_mm256_maskload_epi32(reinterpret_cast<const int*>(wp + 32 * full_groups), m), sc,
            full_groups);
    }
    for (int64_t i = 0; i < n; ++i) y[i * w.rows + r] = hsum(acc[i]);
  }
}

// x [n, cols] -> xp [n, chunks * 16]: chunk c holds x[16c + 2j] in lanes 0..7 and x[16c + 2j + 1]
// in lanes 8..15, zero past cols.
float* prepare_bf16_x(const float* x, int64_t n, int64_t cols, int64_t* stride) {
  const int64_t n_chunks = (cols + kBfChunkElems - 1) / kBfChunkElems;
  *stride = n_chunks * kBfChunkElems;
  float* xp = thread_scratch(n * *stride);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * cols;
    float* out = xp + i * *stride;
    for (int64_t c = 0; c < n_chunks; ++c)
      for (int64_t j = 0; j < 8; ++j) {
        const int64_t even = c * kBfChunkElems + 2 * j;
        out[c * kBfChunkElems + j] = even < cols ? xi[even] : 0.0f;
        out[c * kBfChunkElems + 8 + j] = even + 1 < cols ? xi[even + 1] : 0.0f;
      }
  }
  return xp;
}

template <int kN>
void bf16_kernel(const Bf16Matrix& w, const float* xp, int64_t x_stride, int64_t n_runtime,
                 float* y, int64_t r0, int64_t r1) {
  const int64_t n = kN > 0 ? kN : n_runtime;
  const int64_t full_chunks = w.cols / kBfChunkElems, tail = w.cols % kBfChunkElems;
  const __m256i high_half = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* wr = w.data + r * w.cols;
    __m256 acc_even[kN > 0 ? kN : kMatmulMaxBatch], acc_odd[kN > 0 ? kN : kMatmulMaxBatch];
    for (int64_t i = 0; i < n; ++i) acc_even[i] = acc_odd[i] = _mm256_setzero_ps();
    auto chunk = [&](__m256i q, int64_t c) {
      const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(q, 16));
      const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(q, high_half));
      for (int64_t i = 0; i < n; ++i) {
        const float* xc = xp + i * x_stride + c * kBfChunkElems;
        acc_even[i] = _mm256_fmadd_ps(even, _mm256_load_ps(xc), acc_even[i]);
        acc_odd[i] = _mm256_fmadd_ps(odd, _mm256_load_ps(xc + 8), acc_odd[i]);
      }
    };
    for (int64_t c = 0; c < full_chunks; ++c)
      chunk(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + c * kBfChunkElems)), c);
    if (tail > 0) {
      uint16_t last[kBfChunkElems] = {};
      std::memcpy(last, wr + full_chunks * kBfChunkElems, tail * sizeof(uint16_t));
      chunk(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(last)), full_chunks);
    }
    for (int64_t i = 0; i < n; ++i)
      y[i * w.rows + r] = hsum(_mm256_add_ps(acc_even[i], acc_odd[i]));
  }
}

template <int kN>
void f32_kernel(const F32Matrix& w, const float* x, int64_t n_runtime, float* y, int64_t r0,
                int64_t r1) {
  const int64_t n = kN > 0 ? kN : n_runtime;
  const int64_t full = w.cols / 8, tail = w.cols % 8;
  const __m256i tail_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(tail)),
                                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr = w.data + r * w.cols;
    __m256 acc[kN > 0 ? kN : kMatmulMaxBatch];
    for (int64_t i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < full; ++c) {
      const __m256 wv = _mm256_loadu_ps(wr + 8 * c);
      for (int64_t i = 0; i < n; ++i)
        acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * w.cols + 8 * c), acc[i]);
    }
    if (tail > 0) {
      const __m256 wv = _mm256_maskload_ps(wr + 8 * full, tail_mask);
      for (int64_t i = 0; i < n; ++i)
        acc[i] =
            _mm256_fmadd_ps(wv, _mm256_maskload_ps(x + i * w.cols + 8 * full, tail_mask), acc[i]);
    }
    for (int64_t i = 0; i < n; ++i) y[i * w.rows + r] = hsum(acc[i]);
  }
}

}  // namespace

void mxfp4_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  int64_t stride;
  const float* xp = prepare_mxfp4_x(x, n, w.cols, &stride);
  if (n == 1) {
    mxfp4_kernel<1>(w, xp, stride, n, y, r0, r1);
  } else {
    mxfp4_kernel<0>(w, xp, stride, n, y, r0, r1);
  }
}

void bf16_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  int64_t stride;
  const float* xp = prepare_bf16_x(x, n, w.cols, &stride);
  if (n == 1) {
    bf16_kernel<1>(w, xp, stride, n, y, r0, r1);
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
  const __m256i nan = _mm256_set1_epi8(static_cast<char>(0xff));
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + i));
    const unsigned hit = static_cast<unsigned>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, nan)));
    if (hit) return i + __builtin_ctz(hit);
  }
  for (; i < n; ++i)
    if (scales[i] == 0xff) return i;
  return -1;
}

}  // namespace deltafin::kernels::detail::avx2
