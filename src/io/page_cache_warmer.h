// PageCacheWarmer: a background thread that brings ranges of mapped files into memory, in the
// order given, with MADV_POPULATE_READ one chunk at a time. When a whole model fits its budget its
// weights stay mapped, and without this the first tokens fault them in page by page inside the
// GEMVs: on the 2-core VM, 48 tokens of a 13.6 GB k3-scale checkpoint took 31 s from a cold page
// cache mapped against 26 s streamed (docs/PERFORMANCE.md, "A budget sweep").
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace deltafin::io {

class PageCacheWarmer {
 public:
  struct Range {
    const uint8_t* data = nullptr;  // inside a read-only file mapping
    size_t size = 0;
  };

  // Starts at once. Each range is widened to whole pages; ranges may overlap (a page already in
  // memory costs a page-table walk).
  explicit PageCacheWarmer(std::vector<Range> ranges, size_t chunk_bytes = size_t{64} << 20);
  // stop().
  ~PageCacheWarmer();
  PageCacheWarmer(const PageCacheWarmer&) = delete;
  PageCacheWarmer& operator=(const PageCacheWarmer&) = delete;

  // Blocks until every range is in memory or the warmer gave up (see error()).
  void wait();
  // Stops after the chunk in progress and joins; the pages not reached come in by faults.
  void stop();
  bool done() const;
  uint64_t bytes_done() const { return bytes_done_.load(); }
  // Empty unless the kernel refused (MADV_POPULATE_READ needs Linux 5.14); the pages then come in
  // by faults as before.
  std::string error() const;

 private:
  void run();

  std::vector<Range> ranges_;
  size_t chunk_bytes_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bytes_done_{0};
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
  std::thread thread_;
};

}  // namespace deltafin::io
