// The tiers' copies into VRAM: streamed spine layers (pinned host images, two staging buffers)
// and the routed experts' cache (pinned staging ring, slots), each on its own copy stream and
// ordered against the compute stream by events, never by a device-wide sync. Their copies and
// host waits count in the pass's operations (op_count.h) like the compute stream's.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/gpu_internal.h"
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

// Pinned host memory; an error names the tier and what fixes it.
uint8_t* pinned(uint64_t bytes, const char* part) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, std::max<uint64_t>(bytes, 1), cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("CUDA backend: ") + part + " (" + std::to_string(bytes) +
                             " bytes of pinned host memory): " + cudaGetErrorString(err) +
                             "; raise --vram-budget so fewer layers stream, or use --device cpu");
  }
  return static_cast<uint8_t*>(p);
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

}  // namespace

SpineStream::SpineStream(const GpuModelDesc& desc, int64_t first, uint8_t* staging,
                         uint64_t buffer_bytes, Arena& g, std::vector<DevLayer>* layers)
    : first_(first), n_(static_cast<int64_t>(desc.layers.size()) - first) {
  uint64_t total = 0;
  for (int64_t j = 0; j < n_; ++j) {
    Arena count, conv;
    place_layer(desc, first_ + j, count, conv);
    offset_.push_back(total);
    bytes_.push_back(count.used);
    total += count.used;
  }
  host_ = pinned(total, "the streamed spine layers");
  staging_[0] = staging;
  staging_[1] = staging + buffer_bytes;
  check_cuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int b = 0; b < 2; ++b) {
    copied_[b] = new_event();
    consumed_[b] = new_event();
  }
  for (int64_t j = 0; j < n_; ++j) {
    const int64_t l = first_ + j;
    Arena image, conv_count;
    image.base = host_ + offset_[j];
    image.fill = Arena::Fill::kHost;
    place_layer(desc, l, image, conv_count);
    // Both buffers' views share one upload of the conv weights: the second walk replays the
    // globals arena from the same offset without copying.
    Arena conv_again = g;
    conv_again.fill = Arena::Fill::kNone;
    for (int b = 0; b < 2; ++b) {
      Arena view;
      view.base = staging_[b];
      view.fill = Arena::Fill::kNone;
      views_[b].push_back(place_layer(desc, l, view, b == 0 ? g : conv_again));
    }
    layers->push_back(views_[0].back());
  }
}

SpineStream::~SpineStream() {
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  for (int b = 0; b < 2; ++b) {
    if (copied_[b]) cudaEventDestroy(copied_[b]);
    if (consumed_[b]) cudaEventDestroy(consumed_[b]);
  }
  if (host_) cudaFreeHost(host_);
}

int SpineStream::issue(int64_t j, int b) {
  // The buffer's last reader first; the copy then overlaps whatever computes meanwhile.
  check_cuda(cudaStreamWaitEvent(copy_, consumed_[b], 0), "spine copy wait");
  count_copy();
  check_cuda(
      cudaMemcpyAsync(staging_[b], host_ + offset_[j], bytes_[j], cudaMemcpyHostToDevice, copy_),
      "spine copy");
  check_cuda(cudaEventRecord(copied_[b], copy_), "spine copy event");
  holds_[b] = j;
  return b;
}

const DevLayer& SpineStream::acquire(int64_t l, cudaStream_t compute, uint64_t* copied_bytes) {
  const int64_t j = l - first_;
  int b = holds_[0] == j ? 0 : holds_[1] == j ? 1 : -1;
  if (b < 0) {  // not prefetched (the first pass, or one after a cancelled pass)
    b = current_ ^ 1;
    issue(j, b);
    *copied_bytes += bytes_[j];
  }
  current_ = b;
  check_cuda(cudaStreamWaitEvent(compute, copied_[b], 0), "spine wait");
  return views_[b][j];
}

void SpineStream::release(int64_t l, cudaStream_t compute, uint64_t* copied_bytes) {
  const int64_t j = l - first_;
  const int b = holds_[0] == j ? 0 : 1;
  check_cuda(cudaEventRecord(consumed_[b], compute), "spine consumed event");
  // Past the last: the next pass's first streamed layer. Two streamed layers or fewer stay put.
  const int64_t next = (j + 1) % n_;
  if (holds_[0] != next && holds_[1] != next) {
    issue(next, b ^ 1);
    *copied_bytes += bytes_[next];
  }
}

DevExpertCache::DevExpertCache(const GpuModelDesc& desc, int64_t n_slots, uint64_t slot_bytes,
                               uint8_t* slab, Fill fill)
    : index_(n_slots, static_cast<int64_t>(desc.layers.size()), desc.shape.router.n_experts),
      slot_bytes_(slot_bytes),
      slab_(slab),
      fill_(std::move(fill)),
      views_(static_cast<size_t>(n_slots)) {
  for (const GpuLayer& l : desc.layers) experts_.push_back(l.moe_w.experts);
  check_cuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int64_t s = 0; s < n_slots; ++s) {
    ready_.push_back(new_event());
    freed_.push_back(new_event());
  }
  // Enough staging for the host to fill the next expert while the previous ones cross the bus.
  constexpr int kStaging = 4;
  for (int i = 0; i < kStaging; ++i) {
    staging_.push_back(pinned(slot_bytes_, "the expert cache's staging buffers"));
    staged_.push_back(new_event());
  }
}

DevExpertCache::~DevExpertCache() {
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  for (cudaEvent_t e : ready_) cudaEventDestroy(e);
  for (cudaEvent_t e : freed_) cudaEventDestroy(e);
  for (cudaEvent_t e : staged_) cudaEventDestroy(e);
  for (uint8_t* p : staging_) cudaFreeHost(p);
}

void DevExpertCache::copy_in(int64_t layer, int32_t expert, int64_t slot) {
  const size_t k = next_staging_++ % staging_.size();
  // The staging buffer's previous copy must have left it before the host refills it.
  count_sync();
  check_cuda(cudaEventSynchronize(staged_[k]), "expert staging");
  fill_(layer, expert, experts_[layer][expert], staging_[k]);
  uint8_t* dst = slab_ + static_cast<uint64_t>(slot) * slot_bytes_;
  Arena view;
  view.base = dst;
  view.fill = Arena::Fill::kNone;
  views_[slot] = place_expert(view, experts_[layer][expert]);
  check_cuda(cudaStreamWaitEvent(copy_, freed_[slot], 0), "expert copy wait");
  count_copy();
  check_cuda(cudaMemcpyAsync(dst, staging_[k], view.used, cudaMemcpyHostToDevice, copy_),
             "expert copy");
  check_cuda(cudaEventRecord(staged_[k], copy_), "expert staged event");
  check_cuda(cudaEventRecord(ready_[slot], copy_), "expert ready event");
}

void DevExpertCache::run(int64_t layer, const std::vector<int32_t>& experts, cudaStream_t compute,
                         const std::function<void(const DevGlu&, size_t)>& run_expert,
                         GpuTierStats* stats) {
  // The whole route's hits and misses, before any copy.
  const std::vector<int64_t> found = index_.lookup(layer, experts);
  std::vector<int64_t> slot = found;
  std::vector<size_t> misses;
  for (size_t i = 0; i < experts.size(); ++i) {
    if (found[i] < 0) {
      misses.push_back(i);
      continue;
    }
    ++stats->expert_hits;
    Arena count;
    place_expert(count, experts_[layer][experts[i]]);
    stats->expert_hit_bytes += count.used;
  }
  const size_t lookahead = staging_.size();
  size_t copied = 0, done = 0;
  const auto issue = [&] {
    const size_t i = misses[copied++];
    slot[i] = index_.take(layer, experts[i]);
    if (slot[i] < 0) throw std::logic_error("CUDA backend: expert cache without a free slot");
    copy_in(layer, experts[i], slot[i]);
    ++stats->expert_misses;
    Arena count;
    place_expert(count, experts_[layer][experts[i]]);
    stats->expert_miss_bytes += count.used;
  };
  const auto finish = [&](size_t i) {
    check_cuda(cudaEventRecord(freed_[slot[i]], compute), "expert freed event");
    index_.release(slot[i]);
  };
  // The first misses start crossing the bus, then the hits compute while they land.
  while (copied < misses.size() && copied < lookahead && index_.has_free()) issue();
  for (size_t i = 0; i < experts.size(); ++i) {
    if (found[i] < 0) continue;
    run_expert(views_[slot[i]], i);
    finish(i);
  }
  // Each miss once its copy is done; a slot freed by a computed expert takes a later miss (the
  // copy waits for that compute), so a route larger than the cache runs in waves.
  while (done < misses.size()) {
    if (copied < misses.size() && copied - done < lookahead && index_.has_free()) {
      issue();
      continue;
    }
    const size_t i = misses[done++];
    check_cuda(cudaStreamWaitEvent(compute, ready_[slot[i]], 0), "expert wait");
    run_expert(views_[slot[i]], i);
    finish(i);
  }
}

}  // namespace deltafin::cuda
