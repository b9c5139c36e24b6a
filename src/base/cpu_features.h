// What the CPU can run, detected once at startup, and which kernel variant family to use.
// DELTAFIN_ISA=ref|avx2|avx512 forces a lower variant (tests use it to run every path).
#pragma once

#include <string>

namespace deltafin::base {

enum class Isa { kRef = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, BW, VL, DQ, with OS support for ZMM state
  bool avx512_bf16 = false;
};

const CpuFeatures& cpu_features();

// Best ISA the CPU supports, lowered by DELTAFIN_ISA when set.
Isa selected_isa();
// Every ISA this CPU can run, from kRef upward (tests iterate over it).
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);
std::string cpu_summary();

}  // namespace deltafin::base
