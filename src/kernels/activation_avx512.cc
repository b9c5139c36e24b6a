// AVX-512 activations: 16 lanes, masked loads and stores for the tail, fp64 sums for the RMSNorm
// scale and the softmax denominator (so they match the reference to about the last bit).
// GCC 12 flags its own AVX-512 intrinsics (the _mm512_undefined_* they start from) as
// uninitialized after inlining: GCC bug 105593, fixed in GCC 13.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <limits>

#include "kernels/activation_variant.h"
#include "kernels/simd_math_avx512.h"

namespace deltafin::kernels::detail::avx512 {
namespace {

__mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff)
                         : static_cast<__mmask16>((1u << remaining) - 1);
}

double sum_squares(const float* x, int64_t n) {
  __m512d acc_lo = _mm512_setzero_pd(), acc_hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    acc_lo = _mm512_fmadd_pd(lo, lo, acc_lo);
    acc_hi = _mm512_fmadd_pd(hi, hi, acc_hi);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(acc_lo, acc_hi));
}

// Applies f(a, b) -> vector over n elements of two inputs, masked at the tail.
template <typename F>
void binary_map(const float* a, const float* b, int64_t n, float* y, F f) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m,
                          f(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

}  // namespace

void rmsnorm_f32(const float* x, const float* w, int64_t n, float eps, float* y) {
  const __m512 r = _mm512_set1_ps(rms_scale(sum_squares(x, n), n, eps));
  binary_map(x, w, n, y,
             [&](__m512 xv, __m512 wv) { return _mm512_mul_ps(wv, _mm512_mul_ps(xv, r)); });
}

void rmsnorm_bf16(const float* x, const uint16_t* w, int64_t n, float eps, float* y) {
  const __m512 r = _mm512_set1_ps(rms_scale(sum_squares(x, n), n, eps));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i wb = _mm256_maskz_loadu_epi16(m, w + i);
    const __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(wb), 16));
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(wv, _mm512_mul_ps(xv, r)));
  }
}

void situ_glu(const float* g, const float* u, int64_t n, float beta, float linear_beta, float* y) {
  const __m512 b = _mm512_set1_ps(beta), lb = _mm512_set1_ps(linear_beta);
  binary_map(g, u, n, y, [&](__m512 gv, __m512 uv) {
    const __m512 gate =
        _mm512_mul_ps(_mm512_mul_ps(b, tanh_ps(_mm512_div_ps(gv, b))), sigmoid_ps(gv));
    const __m512 up = _mm512_mul_ps(lb, tanh_ps(_mm512_div_ps(uv, lb)));
    return _mm512_mul_ps(gate, up);
  });
}

void silu_glu(const float* g, const float* u, int64_t n, float* y) {
  binary_map(g, u, n, y, [](__m512 gv, __m512 uv) {
    return _mm512_mul_ps(_mm512_mul_ps(gv, sigmoid_ps(gv)), uv);
  });
}

void softmax(float* x, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mv = neg_inf;
  for (int64_t i = 0; i < n; i += 16)
    mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(neg_inf, tail_mask(n - i), x + i));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  // The sum runs in fp64: over long rows (attention over many positions) an f32 sum drifts by
  // more than the exp error.
  __m512d sum_lo = _mm512_setzero_pd(), sum_hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, k, x + i), m));
    sum_lo = _mm512_add_pd(sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    sum_hi = _mm512_add_pd(
        sum_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    _mm512_mask_storeu_ps(x + i, k, e);
  }
  const __m512 inv =
      _mm512_set1_ps(static_cast<float>(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(sum_lo, sum_hi))));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
  }
}

}  // namespace deltafin::kernels::detail::avx512
