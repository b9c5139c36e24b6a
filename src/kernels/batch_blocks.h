// Internal: dispatch of a runtime batch-block size to a compile-time one, so that the SIMD kernels
// keep one accumulator register per activation row of a block.
#pragma once

#include <cstdint>
#include <type_traits>

namespace deltafin::kernels::detail {

// Calls f(std::integral_constant<int, b>) for 1 <= b <= kMax (b is clamped to kMax); kMax <= 8.
// In the switch b < kMax, so each `kMax > b ? b : 1` is b; the 1 only keeps the template valid.
template <int kMax, typename F>
void with_block(int64_t b, F&& f) {
  static_assert(kMax >= 1 && kMax <= 8);
  if (b >= kMax) return f(std::integral_constant<int, kMax>{});
  switch (b) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, (kMax > 2 ? 2 : 1)>{});
    case 3:
      return f(std::integral_constant<int, (kMax > 3 ? 3 : 1)>{});
    case 4:
      return f(std::integral_constant<int, (kMax > 4 ? 4 : 1)>{});
    case 5:
      return f(std::integral_constant<int, (kMax > 5 ? 5 : 1)>{});
    case 6:
      return f(std::integral_constant<int, (kMax > 6 ? 6 : 1)>{});
    default:
      return f(std::integral_constant<int, (kMax > 7 ? 7 : 1)>{});
  }
}

}  // namespace deltafin::kernels::detail
