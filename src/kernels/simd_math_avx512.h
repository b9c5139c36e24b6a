// Vector exp/tanh/sigmoid for the AVX-512 activation kernels, accurate to about 1-2 ulp (the
// model's accuracy budget against its float64 oracle needs a few ulp at most). Include only from
// *_avx512.cc.
#pragma once

#include <immintrin.h>

namespace deltafin::kernels::detail::avx512 {

// exp(x): x = n ln2 + r with ln2 split in two (Cody-Waite), Cephes expf polynomial on
// |r| <= ln2/2, then vscalefps applies 2^n with one rounding, giving Inf, subnormals and 0 exactly
// where they belong. NaN propagates (min/max return their second operand on NaN).
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, n);
}

// tanh(x): Cephes tanhf. |x| < 0.625 uses an odd polynomial (no cancellation near 0); larger |x|
// uses 1 - 2 / (exp(2|x|) + 1) with the sign restored, saturating to ±1 (exp overflow gives 1).
inline __m512 tanh_ps(__m512 x) {
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 z = _mm512_andnot_ps(sign_mask, x);
  const __m512 s = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, s), x, x);
  const __m512 t = exp_ps(_mm512_add_ps(z, z));
  const __m512 big_abs =
      _mm512_sub_ps(_mm512_set1_ps(1.0f),
                    _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(t, _mm512_set1_ps(1.0f))));
  const __m512 big = _mm512_or_ps(big_abs, _mm512_and_ps(x, sign_mask));
  const __mmask16 use_big = _mm512_cmp_ps_mask(z, _mm512_set1_ps(0.625f), _CMP_GE_OQ);
  return _mm512_mask_blend_ps(use_big, small, big);
}

// 1 / (1 + exp(-x)); exp overflow for very negative x gives exactly 0.
inline __m512 sigmoid_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

}  // namespace deltafin::kernels::detail::avx512
