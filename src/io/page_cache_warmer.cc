// PageCacheWarmer: MADV_POPULATE_READ over mapped ranges on a thread of its own.
#include "io/page_cache_warmer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older headers lack the name
#endif

namespace deltafin::io {

PageCacheWarmer::PageCacheWarmer(std::vector<Range> ranges, size_t chunk_bytes)
    : ranges_(std::move(ranges)), chunk_bytes_(chunk_bytes) {
  DF_ASSERT(chunk_bytes_ > 0);
  thread_ = std::thread([this] { run(); });
}

PageCacheWarmer::~PageCacheWarmer() { stop(); }

void PageCacheWarmer::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void PageCacheWarmer::run() {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  std::string error;
  for (const Range& r : ranges_) {
    if (r.size == 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(r.data) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(r.data) + r.size + page - 1) / page * page;
    for (uintptr_t at = begin; at < end && !stop_ && error.empty(); at += chunk_bytes_) {
      const size_t n = std::min<uintptr_t>(chunk_bytes_, end - at);
      // EINTR and EAGAIN leave part of the chunk for the faults to bring in; only a refusal of
      // the advice itself (an old kernel) ends the warm-up.
      if (madvise(reinterpret_cast<void*>(at), n, MADV_POPULATE_READ) != 0 && errno == EINVAL)
        error = std::string("MADV_POPULATE_READ: ") + std::strerror(errno);
      bytes_done_ += n;
    }
    if (stop_ || !error.empty()) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  error_ = error;
  done_ = true;
  done_cv_.notify_all();
}

void PageCacheWarmer::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return done_; });
}

bool PageCacheWarmer::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::string PageCacheWarmer::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace deltafin::io
