// Internal: the per-ISA matmul entry points and the table that picks them. Every variant computes
// weight rows [r0, r1) for 1 <= n <= kMatmulMaxBatch activation rows, y[i * w.rows + r]; the
// threading and the tiling of larger n live in matmul.cc, identical for every ISA.
#pragma once

#include <cstdint>

#include "base/cpu_features.h"
#include "kernels/matmul.h"

namespace deltafin::base {
class ThreadPool;
}

namespace deltafin::kernels::detail {

struct MatmulVariant {
  void (*mxfp4)(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
  void (*bf16)(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
  void (*f32)(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
  void (*int8)(const Int8Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1);
  // Index of the first byte 255 in scales[0, n), or -1.
  int64_t (*find_scale_nan)(const uint8_t* scales, int64_t n);
};

#define DELTAFIN_MATMUL_VARIANT_DECL(ns)                                                          \
  namespace ns {                                                                                  \
  void mxfp4_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t r0,          \
                  int64_t r1);                                                                    \
  void bf16_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t r0,            \
                 int64_t r1);                                                                     \
  void f32_rows(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1); \
  void int8_rows(const Int8Matrix& w, const float* x, int64_t n, float* y, int64_t r0,            \
                 int64_t r1);                                                                     \
  int64_t find_scale_nan(const uint8_t* scales, int64_t n);                                       \
  }
DELTAFIN_MATMUL_VARIANT_DECL(ref)
DELTAFIN_MATMUL_VARIANT_DECL(avx2)
DELTAFIN_MATMUL_VARIANT_DECL(avx512)
#undef DELTAFIN_MATMUL_VARIANT_DECL

// A per-thread, 64-byte-aligned float buffer of at least n_floats, reused across calls (the SIMD
// variants lay activations out in it). One user per thread at a time.
float* thread_scratch(int64_t n_floats);

// The variant for an ISA the CPU supports (tests iterate over all of them).
const MatmulVariant& matmul_variant(base::Isa isa);

// The public entry points, on an explicit variant and pool.
void matmul(const MatmulVariant& v, base::ThreadPool& pool, const Mxfp4Matrix& w, const float* x,
            int64_t n, float* y);
void matmul(const MatmulVariant& v, base::ThreadPool& pool, const Bf16Matrix& w, const float* x,
            int64_t n, float* y);
void matmul(const MatmulVariant& v, base::ThreadPool& pool, const F32Matrix& w, const float* x,
            int64_t n, float* y);
void matmul(const MatmulVariant& v, base::ThreadPool& pool, const Int8Matrix& w, const float* x,
            int64_t n, float* y);
void matmul_rows(const MatmulVariant& v, const Mxfp4Matrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end);
void matmul_rows(const MatmulVariant& v, const Bf16Matrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end);
void matmul_rows(const MatmulVariant& v, const F32Matrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end);
void matmul_rows(const MatmulVariant& v, const Int8Matrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end);

}  // namespace deltafin::kernels::detail
