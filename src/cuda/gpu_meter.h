// The GPU model's bookkeeping of its passes into GpuCounters (a member of its workspace): each
// pass's bytes from the PassByteModel and its routes, the stream operations its thread issued
// (op_count.h), and the device's time between an event before the pass and one after it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda/gpu_counters.h"
#include "cuda/op_count.h"

namespace deltafin::cuda {

class PassMeter {
 public:
  PassMeter() = default;
  ~PassMeter();
  PassMeter(const PassMeter&) = delete;
  PassMeter& operator=(const PassMeter&) = delete;

  void set_model(const PassByteModel& model) { model_ = model; }
  // Before the pass's first stream operation.
  void start(cudaStream_t stream);
  // MoE layer `layer`'s route (rows × top-k expert ids, in host memory): each distinct expert
  // once, with its bytes from the model's shapes (a cached expert is as big as a resident one).
  void count_experts(int64_t layer, const std::vector<int32_t>& route);
  // The same for a route the host never saw, known to hold `distinct` distinct experts.
  void count_distinct_experts(int64_t layer, int64_t distinct);
  // After the pass's last stream operation, before the host waits for it.
  void stop(cudaStream_t stream);
  // After that wait: the pass had n rows, head_rows of them through the lm_head, and left
  // `positions` cached.
  void finish(int64_t n, int64_t head_rows, int64_t positions);
  const GpuCounters& counters() const { return counters_; }

 private:
  PassByteModel model_;
  GpuCounters counters_;
  OpCounts at_start_;
  std::vector<char> seen_;  // count_experts' scratch, by expert id
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace deltafin::cuda
