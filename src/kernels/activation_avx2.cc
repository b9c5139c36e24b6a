// AVX2 activations: 8 lanes; the tail goes through a small padded buffer. fp64 sums for the
// RMSNorm scale and the softmax denominator, as in the other variants.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/activation_variant.h"
#include "kernels/simd_math_avx2.h"

namespace deltafin::kernels::detail::avx2 {
namespace {

// Loads min(8, n - i) floats from p + i, the other lanes set to `fill`.
__m256 load_part(const float* p, int64_t count, float fill) {
  if (count >= 8) return _mm256_loadu_ps(p);
  alignas(32) float buf[8];
  std::fill(buf, buf + 8, fill);
  std::memcpy(buf, p, count * sizeof(float));
  return _mm256_load_ps(buf);
}

void store_part(float* p, int64_t count, __m256 v) {
  if (count >= 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  alignas(32) float buf[8];
  _mm256_store_ps(buf, v);
  std::memcpy(p, buf, count * sizeof(float));
}

double hsum_pd(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

float hmax(__m256 v) {
  const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s2, _mm_movehdup_ps(s2)));
}

double sum_squares(const float* x, int64_t n) {
  __m256d acc_lo = _mm256_setzero_pd(), acc_hi = _mm256_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = load_part(x + i, n - i, 0.0f);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc_lo = _mm256_fmadd_pd(lo, lo, acc_lo);
    acc_hi = _mm256_fmadd_pd(hi, hi, acc_hi);
  }
  return hsum_pd(_mm256_add_pd(acc_lo, acc_hi));
}

template <typename F>
void binary_map(const float* a, const float* b, int64_t n, float* y, F f) {
  for (int64_t i = 0; i < n; i += 8)
    store_part(y + i, n - i, f(load_part(a + i, n - i, 0.0f), load_part(b + i, n - i, 0.0f)));
}

}  // namespace

void rmsnorm_f32(const float* x, const float* w, int64_t n, float eps, float* y) {
  const __m256 r = _mm256_set1_ps(rms_scale(sum_squares(x, n), n, eps));
  binary_map(x, w, n, y,
             [&](__m256 xv, __m256 wv) { return _mm256_mul_ps(wv, _mm256_mul_ps(xv, r)); });
}

void rmsnorm_bf16(const float* x, const uint16_t* w, int64_t n, float eps, float* y) {
  const __m256 r = _mm256_set1_ps(rms_scale(sum_squares(x, n), n, eps));
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t count = std::min<int64_t>(8, n - i);
    uint16_t wb[8] = {};
    std::memcpy(wb, w + i, count * sizeof(uint16_t));
    const __m128i w16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb));
    const __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w16), 16));
    store_part(y + i, count, _mm256_mul_ps(wv, _mm256_mul_ps(load_part(x + i, count, 0.0f), r)));
  }
}

void situ_glu(const float* g, const float* u, int64_t n, float beta, float linear_beta, float* y) {
  const __m256 b = _mm256_set1_ps(beta), lb = _mm256_set1_ps(linear_beta);
  binary_map(g, u, n, y, [&](__m256 gv, __m256 uv) {
    const __m256 gate =
        _mm256_mul_ps(_mm256_mul_ps(b, tanh_ps(_mm256_div_ps(gv, b))), sigmoid_ps(gv));
    const __m256 up = _mm256_mul_ps(lb, tanh_ps(_mm256_div_ps(uv, lb)));
    return _mm256_mul_ps(gate, up);
  });
}

void silu_glu(const float* g, const float* u, int64_t n, float* y) {
  binary_map(g, u, n, y, [](__m256 gv, __m256 uv) {
    return _mm256_mul_ps(_mm256_mul_ps(gv, sigmoid_ps(gv)), uv);
  });
}

void softmax(float* x, int64_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  __m256 mv = _mm256_set1_ps(neg_inf);
  for (int64_t i = 0; i < n; i += 8) mv = _mm256_max_ps(mv, load_part(x + i, n - i, neg_inf));
  const __m256 m = _mm256_set1_ps(hmax(mv));
  // fp64 sum, as in the AVX-512 variant.
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(load_part(x + i, n - i, neg_inf), m));
    sum_lo = _mm256_add_pd(sum_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum_hi = _mm256_add_pd(sum_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    store_part(x + i, n - i, e);
  }
  const __m256 inv =
      _mm256_set1_ps(static_cast<float>(1.0 / hsum_pd(_mm256_add_pd(sum_lo, sum_hi))));
  for (int64_t i = 0; i < n; i += 8)
    store_part(x + i, n - i, _mm256_mul_ps(load_part(x + i, n - i, 0.0f), inv));
}

}  // namespace deltafin::kernels::detail::avx2
