// Activation front end: picks the variant once and forwards.
#include "kernels/activation.h"

#include "kernels/activation_variant.h"
#include "kernels/isa_variant.h"

namespace deltafin::kernels {
namespace detail {

const ActivationVariant& activation_variant(base::Isa isa) {
  static const ActivationVariant kRef{ref::rmsnorm_f32, ref::rmsnorm_bf16, ref::situ_glu,
                                      ref::silu_glu, ref::softmax};
  static const ActivationVariant kAvx2{avx2::rmsnorm_f32, avx2::rmsnorm_bf16, avx2::situ_glu,
                                       avx2::silu_glu, avx2::softmax};
  static const ActivationVariant kAvx512{avx512::rmsnorm_f32, avx512::rmsnorm_bf16,
                                         avx512::situ_glu, avx512::silu_glu, avx512::softmax};
  return pick_isa_variant(isa, kRef, kAvx2, kAvx512);
}

namespace {
const ActivationVariant& selected() {
  static const ActivationVariant& v = activation_variant(base::selected_isa());
  return v;
}
}  // namespace

}  // namespace detail

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  if (n > 0) detail::selected().rmsnorm_f32(x, w, n, eps, y);
}
void rmsnorm(const float* x, const uint16_t* w_bf16, int64_t n, float eps, float* y) {
  if (n > 0) detail::selected().rmsnorm_bf16(x, w_bf16, n, eps, y);
}
void rmsnorm_rows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) rmsnorm(x + r * n, w, n, eps, y + r * n);
}
void situ_glu(const float* g, const float* u, int64_t n, float beta, float linear_beta, float* y) {
  if (n > 0) detail::selected().situ_glu(g, u, n, beta, linear_beta, y);
}
void silu_glu(const float* g, const float* u, int64_t n, float* y) {
  if (n > 0) detail::selected().silu_glu(g, u, n, y);
}
void softmax(float* x, int64_t n) {
  if (n > 0) detail::selected().softmax(x, n);
}

}  // namespace deltafin::kernels
