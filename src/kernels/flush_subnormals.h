// Internal: flushes subnormal results and inputs to zero on this thread while in scope. Long
// products of decay factors (KDA: up to e^-5 per token) sink through the subnormal range, where x86
// arithmetic is ~100x slower; values below 1.2e-38 change nothing at fp32 resolution.
#pragma once

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace deltafin::kernels::detail {

class FlushSubnormals {
 public:
#if defined(__SSE__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ | DAZ
  ~FlushSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

}  // namespace deltafin::kernels::detail
