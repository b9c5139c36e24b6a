// Timeline: an opt-in record of what the process did when — the forward pass's phases on the
// thread that runs it and every disk read from queueing to completion — written at the end as a
// Chrome trace-event file (open it in ui.perfetto.dev or chrome://tracing; summarize it with
// tools/timeline_report.py). It exists to show where a token's time goes that the per-token
// counters of --stats cannot place: when the disk sat idle and what the CPU was doing then. Off
// by default, when every hook costs one relaxed atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace deltafin::base::timeline {

using Clock = std::chrono::steady_clock;

// Tracks, the trace's "tid": the forward pass on kCompute, read number k of those in flight at
// once on kDiskLane + k (so overlapping reads never share a row).
inline constexpr int kCompute = 1;
inline constexpr int kDiskLane = 100;

namespace detail {
inline std::atomic<bool> recording{false};
}

inline bool on() { return detail::recording.load(std::memory_order_relaxed); }

// Events kept at most (about 150 MB): a server left tracing for hours must not grow without
// bound. Later events are counted, and the file says how many were dropped.
inline constexpr size_t kDefaultMaxEvents = 1'000'000;

// Starts recording into memory; finish() writes `path`. The file is created now, so a bad path
// fails here (base::Error naming it) rather than after the run.
void begin(const std::string& path, size_t max_events = kDefaultMaxEvents);
// Writes the file and stops recording. Safe to call when not recording (does nothing).
void finish();

// One span from t0 to t1 on `track`. `args_json` is the inside of a JSON object (`"layer":3`) or
// empty. `name` and `category` must be string literals (they are kept by pointer).
void span(int track, const char* name, const char* category, Clock::time_point t0,
          Clock::time_point t1, std::string args_json = {});

// A span on kCompute around a block: `Phase p("attention", layer);`.
class Phase {
 public:
  explicit Phase(const char* name, int64_t layer = -1)
      : name_(on() ? name : nullptr),
        layer_(layer),
        t0_(name_ ? Clock::now() : Clock::time_point{}) {}
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  const char* name_;  // nullptr: not recording when the phase began
  int64_t layer_;
  Clock::time_point t0_;
};

}  // namespace deltafin::base::timeline
