// The routed experts' VRAM cache on the device: run_route's copies (host memory → a slot, on a
// copy stream of its own, each piece of the expert to its place in the slot's layout, then its
// MXFP4 codes moved into the kernels' layout) and products, ordered by events; and the mapped
// experts' source (the host copies each miss into pinned staging). Copies and host waits count in
// the pass's operations (op_count.h).
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "cuda/gpu_internal.h"
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

// A device matrix's view as host memory (the pointers are not dereferenced here).
HostMatrix as_host(const DevMatrix& m) {
  HostMatrix h;
  if (m.empty()) return h;
  if (m.mxfp4) {
    h.dtype = HostMatrix::DType::kMxfp4;
    h.data = m.mx.packed;
    h.scales = m.mx.scales;
    h.rows = m.mx.rows;
    h.cols = m.mx.cols;
  } else {
    h.data = reinterpret_cast<const uint8_t*>(m.bf16.data);
    h.rows = m.bf16.rows;
    h.cols = m.bf16.cols;
  }
  return h;
}

}  // namespace

DevExpertCache::DevExpertCache(const GpuModelDesc& desc, int64_t n_slots, uint64_t slot_bytes,
                               uint8_t* slab, std::unique_ptr<ExpertSource> source)
    : index_(n_slots, static_cast<int64_t>(desc.layers.size()), desc.shape.router.n_experts),
      slot_bytes_(slot_bytes),
      slab_(slab),
      source_(std::move(source)),
      views_(static_cast<size_t>(n_slots)) {
  if (!source_) throw std::logic_error("CUDA backend: expert cache without a source");
  for (const GpuLayer& l : desc.layers) {
    std::vector<uint64_t> bytes;
    for (const GpuGlu& e : l.moe_w.experts) {
      Arena count;
      place_expert(count, e);
      if (count.used > slot_bytes_) throw std::logic_error("CUDA backend: expert slot too small");
      bytes.push_back(count.used);
    }
    expert_bytes_.push_back(std::move(bytes));
  }
  check_cuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int64_t s = 0; s < n_slots; ++s) {
    ready_.push_back(new_event());
    freed_.push_back(new_event());
  }
  for (int i = 0; i <= std::max(1, source_->max_held()); ++i) done_.push_back(new_event());
}

DevExpertCache::~DevExpertCache() {
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  for (cudaEvent_t e : ready_) cudaEventDestroy(e);
  for (cudaEvent_t e : freed_) cudaEventDestroy(e);
  for (cudaEvent_t e : done_) cudaEventDestroy(e);
}

uint64_t DevExpertCache::copy(int64_t slot, const GpuGlu& host) {
  Arena view;
  view.base = slab_ + static_cast<uint64_t>(slot) * slot_bytes_;
  view.fill = Arena::Fill::kNone;
  std::vector<CodeSpan> codes;
  view.codes = &codes;
  views_[slot] = place_expert(view, host);
  const std::vector<CopyPiece> merged = expert_copy_pieces(host, views_[slot]);
  // The slot's previous expert may still be read by its last products.
  check_cuda(cudaStreamWaitEvent(copy_, freed_[slot], 0), "expert copy wait");
  timer_.begin(copy_);
  for (const CopyPiece& p : merged) {
    count_copy();
    check_cuda(cudaMemcpyAsync(p.dst, p.src, p.bytes, cudaMemcpyHostToDevice, copy_),
               "expert copy");
  }
  timer_.end(copy_);  // the copies alone: the stream's rate against the pinned copy rate
  // The source's bytes are the published ones; the products read the kernels' layout.
  permute_mxfp4_codes(codes, true, copy_);
  check_cuda(cudaEventRecord(ready_[slot], copy_), "expert ready event");
  const uint64_t ticket = tickets_++;
  check_cuda(cudaEventRecord(done_[ticket % done_.size()], copy_), "expert copied event");
  return ticket;
}

void DevExpertCache::wait_copied(uint64_t ticket) {
  count_sync();
  check_cuda(cudaEventSynchronize(done_[ticket % done_.size()]), "expert copy");
}

void DevExpertCache::compute(int64_t slot, size_t i, bool copied) {
  if (copied) check_cuda(cudaStreamWaitEvent(compute_, ready_[slot], 0), "expert wait");
  (*run_expert_)(views_[slot], i);
  check_cuda(cudaEventRecord(freed_[slot], compute_), "expert freed event");
}

void DevExpertCache::compute_hits(const std::vector<std::pair<int64_t, size_t>>& hits) {
  std::vector<std::pair<const DevGlu*, size_t>> views;
  for (const auto& [slot, i] : hits) views.emplace_back(&views_[slot], i);
  (*run_hits_)(views);
  // A later copy into any of these slots waits for these products.
  for (const auto& [slot, i] : hits)
    check_cuda(cudaEventRecord(freed_[slot], compute_), "expert freed event");
}

void DevExpertCache::run(int64_t layer, const std::vector<int32_t>& experts, cudaStream_t compute,
                         const std::function<void(const DevGlu&, size_t)>& run_expert,
                         const RunHits& run_hits, GpuTierStats* stats) {
  compute_ = compute;
  run_expert_ = &run_expert;
  run_hits_ = &run_hits;
  const RouteCounts n =
      run_route(index_, source_.get(), *this, layer, experts, expert_bytes_[layer]);
  stats->expert_hits += n.hits;
  stats->expert_misses += n.misses;
  stats->expert_hit_bytes += n.hit_bytes;
  stats->expert_miss_bytes += n.miss_bytes;
  // run_route waited for every copy it issued.
  stats->expert_h2d_seconds += timer_.collect();
}

namespace {

class MappedSource : public ExpertSource {
 public:
  MappedSource(const GpuModelDesc& desc, uint64_t slot_bytes) {
    for (const GpuLayer& l : desc.layers) experts_.push_back(l.moe_w.experts);
    for (int64_t i = 0; i < kExpertStagingBuffers; ++i) {
      staging_.push_back(alloc_pinned(slot_bytes, "the mapped experts' staging buffers"));
      free_.push_back(static_cast<int>(i));
    }
  }
  ~MappedSource() override {
    for (uint8_t* p : staging_) cudaFreeHost(p);
  }
  void request(int64_t layer, const std::vector<int32_t>& experts) override {
    layer_ = layer;
    ids_ = experts;
    next_ = 0;
    buffer_of_.assign(experts.size(), -1);
  }
  HostExpert next() override {
    if (next_ >= ids_.size() || free_.empty())
      throw std::logic_error("CUDA backend: mapped expert source misused");
    const auto t = std::chrono::steady_clock::now();
    const int k = free_.back();
    free_.pop_back();
    const GpuGlu& e = experts_[layer_][ids_[next_]];
    std::vector<CopyPiece> pieces;
    Arena view;
    view.base = staging_[k];
    view.fill = Arena::Fill::kHost;
    view.pieces = &pieces;
    const DevGlu d = place_expert(view, e);
    parallel_copy(pieces, kHostCopyThreads);
    HostExpert h{next_, {as_host(d.gate), as_host(d.up), as_host(d.down)}};
    buffer_of_[next_++] = k;
    ++stats_.ram_hits;
    stats_.ram_hit_bytes += view.used;
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    return h;
  }
  void release(size_t index) override {
    free_.push_back(buffer_of_.at(index));
    buffer_of_[index] = -1;
  }
  int max_held() const override { return static_cast<int>(staging_.size()); }
  ExpertSourceStats stats() const override { return stats_; }

 private:
  std::vector<std::vector<GpuGlu>> experts_;
  std::vector<uint8_t*> staging_;
  std::vector<int> free_;
  int64_t layer_ = 0;
  std::vector<int32_t> ids_;
  std::vector<int> buffer_of_;
  size_t next_ = 0;
  ExpertSourceStats stats_;
};

}  // namespace

std::unique_ptr<ExpertSource> mapped_expert_source(const GpuModelDesc& desc, uint64_t slot_bytes) {
  return std::make_unique<MappedSource>(desc, slot_bytes);
}

}  // namespace deltafin::cuda
