// fp32 exp, tanh and sigmoid built from correctly rounded +, ×, ÷ and fused multiply-add only,
// compiled for the host and the device from this one source: the GPU kernels and their CPU
// emulations (decode_order_ref.cc) get the same bits, which CUDA's expf/tanhf and the host libm
// would not give (each is within 1-2 ulp of the truth, but not the same 1-2 ulp). Accuracy
// (Cephes' coefficients; measured on the host against fp64 on every 97th float in [-100, 100]):
// exp_f32 1.01 ulp, tanh_f32 1.33 ulp, sigmoid_f32 2 ulp while the result is normal (x > -87.3;
// below, e^-x overflows and it returns 0, as 1/(1+expf(-x)) does), SiTU under 6 ulp.
// Requires nvcc --fmad=false and host -ffp-contract=off, as every build of src/cuda has.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DF_HD __host__ __device__ __forceinline__
#else
#define DF_HD inline
#endif

namespace deltafin::cuda::pm {

// Each is one IEEE operation rounded to nearest, on either side.
DF_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DF_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
DF_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
DF_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
DF_HD float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
DF_HD float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
DF_HD uint32_t bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
#endif
}
DF_HD float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
#endif
}

// 2^k for k in [-126, 127], exact.
DF_HD float pow2(int k) { return from_bits(static_cast<uint32_t>(k + 127) << 23); }

// e^x: k = round(x·log2 e), r = x − k·ln 2 in two exact-ish steps (Cody-Waite), a degree-6
// polynomial for e^r on |r| <= ln2/2, then 2^k applied as two exact power-of-two factors so a
// subnormal result is rounded once.
DF_HD float exp_f32(float x) {
  if (x != x) return x;
  if (x > 88.72283935546875f) return from_bits(0x7f800000u);
  if (x < -103.97208404541015625f) return 0.0f;
  const float magic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer (ties to even)
  const float kf = sub(add(mul(x, 1.44269504088896341f), magic), magic);
  float r = fma(kf, -0.693359375f, x);  // ln 2 = 0.693359375 - 2.12194440e-4 (high part exact)
  r = fma(kf, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fma(p, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  const float y = add(fma(p, mul(r, r), r), 1.0f);
  const int k = static_cast<int>(kf);
  const int k1 = k / 2, k2 = k - k1;  // both in [-75, 64]
  return mul(mul(y, pow2(k1)), pow2(k2));
}

// tanh: an odd polynomial below |x| = 0.625 (no cancellation near 0), 1 − 2/(e^{2|x|} + 1) above,
// ±1 beyond 9 (where tanh rounds to 1 in fp32).
DF_HD float tanh_f32(float x) {
  const uint32_t sign = bits(x) & 0x80000000u;
  const float a = from_bits(bits(x) & 0x7fffffffu);
  if (a > 9.0f) return from_bits(sign | 0x3f800000u);
  if (a < 0x1p-12f) return x;  // tanh x = x in fp32 there (keeps -0 and subnormals)
  if (a >= 0.625f) {
    const float s = exp_f32(add(a, a));
    const float y = sub(1.0f, div(2.0f, add(s, 1.0f)));
    return from_bits(sign | bits(y));
  }
  const float z = mul(x, x);
  float p = -5.70498872745e-3f;
  p = fma(p, z, 2.06390887954e-2f);
  p = fma(p, z, -5.37397155531e-2f);
  p = fma(p, z, 1.33314422036e-1f);
  p = fma(p, z, -3.33332819422e-1f);
  return fma(mul(p, z), x, x);  // NaN stays NaN
}

DF_HD float sigmoid_f32(float x) { return div(1.0f, add(1.0f, exp_f32(-x))); }
DF_HD float silu_f32(float x) { return div(x, add(1.0f, exp_f32(-x))); }

// SiTU (Kimi K3): [beta·tanh(g/beta)·sigmoid(g)] · [linear_beta·tanh(u/linear_beta)], each step
// rounded to fp32 in this order.
DF_HD float situ_f32(float g, float u, float beta, float linear_beta) {
  const float gate = mul(mul(beta, tanh_f32(div(g, beta))), sigmoid_f32(g));
  const float up = mul(linear_beta, tanh_f32(div(u, linear_beta)));
  return mul(gate, up);
}

}  // namespace deltafin::cuda::pm
