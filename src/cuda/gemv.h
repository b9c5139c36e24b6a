// GPU products of a weight matrix with 1-16 fp32 activation rows (the decode GEMV and the small
// batches of speculative verify): MXFP4 experts in the compressed-tensors layout and BF16 spine
// matrices, read in place from device memory. Host-callable; every pointer is a device pointer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deltafin::cuda {

// compressed-tensors "mxfp4-pack-quantized" with its codes moved into the device layout: packed
// [rows, cols/2] bytes (element c in byte c/2, low nibble for even c, as published), each 32-bit
// word's bits then moved by permute_mxfp4_codes (mxfp4_layout.h; every upload of the weights
// does it), so the kernels decode a word in fewer instructions; scales [rows, cols/32] E8M0 as
// published. cols % 32 == 0; packed 16-byte aligned.
struct DeviceMxfp4 {
  const uint8_t* packed;
  const uint8_t* scales;
  int64_t rows;
  int64_t cols;
};
// BF16 [rows, cols] row-major raw bits. cols % 8 == 0; data 16-byte aligned.
struct DeviceBf16 {
  const uint16_t* data;
  int64_t rows;
  int64_t cols;
};

// Largest number of activation rows one pass over the weight serves; more run as 16-row passes.
inline constexpr int kGpuMaxBatch = 16;

// The compiled batch size that runs a pass of n <= kGpuMaxBatch rows: n rounded up to 1, 2, 4, 8
// or 16. Any batch size gives a row the same bits; smaller ones read the weights faster.
constexpr int kernel_batch(int64_t n) {
  return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 16;
}

// y[n, rows] = x[n, cols] · Wᵀ (row-major x, y), fp32 activations, fp32 accumulation, on `stream`.
// The arithmetic of every output is fixed (docs/CUDA.md "Exactness"): lane l of a warp takes the
// 32-value groups (MXFP4) or 8-value chunks (BF16) l, l+32, ... of the weight row in order, with a
// sequential fused multiply-add chain (MXFP4: per group on w·2^-126 and x·2^63, the sum times
// 2^63, then scaled by 2^(s-127) in one more FMA), and the 32 lane sums are added by a fixed xor
// butterfly. So output row i is bit-identical for any n and any position of i in the batch.
// cpu_order_*() in gemv_order_ref.h compute the same.
// Throws std::invalid_argument naming the field for a bad shape or alignment, std::runtime_error
// for a CUDA launch error.
void matmul(const DeviceMxfp4& w, const float* x, int64_t n, float* y, cudaStream_t stream = 0);
void matmul(const DeviceBf16& w, const float* x, int64_t n, float* y, cudaStream_t stream = 0);

// Up to kMaxBf16Siblings BF16 products of one x in one launch (a layer's projections of its
// input: KDA's q, k, v, f_a and b, a GLU's gate and up): outs[t].y[n, rows_t] = x[n, cols] ·
// W_tᵀ, every matrix [rows_t, cols] with the same cols. Each output is bit-identical to matmul()
// of that matrix alone; the launch fills the GPU where one small matrix cannot.
inline constexpr int kMaxBf16Siblings = 8;
struct DeviceBf16Out {
  DeviceBf16 w;
  float* y;
};
void matmul_siblings(const DeviceBf16Out* outs, int count, const float* x, int64_t n,
                     cudaStream_t stream = 0);

// One MXFP4 product of a grouped launch: y[n, rows] = x[n, cols] · Wᵀ for one matrix, layout as
// DeviceMxfp4. The table lives in device memory (a cache can fill it); packed and x 16-byte
// aligned, 0 <= n <= max_n (not checked: the host never reads the table).
struct DeviceMxfp4Task {
  const uint8_t* packed;
  const uint8_t* scales;
  const float* x;
  float* y;
  int n;
};

// All `count` tasks of a device table in one launch, every matrix [rows, cols]: the MoE's experts
// of a layer (gate and up, then down) fill the GPU where one 6 MB matrix cannot. Each output is
// bit-identical to matmul() of that task alone. max_n <= 16; a task of n = 0 reads nothing; one
// with n > max_n is a caller error (rows past max_n rounded up to a power of two are skipped).
void matmul_grouped(const DeviceMxfp4Task* tasks, int64_t count, int64_t rows, int64_t cols,
                    int64_t max_n, cudaStream_t stream = 0);

}  // namespace deltafin::cuda
