// Background memory traffic for measurements: threads that each copy one buffer into another in a
// loop until stopped, the way a GEMV streams its weights. `bench-io --memory-load N` runs its reads
// under it, to show how much a disk slows while the CPU streams memory (docs/PERFORMANCE.md).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "base/stopwatch.h"

namespace deltafin::base {

class MemoryLoad {
 public:
  // 128 MiB to copy from and 128 MiB to copy into per thread: with a few threads the pair is still
  // well past a server's last-level cache, so the copies go to DRAM.
  static constexpr size_t kDefaultBufferBytes = size_t{128} << 20;

  // Allocates and touches the buffers, then starts `threads` copying threads.
  explicit MemoryLoad(int threads, size_t buffer_bytes = kDefaultBufferBytes);
  ~MemoryLoad();  // stops
  MemoryLoad(const MemoryLoad&) = delete;
  MemoryLoad& operator=(const MemoryLoad&) = delete;

  // Stops the threads within one copy chunk (4 MiB) and fixes seconds(); later calls do nothing.
  void stop();
  int threads() const { return static_cast<int>(threads_.size()); }
  uint64_t bytes_copied() const { return copied_.load(std::memory_order_relaxed); }
  double seconds() const;  // from the start to stop(), or to now while running
  double gbps() const;     // bytes copied (each read once, written once) per second, 1e9 units

  // One thread's source and destination (tests compare them after stop()).
  const uint8_t* source(int thread) const;
  const uint8_t* destination(int thread) const;

 private:
  void run(int index);

  size_t buffer_bytes_;
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;  // source, destination per thread
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> copied_{0};
  Stopwatch clock_;  // restarted once the buffers are touched
  double stopped_seconds_ = 0;
  bool stopped_ = false;
};

}  // namespace deltafin::base
