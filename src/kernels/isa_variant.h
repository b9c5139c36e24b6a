// Internal: picks one of a kernel family's per-ISA tables (ref, AVX2, AVX-512) for an ISA the CPU
// supports. Shared by every family so the selection rule lives in one place.
#pragma once

#include "base/cpu_features.h"
#include "base/error.h"

namespace deltafin::kernels::detail {

template <typename Variant>
const Variant& pick_isa_variant(base::Isa isa, const Variant& ref, const Variant& avx2,
                                const Variant& avx512) {
  DF_ASSERT(base::isa_supported(isa));
  switch (isa) {
    case base::Isa::kAvx512:
      return avx512;
    case base::Isa::kAvx2:
      return avx2;
    case base::Isa::kRef:
      break;
  }
  return ref;
}

}  // namespace deltafin::kernels::detail
