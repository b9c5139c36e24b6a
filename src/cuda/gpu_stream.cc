// The streamed spine layers' copies into VRAM: a worker thread fills a small ring of pinned host
// buffers from the mapping a layer or two ahead, each pass copies each layer from the ring into
// one of two VRAM staging buffers on a copy stream of its own, ordered against the compute stream
// by events, never by a device-wide sync. Also the copies' timer and pinned allocations. Copies
// and host waits count in the pass's operations (op_count.h) like the compute stream's.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "cuda/gpu_internal.h"
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

cudaEvent_t new_event(bool timing = false) {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
             "cudaEventCreate");
  return e;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

uint8_t* alloc_pinned(uint64_t bytes, const std::string& part) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, std::max<uint64_t>(bytes, 1), cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("CUDA backend: " + part + " (" + std::to_string(bytes) +
                             " bytes of pinned host memory): " + cudaGetErrorString(err) +
                             "; lower --memory-budget's other uses, raise --vram-budget so fewer "
                             "layers stream, or use --device cpu");
  }
  return static_cast<uint8_t*>(p);
}

CopyTimer::CopyTimer(int pairs) {
  for (int i = 0; i < pairs; ++i) {
    start_.push_back(new_event(true));
    stop_.push_back(new_event(true));
  }
}

CopyTimer::~CopyTimer() {
  for (cudaEvent_t e : start_) cudaEventDestroy(e);
  for (cudaEvent_t e : stop_) cudaEventDestroy(e);
}

void CopyTimer::collect_oldest() {
  const int n = static_cast<int>(start_.size());
  const int k = (next_ - pending_ + n) % n;
  check_cuda(cudaEventSynchronize(stop_[k]), "copy timer");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, start_[k], stop_[k]), "copy timer");
  seconds_ += ms * 1e-3;
  --pending_;
}

void CopyTimer::begin(cudaStream_t s) {
  if (pending_ == static_cast<int>(start_.size())) collect_oldest();
  check_cuda(cudaEventRecord(start_[next_], s), "copy timer");
}

void CopyTimer::end(cudaStream_t s) {
  check_cuda(cudaEventRecord(stop_[next_], s), "copy timer");
  next_ = (next_ + 1) % static_cast<int>(start_.size());
  ++pending_;
}

double CopyTimer::collect(int keep) {
  while (pending_ > keep) collect_oldest();
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

SpineStream::SpineStream(const GpuModelDesc& desc, int64_t first, uint8_t* staging,
                         uint64_t buffer_bytes, Arena& g, std::vector<DevLayer>* layers, int device,
                         int64_t ring_buffers)
    : desc_(desc),
      device_(device),
      first_(first),
      n_(static_cast<int64_t>(desc.layers.size()) - first) {
  for (GpuLayer& l : desc_.layers) l.moe_w.experts.clear();  // place_layer never reads them
  for (int64_t j = 0; j < n_; ++j) {
    Arena count, conv;
    place_layer(desc_, first_ + j, count, conv);
    if (count.used > buffer_bytes) throw std::logic_error("CUDA backend: spine staging too small");
    bytes_.push_back(count.used);
  }
  staging_[0] = staging;
  staging_[1] = staging + buffer_bytes;
  check_cuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int b = 0; b < 2; ++b) {
    copied_[b] = new_event();
    consumed_[b] = new_event();
  }
  for (int64_t h = 0; h < std::max<int64_t>(ring_buffers, 1); ++h) {
    ring_.push_back(alloc_pinned(buffer_bytes, "the streamed spine's host ring (" +
                                                   std::to_string(ring_buffers) + " buffers)"));
    ring_copied_.push_back(new_event());
    ring_state_.push_back(Ring::kFree);
    ring_layer_.push_back(-1);
    ring_order_.push_back(0);
  }
  for (int64_t j = 0; j < n_; ++j) {
    const int64_t l = first_ + j;
    // Both buffers' views share one upload of the conv weights: the second walk replays the
    // globals arena from the same offset without copying.
    Arena conv_again = g;
    conv_again.fill = Arena::Fill::kNone;
    for (int b = 0; b < 2; ++b) {
      Arena view;
      view.base = staging_[b];
      view.fill = Arena::Fill::kNone;
      views_[b].push_back(place_layer(desc_, l, view, b == 0 ? g : conv_again));
    }
    layers->push_back(views_[0].back());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    want(0);  // the first pass's first layer, read while the rest of the load runs
    if (n_ > 1) want(1);
  }
  thread_ = std::thread([this] { fill_loop(); });
}

SpineStream::~SpineStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  for (int b = 0; b < 2; ++b) {
    if (copied_[b]) cudaEventDestroy(copied_[b]);
    if (consumed_[b]) cudaEventDestroy(consumed_[b]);
  }
  for (cudaEvent_t e : ring_copied_) cudaEventDestroy(e);
  for (uint8_t* p : ring_) cudaFreeHost(p);
}

void SpineStream::want(int64_t j) {
  if (ring_holding(j) >= 0) return;
  if (std::find(wanted_.begin(), wanted_.end(), j) != wanted_.end()) return;
  wanted_.push_back(j);
  cv_.notify_all();
}

int SpineStream::ring_holding(int64_t j) const {
  for (size_t h = 0; h < ring_.size(); ++h)
    if (ring_layer_[h] == j &&
        (ring_state_[h] == Ring::kFilling || ring_state_[h] == Ring::kFilled))
      return static_cast<int>(h);
  return -1;
}

void SpineStream::fill_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  const cudaError_t set = cudaSetDevice(device_);
  if (set != cudaSuccess) {
    error_ = std::string("cudaSetDevice on the spine fill thread: ") + cudaGetErrorString(set);
    cv_.notify_all();
    return;
  }
  for (;;) {
    // A buffer that is free, or the one whose copy out was issued first (it finishes first).
    int pick = -1;
    cv_.wait(lock, [&] {
      if (stop_) return true;
      if (wanted_.empty()) return false;
      pick = -1;
      for (size_t h = 0; h < ring_.size(); ++h) {
        if (ring_state_[h] == Ring::kFree) {
          pick = static_cast<int>(h);
          return true;
        }
        if (ring_state_[h] == Ring::kCopying && (pick < 0 || ring_order_[h] < ring_order_[pick]))
          pick = static_cast<int>(h);
      }
      return pick >= 0;
    });
    if (stop_) return;
    const int64_t j = wanted_.front();
    wanted_.pop_front();
    const bool was_copying = ring_state_[pick] == Ring::kCopying;
    ring_state_[pick] = Ring::kFilling;
    ring_layer_[pick] = j;
    const uint64_t generation = generation_;
    lock.unlock();
    std::string error;
    if (was_copying) {
      // The device may still be reading the old layer out of it.
      const cudaError_t err = cudaEventSynchronize(ring_copied_[pick]);
      if (err != cudaSuccess) error = std::string("spine ring copy: ") + cudaGetErrorString(err);
    }
    if (error.empty()) {
      Arena image, conv;
      image.base = ring_[pick];
      image.fill = Arena::Fill::kHost;
      place_layer(desc_, first_ + j, image, conv);  // conv: counted only
    }
    lock.lock();
    if (!error.empty()) {
      error_ = error;
      ring_state_[pick] = Ring::kFree;
      ring_layer_[pick] = -1;
    } else if (generation != generation_) {  // a cancelled pass's read-ahead: not wanted now
      ring_state_[pick] = Ring::kFree;
      ring_layer_[pick] = -1;
    } else {
      ring_state_[pick] = Ring::kFilled;
    }
    cv_.notify_all();
  }
}

int SpineStream::issue(int64_t j, int b) {
  int h = -1;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (ring_holding(j) < 0 && (wanted_.empty() || wanted_.front() != j)) {
      // Out of order (a pass after a cancelled one): what the ring read ahead is not wanted, and
      // kept it could hold every buffer while j waits.
      for (size_t k = 0; k < ring_.size(); ++k)
        if (ring_state_[k] == Ring::kFilled) {
          ring_state_[k] = Ring::kFree;
          ring_layer_[k] = -1;
        }
      wanted_.clear();
      ++generation_;
      want(j);
    }
    const auto t = std::chrono::steady_clock::now();
    cv_.wait(lock, [&] {
      h = ring_holding(j);
      return !error_.empty() || (h >= 0 && ring_state_[h] == Ring::kFilled);
    });
    if (!error_.empty()) throw std::runtime_error("CUDA backend: " + error_);
    fill_wait_seconds_ += seconds_since(t);
  }
  // The buffer's last reader first; the copy then overlaps whatever computes meanwhile.
  check_cuda(cudaStreamWaitEvent(copy_, consumed_[b], 0), "spine copy wait");
  count_copy();
  timer_.begin(copy_);
  check_cuda(cudaMemcpyAsync(staging_[b], ring_[h], bytes_[j], cudaMemcpyHostToDevice, copy_),
             "spine copy");
  timer_.end(copy_);
  check_cuda(cudaEventRecord(copied_[b], copy_), "spine copy event");
  check_cuda(cudaEventRecord(ring_copied_[h], copy_), "spine ring event");
  holds_[b] = j;
  std::lock_guard<std::mutex> lock(mu_);
  ring_state_[h] = Ring::kCopying;
  ring_order_[h] = ++copies_;
  // Read ahead: the layers after j, as many as the rest of the ring holds.
  for (int64_t k = 1; k < static_cast<int64_t>(ring_.size()) && k < n_; ++k) want((j + k) % n_);
  cv_.notify_all();
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

void SpineStream::finish_pass(double* h2d_seconds, double* fill_wait_seconds) {
  // With more than two streamed layers the last copy issued is the next pass's first layer,
  // still in flight: it is timed with the next pass.
  *h2d_seconds += timer_.collect(n_ > 2 ? 1 : 0);
  *fill_wait_seconds += fill_wait_seconds_;
  fill_wait_seconds_ = 0;
}

}  // namespace deltafin::cuda
