// MemoryLoad: copying threads for bench-io's --memory-load.
#include "base/memory_load.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace deltafin::base {
namespace {

constexpr size_t kChunkBytes = size_t{4} << 20;  // stop() takes effect between chunks

}  // namespace

MemoryLoad::MemoryLoad(int threads, size_t buffer_bytes) : buffer_bytes_(buffer_bytes) {
  DF_ASSERT(threads >= 1 && buffer_bytes > 0);
  for (int t = 0; t < 2 * threads; ++t) {
    buffers_.emplace_back(new uint8_t[buffer_bytes_]);
    // Distinct, non-zero contents: every page is really there before the clock starts.
    std::memset(buffers_.back().get(), 1 + t % 255, buffer_bytes_);
  }
  clock_.restart();
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { run(t); });
}

MemoryLoad::~MemoryLoad() { stop(); }

void MemoryLoad::run(int index) {
  const uint8_t* src = source(index);
  uint8_t* dst = buffers_[2 * index + 1].get();
  while (!stop_.load(std::memory_order_relaxed)) {
    for (size_t at = 0; at < buffer_bytes_ && !stop_.load(std::memory_order_relaxed);) {
      const size_t n = std::min(kChunkBytes, buffer_bytes_ - at);
      std::memcpy(dst + at, src + at, n);
      copied_.fetch_add(n, std::memory_order_relaxed);
      at += n;
    }
  }
}

void MemoryLoad::stop() {
  if (stopped_) return;
  stop_.store(true);
  for (std::thread& t : threads_) t.join();
  stopped_seconds_ = clock_.elapsed_seconds();
  stopped_ = true;
}

double MemoryLoad::seconds() const {
  return stopped_ ? stopped_seconds_ : clock_.elapsed_seconds();
}

double MemoryLoad::gbps() const {
  const double s = seconds();
  return s > 0 ? static_cast<double>(bytes_copied()) / s / 1e9 : 0.0;
}

const uint8_t* MemoryLoad::source(int thread) const { return buffers_[2 * thread].get(); }
const uint8_t* MemoryLoad::destination(int thread) const { return buffers_[2 * thread + 1].get(); }

}  // namespace deltafin::base
