// The benchmark's entries, the ones main runs (DELTAFIN_BENCH_ONLY picks them): MXFP4 in
// mxfp4_entries.cu, BF16 in bf16_entries.cu, the decode ops and the logits copy in
// decode_op_entries.cu. Each prints its rows against its same-bytes read (harness.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin::cuda::bench {

// mxfp4_entries.cu
void bench_mxfp4(int reps, int64_t rows, int64_t cols, bool tc = false);
struct GroupedLaunch {
  double bytes = 0;                   // the weights and scales one launch reads
  double kernel_us = 0, read_us = 0;  // the medians of the first n's launch and of the read
};
GroupedLaunch bench_mxfp4_grouped(int reps, int experts, int per_expert, int64_t rows, int64_t cols,
                                  const std::vector<int>& ns = {1, 2, 4, 8, 16}, bool tc = false);
void bench_grouped_scaling(int reps, int per_expert, int64_t rows, int64_t cols,
                           const std::vector<int>& experts);
void bench_mxfp4_pairs(int reps, int count, int64_t rows, int64_t cols);

// bf16_entries.cu
void bench_bf16_shapes(int reps, int n, int64_t rows, int64_t cols);
void bench_bf16(int reps, int64_t rows, int64_t cols);
void bench_spine_launches(int reps, const std::vector<int>& ns, bool all_shapes);

// decode_op_entries.cu
void bench_kda(int reps);
void bench_mla(int reps, int64_t positions, const std::string& variant = "");
void bench_attn_res(int reps);
void bench_logits_copy(int reps);

}  // namespace deltafin::cuda::bench
