// Internal: the per-ISA activation kernels and the table that picks them (tests iterate over it).
#pragma once

#include <cmath>
#include <cstdint>

#include "base/cpu_features.h"

namespace deltafin::kernels::detail {

struct ActivationVariant {
  void (*rmsnorm_f32)(const float* x, const float* w, int64_t n, float eps, float* y);
  void (*rmsnorm_bf16)(const float* x, const uint16_t* w, int64_t n, float eps, float* y);
  void (*situ_glu)(const float* g, const float* u, int64_t n, float beta, float linear_beta,
                   float* y);
  void (*silu_glu)(const float* g, const float* u, int64_t n, float* y);
  void (*softmax)(float* x, int64_t n);
};

#define DELTAFIN_ACTIVATION_VARIANT_DECL(ns)                                              \
  namespace ns {                                                                          \
  void rmsnorm_f32(const float* x, const float* w, int64_t n, float eps, float* y);       \
  void rmsnorm_bf16(const float* x, const uint16_t* w, int64_t n, float eps, float* y);   \
  void situ_glu(const float* g, const float* u, int64_t n, float beta, float linear_beta, \
                float* y);                                                                \
  void silu_glu(const float* g, const float* u, int64_t n, float* y);                     \
  void softmax(float* x, int64_t n);                                                      \
  }
DELTAFIN_ACTIVATION_VARIANT_DECL(ref)
DELTAFIN_ACTIVATION_VARIANT_DECL(avx2)
DELTAFIN_ACTIVATION_VARIANT_DECL(avx512)
#undef DELTAFIN_ACTIVATION_VARIANT_DECL

const ActivationVariant& activation_variant(base::Isa isa);

// 1 / sqrt(sum_squares / n + eps) rounded to f32: shared so every variant scales identically.
inline float rms_scale(double sum_squares, int64_t n, float eps) {
  return static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(n) + eps));
}

}  // namespace deltafin::kernels::detail
