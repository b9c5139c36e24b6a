// A translation unit compiled with the kernels module's include view (tests/layering/): it builds
// as is, and must not build when DELTAFIN_PROBE_FORBIDDEN names a header across a forbidden arrow
// (tests/layering/CMakeLists.txt picks one of experts/, which uses kernels, never the reverse).
#include "quant/bf16.h"
#ifdef DELTAFIN_PROBE_FORBIDDEN
#include DELTAFIN_PROBE_FORBIDDEN
#endif

namespace deltafin::kernels {

float layering_probe(uint16_t bits) { return quant::bf16_to_f32(bits); }

}  // namespace deltafin::kernels
