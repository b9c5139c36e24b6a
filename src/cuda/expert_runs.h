// A multi-row pass's routed experts split into runs of one compiled batch size (kernel_batch),
// each run one grouped launch: an expert that one row chose then runs the one-row kernel even
// when another expert of the pass has several rows, instead of every expert running the batch
// size of the busiest. Host code, no CUDA.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda/gemv.h"

namespace deltafin::cuda {

// Positions [begin, end) of an expert order whose row counts all run at batch size max_rows.
struct ExpertRun {
  int64_t begin = 0, end = 0;
  int64_t max_rows = 0;
};

// Fills `order` with the experts (indices of rows, each its row count, 1..kGpuMaxBatch) by
// ascending batch size, experts of one size in their given order, and returns its runs. The
// order does not change a bit of any output: every expert's rows land in their own slots.
inline std::vector<ExpertRun> expert_runs(const std::vector<int64_t>& rows,
                                          std::vector<size_t>& order) {
  order.resize(rows.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return kernel_batch(rows[a]) < kernel_batch(rows[b]);
  });
  std::vector<ExpertRun> runs;
  for (size_t p = 0; p < order.size(); ++p) {
    const int64_t batch = kernel_batch(rows[order[p]]);
    if (runs.empty() || runs.back().max_rows != batch)
      runs.push_back({static_cast<int64_t>(p), static_cast<int64_t>(p), batch});
    runs.back().end = static_cast<int64_t>(p) + 1;
  }
  return runs;
}

}  // namespace deltafin::cuda
