// The GPU model's pass counters (gpu_meter.h, gpu_counters.h): the per-pass byte arithmetic, the
// route's distinct experts, the stream operations and the events around a pass.
#include "cuda/gpu_meter.h"

#include "cuda/gpu_internal.h"

namespace deltafin::cuda {
namespace {

uint64_t rounded(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

uint64_t host_matrix_bytes(const HostMatrix& m) {
  const auto elements = static_cast<uint64_t>(m.rows * m.cols);
  return m.dtype == HostMatrix::DType::kBf16 ? elements * 2 : elements / 2 * 17 / 16;
}

}  // namespace

uint64_t expert_bytes(const GpuGlu& e) {
  return host_matrix_bytes(e.gate) + host_matrix_bytes(e.up) + host_matrix_bytes(e.down);
}

void PassByteModel::add_pass(GpuCounters& c, int64_t n, int64_t head_rows,
                             int64_t positions) const {
  ++c.passes;
  c.rows += static_cast<uint64_t>(n);
  c.spine_bytes += spine_bytes;
  if (head_rows > 0) c.head_bytes += head_bytes;
  c.embed_bytes += static_cast<uint64_t>(n) * embed_row_bytes;
  c.attention_cache_bytes += static_cast<uint64_t>(positions) * cache_position_bytes;
  c.kda_state_bytes += kda_state_bytes;
}

namespace {

// The byte model of a placed model whose spine (the embedding and the lm_head included) takes
// `spine_bytes` of VRAM.
PassByteModel byte_model(const GpuModelDesc& desc, uint64_t spine_bytes) {
  const GpuShape& sh = desc.shape;
  PassByteModel m;
  // The plan's spine holds the embedding and the lm_head as one allocation each, rounded up to
  // 256 bytes; every other piece of it is read once by every pass.
  m.head_bytes = host_matrix_bytes(desc.lm_head);
  m.spine_bytes = spine_bytes - rounded(host_matrix_bytes(desc.embed)) - rounded(m.head_bytes);
  m.embed_row_bytes = static_cast<uint64_t>(desc.embed.cols) * 2;
  m.n_experts = sh.router.n_experts;
  const int64_t p = sh.kda_heads * sh.kda_dim;
  const uint64_t kda_layer_floats =
      static_cast<uint64_t>(sh.kda_heads * sh.kda_dim * sh.kda_dim + 3 * (sh.conv_kernel - 1) * p);
  for (const GpuLayer& l : desc.layers) {
    if (l.kda) {
      m.kda_state_bytes += 2 * kda_layer_floats * sizeof(float);
    } else {
      m.cache_position_bytes += static_cast<uint64_t>(sh.kv_rank + sh.rope) * sizeof(float);
    }
    m.layer_expert_bytes.push_back(
        l.moe && !l.moe_w.experts.empty() ? expert_bytes(l.moe_w.experts.front()) : 0);
  }
  return m;
}

}  // namespace

PassByteModel pass_byte_model(const GpuModelDesc& desc, const VramPlan& plan) {
  return byte_model(desc, plan.spine_bytes);
}

PassByteModel pass_byte_model(const GpuModelDesc& desc, const TierPlan& tiers) {
  return byte_model(desc,
                    tiers.global_bytes + tiers.resident_spine_bytes + tiers.streamed_spine_bytes);
}

PassMeter::~PassMeter() {
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
}

void PassMeter::start(cudaStream_t stream) {
  if (start_ == nullptr) check_cuda(cudaEventCreate(&start_), "pass meter event");
  if (stop_ == nullptr) check_cuda(cudaEventCreate(&stop_), "pass meter event");
  at_start_ = t_op_counts;
  check_cuda(cudaEventRecord(start_, stream), "pass meter start");
}

void PassMeter::count_experts(int64_t layer, const std::vector<int32_t>& route) {
  seen_.assign(static_cast<size_t>(model_.n_experts), 0);
  int64_t distinct = 0;
  for (const int32_t e : route) {
    if (e < 0 || static_cast<size_t>(e) >= seen_.size() || seen_[e]) continue;
    seen_[e] = 1;
    ++distinct;
  }
  count_distinct_experts(layer, distinct);
}

void PassMeter::count_distinct_experts(int64_t layer, int64_t distinct) {
  // Sized from the model's shapes, not from device views: a cached expert (the tiers' slots) has
  // the bytes of a resident one.
  counters_.expert_bytes += static_cast<uint64_t>(distinct) * model_.layer_expert_bytes[layer];
  counters_.experts += static_cast<uint64_t>(distinct);
}

void PassMeter::stop(cudaStream_t stream) {
  check_cuda(cudaEventRecord(stop_, stream), "pass meter stop");
}

void PassMeter::finish(int64_t n, int64_t head_rows, int64_t positions) {
  model_.add_pass(counters_, n, head_rows, positions);
  const OpCounts& now = t_op_counts;
  counters_.launches += now.launches - at_start_.launches;
  counters_.copies += now.copies - at_start_.copies;
  counters_.syncs += now.syncs - at_start_.syncs;
  counters_.expert_batch_splits += now.batch_splits - at_start_.batch_splits;
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "pass meter time");
  counters_.device_seconds += ms / 1e3;
}

const GpuCounters& GpuModel::counters() const { return ws_->meter.counters(); }

}  // namespace deltafin::cuda
