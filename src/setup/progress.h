// Download progress on stderr: a redrawn bar with rate and ETA when stderr is a terminal, plain
// periodic lines otherwise (logs, CI), so long installs always show they are alive.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "base/stopwatch.h"

namespace deltafin::setup {

class Progress {
 public:
  // `done_bytes` counts what was already there (a resumed download). The interval between plain
  // lines is DELTAFIN_PROGRESS_INTERVAL_MS (default 10 s; 250 ms for the bar);
  // DELTAFIN_PROGRESS=bar|plain|off overrides the terminal check.
  Progress(std::string label, uint64_t total_bytes, uint64_t done_bytes = 0);
  ~Progress();  // calls finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t n_bytes) { done_.fetch_add(n_bytes, std::memory_order_relaxed); }
  void add_total(uint64_t n_bytes) { total_.fetch_add(n_bytes, std::memory_order_relaxed); }
  uint64_t done() const { return done_.load(std::memory_order_relaxed); }
  // Stops the drawing thread and prints the final line (once).
  void finish();

  // "[#######.....]  45%  1.20 GB / 2.60 GB  120 MB/s  ETA 0:12" (bar) or the same without it.
  static std::string render(const std::string& label, uint64_t done, uint64_t total,
                            double bytes_per_s, bool bar);

 private:
  enum class Style { kBar, kPlain, kOff };
  void loop();
  void draw(bool final);

  std::string label_;
  std::atomic<uint64_t> total_;
  std::atomic<uint64_t> done_;
  uint64_t start_done_;
  Style style_;
  std::chrono::milliseconds interval_;
  base::Stopwatch since_start_;
  // Rate over a sliding window of recent samples, so the ETA follows the current speed.
  base::Stopwatch window_;
  uint64_t window_done_;
  double rate_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace deltafin::setup
