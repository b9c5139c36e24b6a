// The streamed spine layers' copies into VRAM: a worker thread fills a small ring of pinned host
// buffers from the mapping a layer or two ahead, each pass copies each layer from the ring into
// one of two VRAM staging buffers on a copy stream of its own, ordered against the compute stream
// by events, never by a device-wide sync. Also the copies' timer and pinned allocations. Copies
// and host waits count in the pass's operations (op_count.h) like the compute stream's.
#include <algorithm>
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
      codes_[b].emplace_back();
      view.codes = &codes_[b].back();
      views_[b].push_back(place_layer(desc_, l, view, b == 0 ? g : conv_again));
    }
    layers->push_back(views_[0].back());
  }
  // Placing a layer read its experts' shapes only (DevMoe::groupable); the views are set.
  for (GpuLayer& l : desc_.layers) l.moe_w.experts.clear();
  for (int64_t h = 0; h < std::max<int64_t>(ring_buffers, 1); ++h) {
    ring_memory_.push_back(alloc_pinned(
        buffer_bytes, "the streamed spine's host ring (" + std::to_string(ring_buffers) +
                          " buffers of the largest streamed layer)"));
    ring_copied_.push_back(new_event());
  }
  ring_ = std::make_unique<FillRing>(
      ring_memory_, n_,
      [this](int64_t j, uint8_t* dst) {
        std::vector<CopyPiece> pieces;
        Arena image, conv;
        image.base = dst;
        image.fill = Arena::Fill::kHost;
        image.pieces = &pieces;
        place_layer(desc_, first_ + j, image, conv);  // conv: counted only
        parallel_copy(pieces, kHostCopyThreads);
      },
      [this](int h) {
        check_cuda(cudaSetDevice(device_), "cudaSetDevice (spine ring)");
        check_cuda(cudaEventSynchronize(ring_copied_[h]), "spine ring copy");
      });
}

SpineStream::~SpineStream() {
  ring_.reset();  // the worker stops first
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  for (int b = 0; b < 2; ++b) {
    if (copied_[b]) cudaEventDestroy(copied_[b]);
    if (consumed_[b]) cudaEventDestroy(consumed_[b]);
  }
  for (cudaEvent_t e : ring_copied_) cudaEventDestroy(e);
  for (uint8_t* p : ring_memory_) cudaFreeHost(p);
}

int SpineStream::issue(int64_t j, int b) {
  const int h = ring_->acquire(j, &fill_wait_seconds_);
  // The buffer's last reader first; the copy then overlaps whatever computes meanwhile.
  check_cuda(cudaStreamWaitEvent(copy_, consumed_[b], 0), "spine copy wait");
  count_copy();
  timer_.begin(copy_);
  check_cuda(
      cudaMemcpyAsync(staging_[b], ring_->buffer(h), bytes_[j], cudaMemcpyHostToDevice, copy_),
      "spine copy");
  timer_.end(copy_);
  permute_mxfp4_codes(codes_[b][j], true, copy_);  // the ring holds the published layout
  check_cuda(cudaEventRecord(copied_[b], copy_), "spine copy event");
  check_cuda(cudaEventRecord(ring_copied_[h], copy_), "spine ring event");
  ring_->copying(h, j);
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

void SpineStream::finish_pass(double* h2d_seconds, double* fill_wait_seconds) {
  // With more than two streamed layers the last copy issued is the next pass's first layer,
  // still in flight: it is timed with the next pass.
  *h2d_seconds += timer_.collect(n_ > 2 ? 1 : 0);
  *fill_wait_seconds += fill_wait_seconds_;
  fill_wait_seconds_ = 0;
}

}  // namespace deltafin::cuda
