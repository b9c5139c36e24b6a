// AVX2 matmul. MXFP4: without a 16-entry float lookup, nibbles are looked up with vpshufb as small
// integers (2 x E2M1, exact in int8), widened with vpmovsxbd from a stack copy and converted; the
// factor 1/2 rides on the block scale. Each 16-byte block then feeds 4 vectors of 8 elements
// (even elements of its first and second 8 bytes, then odd ones) against activations laid out to
// match. BF16: shift and mask split a dword into its even and odd element. Batches run in register
// blocks of up to 4 activation rows with the same per-row sequence of operations as n = 1.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/batch_blocks.h"
#include "kernels/matmul_variant.h"
#include "quant/e8m0.h"

namespace deltafin::kernels::detail::avx2 {
namespace {

constexpr int64_t kMxGroupElems = 64;  // elements per 32 packed bytes (two blocks)
constexpr int64_t kBfChunkElems = 16;  // bf16 elements per 32 bytes
constexpr int kBlockRows = 4;          // activation rows per register block (16 ymm registers)
// Weights are prefetched this far ahead (see matmul_avx512.cc for the measurement).
constexpr int64_t kPrefetchBytes = 4096;

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// 2^(s - 128): the E8M0 scale times the 1/2 that turns the looked-up 2 x E2M1 back into E2M1
// (exact: 2^-128 is a representable subnormal). NaN for s = 255.
const float* half_scale_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int s = 0; s < 256; ++s) t[s] = quant::e8m0_table()[s] * 0.5f;
    return t;
  }();
  return table.data();
}

// Element of group-local vector v (0..7), lane l: vectors 4b..4b+3 belong to block b and hold the
// low nibbles of bytes 0-7, of bytes 8-15, then the high nibbles of bytes 0-7 and 8-15.
int64_t mxfp4_element(int64_t v, int64_t l) {
  const int64_t block = v / 4, t = v % 4;
  const int64_t byte = 16 * block + 8 * (t % 2) + l;
  return 2 * byte + t / 2;
}

// x [n, cols] -> xp [n, groups * 64] in the order above, zero past cols.
void prepare_mxfp4_x(const float* x, int64_t n, int64_t cols, int64_t stride, float* xp) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < stride / kMxGroupElems; ++g)
      for (int64_t v = 0; v < 8; ++v)
        for (int64_t l = 0; l < 8; ++l) {
          const int64_t c = g * kMxGroupElems + mxfp4_element(v, l);
          xp[i * stride + g * kMxGroupElems + 8 * v + l] = c < cols ? x[i * cols + c] : 0.0f;
        }
}

template <int kB>
void mxfp4_row(const uint8_t* wp, const uint8_t* sp, int64_t n_blocks, const float* xp,
               int64_t x_stride, float* y, int64_t y_stride) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,  //
                                       0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const float* half_scale = half_scale_table();
  const float* xr[kB];
  __m256 acc[kB];
  for (int i = 0; i < kB; ++i) {
    acc[i] = _mm256_setzero_ps();
    xr[i] = xp + i * x_stride;
  }
  alignas(32) int8_t codes[64];  // looked-up low nibbles (32 bytes), then high nibbles
  const int64_t n_groups = (n_blocks + 1) / 2;
  for (int64_t g = 0; g < n_groups; ++g) {
    const int64_t blocks_here = std::min<int64_t>(2, n_blocks - 2 * g);
    _mm_prefetch(reinterpret_cast<const char*>(wp + 32 * g) + kPrefetchBytes, _MM_HINT_T0);
    __m256i q;
    if (blocks_here == 2) {
      q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 32 * g));
    } else {
      q = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wp + 32 * g)));
    }
    const __m256i lo = _mm256_and_si256(q, low_nibbles);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low_nibbles);
    _mm256_store_si256(reinterpret_cast<__m256i*>(codes), _mm256_shuffle_epi8(lut, lo));
    _mm256_store_si256(reinterpret_cast<__m256i*>(codes + 32), _mm256_shuffle_epi8(lut, hi));
    // Keeps the codes in memory: vpmovsxbd widens 8 of them straight from a load, where GCC would
    // otherwise extract them through general registers.
    asm volatile("" ::: "memory");
    for (int64_t b = 0; b < blocks_here; ++b) {
      const int64_t off = g * kMxGroupElems + 32 * b;
      const __m256 sc = _mm256_broadcast_ss(half_scale + sp[2 * g + b]);
      // Vector t of block b: codes at 16b + 8(t % 2) + 32(t / 2).
      auto vals = [&](int t) {
        const auto* at =
            reinterpret_cast<const __m128i*>(codes + 16 * b + 8 * (t % 2) + 32 * (t / 2));
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(at)));
      };
      __m256 p[kB];
      const __m256 v0 = vals(0);
      for (int i = 0; i < kB; ++i) p[i] = _mm256_mul_ps(v0, _mm256_load_ps(xr[i] + off));
      for (int t = 1; t < 4; ++t) {
        const __m256 v = vals(t);
        for (int i = 0; i < kB; ++i)
          p[i] = _mm256_fmadd_ps(v, _mm256_load_ps(xr[i] + off + 8 * t), p[i]);
      }
      for (int i = 0; i < kB; ++i) acc[i] = _mm256_fmadd_ps(p[i], sc, acc[i]);
    }
  }
  for (int i = 0; i < kB; ++i) y[i * y_stride] = hsum(acc[i]);
}

// x [n, cols] -> xp [n, chunks * 16]: chunk c holds x[16c + 2j] in lanes 0..7 and x[16c + 2j + 1]
// in lanes 8..15, zero past cols.
void prepare_bf16_x(const float* x, int64_t n, int64_t cols, int64_t stride, float* xp) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < stride / kBfChunkElems; ++c)
      for (int64_t j = 0; j < 8; ++j) {
        const int64_t even = c * kBfChunkElems + 2 * j;
        float* out = xp + i * stride + c * kBfChunkElems;
        out[j] = even < cols ? x[i * cols + even] : 0.0f;
        out[8 + j] = even + 1 < cols ? x[i * cols + even + 1] : 0.0f;
      }
}

template <int kB>
void bf16_row(const uint16_t* wr, int64_t cols, const float* xp, int64_t x_stride, float* y,
              int64_t y_stride) {
  const __m256i high_half = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const float* xr[kB];
  __m256 acc_even[kB], acc_odd[kB];
  for (int i = 0; i < kB; ++i) {
    acc_even[i] = acc_odd[i] = _mm256_setzero_ps();
    xr[i] = xp + i * x_stride;
  }
  auto chunk = [&](__m256i q, int64_t c) {
    const int64_t off = c * kBfChunkElems;
    const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(q, 16));
    const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(q, high_half));
    for (int i = 0; i < kB; ++i) {
      acc_even[i] = _mm256_fmadd_ps(even, _mm256_load_ps(xr[i] + off), acc_even[i]);
      acc_odd[i] = _mm256_fmadd_ps(odd, _mm256_load_ps(xr[i] + off + 8), acc_odd[i]);
    }
  };
  const int64_t full_chunks = cols / kBfChunkElems, tail = cols % kBfChunkElems;
  for (int64_t c = 0; c < full_chunks; ++c) {
    if (c % 2 == 0)  // one prefetch per 64-byte line
      _mm_prefetch(reinterpret_cast<const char*>(wr + c * kBfChunkElems) + kPrefetchBytes,
                   _MM_HINT_T0);
    chunk(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + c * kBfChunkElems)), c);
  }
  if (tail > 0) {
    uint16_t last[kBfChunkElems] = {};
    std::memcpy(last, wr + full_chunks * kBfChunkElems, tail * sizeof(uint16_t));
    chunk(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(last)), full_chunks);
  }
  for (int i = 0; i < kB; ++i) y[i * y_stride] = hsum(_mm256_add_ps(acc_even[i], acc_odd[i]));
}

template <int kB>
void f32_row(const float* wr, int64_t cols, const float* x, float* y, int64_t y_stride) {
  const int64_t full = cols / 8, tail = cols % 8;
  __m256 acc[kB];
  for (int i = 0; i < kB; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < full; ++c) {
    const __m256 wv = _mm256_loadu_ps(wr + 8 * c);
    for (int i = 0; i < kB; ++i)
      acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * cols + 8 * c), acc[i]);
  }
  if (tail > 0) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(tail)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 wv = _mm256_maskload_ps(wr + 8 * full, m);
    for (int i = 0; i < kB; ++i)
      acc[i] = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x + i * cols + 8 * full, m), acc[i]);
  }
  for (int i = 0; i < kB; ++i) y[i * y_stride] = hsum(acc[i]);
}

// Int8: 8 weights widened to fp32 per step (vpmovsxbd + vcvtdq2ps) against plain activations,
// into four accumulators per activation row (step c into accumulator c % 4, so the FMA chains
// overlap); the row's scale multiplies the summed products once, after the horizontal sum. Blocks
// of kInt8BlockRows rows keep 12 accumulators in the 16 ymm registers; the per-row sequence does
// not depend on the block size.
constexpr int kInt8BlockRows = 3;
template <int kB>
void int8_row(const int8_t* wr, float scale, int64_t cols, const float* x, float* y,
              int64_t y_stride) {
  const int64_t full = cols / 8, tail = cols % 8;
  __m256 acc[kB][4];
  for (int i = 0; i < kB; ++i)
    for (int k = 0; k < 4; ++k) acc[i][k] = _mm256_setzero_ps();
  auto widen = [](const int8_t* q) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
  };
  for (int64_t c = 0; c < full; ++c) {
    if (c % 8 == 0)  // one prefetch per 64-byte line
      _mm_prefetch(reinterpret_cast<const char*>(wr + 8 * c) + kPrefetchBytes, _MM_HINT_T0);
    const __m256 wv = widen(wr + 8 * c);
    for (int i = 0; i < kB; ++i)
      acc[i][c % 4] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * cols + 8 * c), acc[i][c % 4]);
  }
  if (tail > 0) {
    int8_t last[8] = {};
    std::memcpy(last, wr + 8 * full, tail);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(tail)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 wv = widen(last);
    for (int i = 0; i < kB; ++i)
      acc[i][full % 4] =
          _mm256_fmadd_ps(wv, _mm256_maskload_ps(x + i * cols + 8 * full, m), acc[i][full % 4]);
  }
  for (int i = 0; i < kB; ++i) {
    const __m256 sum =
        _mm256_add_ps(_mm256_add_ps(acc[i][0], acc[i][1]), _mm256_add_ps(acc[i][2], acc[i][3]));
    y[i * y_stride] = hsum(sum) * scale;
  }
}

}  // namespace

void mxfp4_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const int64_t n_blocks = w.cols / 32;
  const int64_t stride = (n_blocks + 1) / 2 * kMxGroupElems;
  float* xp = thread_scratch(n * stride);
  prepare_mxfp4_x(x, n, w.cols, stride, xp);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t i0 = 0; i0 < n; i0 += kBlockRows)
      with_block<kBlockRows>(n - i0, [&](auto b) {
        mxfp4_row<decltype(b)::value>(w.packed + r * (w.cols / 2), w.scales + r * n_blocks,
                                      n_blocks, xp + i0 * stride, stride, y + i0 * w.rows + r,
                                      w.rows);
      });
}

void bf16_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const int64_t stride = (w.cols + kBfChunkElems - 1) / kBfChunkElems * kBfChunkElems;
  float* xp = thread_scratch(n * stride);
  prepare_bf16_x(x, n, w.cols, stride, xp);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t i0 = 0; i0 < n; i0 += kBlockRows)
      with_block<kBlockRows>(n - i0, [&](auto b) {
        bf16_row<decltype(b)::value>(w.data + r * w.cols, w.cols, xp + i0 * stride, stride,
                                     y + i0 * w.rows + r, w.rows);
      });
}

void f32_rows(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t i0 = 0; i0 < n; i0 += 8)
      with_block<8>(n - i0, [&](auto b) {
        f32_row<decltype(b)::value>(w.data + r * w.cols, w.cols, x + i0 * w.cols,
                                    y + i0 * w.rows + r, w.rows);
      });
}

void int8_rows(const Int8Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    float scale;
    std::memcpy(&scale, w.scales + 4 * r, 4);
    for (int64_t i0 = 0; i0 < n; i0 += kInt8BlockRows)
      with_block<kInt8BlockRows>(n - i0, [&](auto b) {
        int8_row<decltype(b)::value>(w.q + r * w.cols, scale, w.cols, x + i0 * w.cols,
                                     y + i0 * w.rows + r, w.rows);
      });
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
