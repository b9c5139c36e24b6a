// The operations this thread has put on CUDA streams: kernel launches (every launch site in
// src/cuda counts its own), copies and host waits (the GPU model counts its own), so a benchmark
// can price a pass's operations at their measured costs. Cumulative; take differences.
#pragma once

#include <cstdint>

namespace deltafin::cuda {

struct OpCounts {
  uint64_t launches = 0;  // kernels
  uint64_t copies = 0;    // cudaMemcpy*Async
  uint64_t syncs = 0;     // the host waiting for a stream
  // Grouped expert products that took one more launch pair for another batch size (expert_runs.h)
  uint64_t batch_splits = 0;
};

// Per thread: a pass issues all its operations from the thread that runs it.
inline thread_local OpCounts t_op_counts;

inline void count_launches(uint64_t n) { t_op_counts.launches += n; }
inline void count_copy() { ++t_op_counts.copies; }
inline void count_sync() { ++t_op_counts.syncs; }
inline void count_batch_splits(uint64_t n) { t_op_counts.batch_splits += n; }

}  // namespace deltafin::cuda
