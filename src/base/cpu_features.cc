// CPUID/XGETBV detection. AVX-512 needs both the CPUID bits and the OS enabling ZMM state in XCR0.
#include "base/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace deltafin::base {
namespace {

uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  const bool fma = ecx & (1u << 12);
  const bool f16c = ecx & (1u << 29);
  if (!osxsave) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  const bool avx2 = ebx & (1u << 5);
  const bool avx512f = ebx & (1u << 16);
  const bool avx512dq = ebx & (1u << 17);
  const bool avx512bw = ebx & (1u << 30);
  const bool avx512vl = ebx & (1u << 31);
  f.avx2 = ymm_os && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_os && avx512f && avx512dq && avx512bw && avx512vl;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx))
    f.avx512_bf16 = f.avx512 && (eax & (1u << 5));
  return f;
}

Isa detect_isa() {
  const CpuFeatures& f = cpu_features();
  Isa best = f.avx512 ? Isa::kAvx512 : f.avx2 ? Isa::kAvx2 : Isa::kRef;
  if (const char* env = std::getenv("DELTAFIN_ISA")) {
    Isa wanted;
    if (std::strcmp(env, "ref") == 0) {
      wanted = Isa::kRef;
    } else if (std::strcmp(env, "avx2") == 0) {
      wanted = Isa::kAvx2;
    } else if (std::strcmp(env, "avx512") == 0) {
      wanted = Isa::kAvx512;
    } else {
      fail("DELTAFIN_ISA=", env, ": expected ref, avx2 or avx512");
    }
    if (static_cast<int>(wanted) < static_cast<int>(best)) best = wanted;
  }
  return best;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

Isa selected_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return true;
    case Isa::kAvx2:
      return cpu_features().avx2;
    case Isa::kAvx512:
      return cpu_features().avx512;
  }
  return false;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return "ref";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  return str_cat("avx2=", f.avx2 ? "yes" : "no", " avx512=", f.avx512 ? "yes" : "no",
                 " avx512_bf16=", f.avx512_bf16 ? "yes" : "no",
                 " selected=", isa_name(selected_isa()));
}

}  // namespace deltafin::base
