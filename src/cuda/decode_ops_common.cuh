// What the decode operations' sources share (decode_ops.cu, decode_ops_mla.cu): the four-term
// fused multiply-add chain, -inf, the launch check that counts launches, and the argument checks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/gemv_launch.cuh"
#include "cuda/op_count.h"

namespace deltafin::cuda::decode_detail {

constexpr float kNegInf = -__builtin_huge_valf();

// p + a.x·b.x + a.y·b.y + a.z·b.z + a.w·b.w, one fused multiply-add at a time.
__device__ __forceinline__ float fma4(float4 a, float4 b, float p) {
  p = __fmaf_rn(a.x, b.x, p);
  p = __fmaf_rn(a.y, b.y, p);
  p = __fmaf_rn(a.z, b.z, p);
  return __fmaf_rn(a.w, b.w, p);
}

// Counts the `launches` kernels just put on the stream (op_count.h), then checks them as the
// GEMV launchers do.
inline void check_launch(const char* what, uint64_t launches = 1) {
  count_launches(launches);
  gemv::check_launch(what);
}

[[noreturn]] inline void bad(const char* what, const std::string& field, int64_t value,
                             const std::string& expected) {
  throw std::invalid_argument(std::string(what) + ": " + field + " is " + std::to_string(value) +
                              ", expected " + expected);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace deltafin::cuda::decode_detail
