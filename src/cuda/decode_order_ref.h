// CPU emulation of decode_ops.h's exact arithmetic: the same operations in the same order with
// the same portable exp/tanh/sigmoid (portable_math.h), so the GPU tests compare by memcmp. Same
// arguments and layouts as the GPU functions, on host memory. Plain C++; no CUDA needed to run.
#pragma once

#include <cstdint>

#include "cuda/decode_ops.h"

namespace deltafin::cuda {

void cpu_order_situ(const float* g, const float* u, int64_t n, float beta, float linear_beta,
                    float* y);
void cpu_order_attn_res(const float* key, const float* blocks, int64_t n_blocks,
                        int64_t block_stride, const float* prefix, int64_t n, int64_t hidden,
                        float eps, float* out);
void cpu_order_route(const RouterShape& shape, const float* logits, const float* bias, int64_t n,
                     int32_t* experts, float* weights);
void cpu_order_kda(const float* q, const float* k, const float* v, const float* g,
                   const float* beta, int64_t n, int64_t n_heads, int64_t dim, float* state,
                   float* o);
void cpu_order_short_conv_silu(const float* x, int64_t n, int64_t p, int64_t kernel, const float* w,
                               float* hist, float* y);
void cpu_order_l2norm_rows(float* x, int64_t rows, int64_t dim, float scale);
void cpu_order_kda_gates(float* g, float* beta, int64_t n, int64_t n_heads, int64_t dim,
                         const float* a_log, const float* dt_bias, float lower_bound);
void cpu_order_mul_sigmoid(const float* gate, int64_t n, float* y);
void cpu_order_mla_absorbed(const MlaGpuShape& shape, const uint16_t* kv_b, const float* latent,
                            const float* k_pe, int64_t n_positions, const float* q, int64_t n,
                            float* o);

}  // namespace deltafin::cuda
