// ReadScheduler: the one thread that owns the process's ReadQueue (a queue belongs to one thread)
// and feeds it from prioritized job lists, so expert reads the current layer waits on go before
// the next spine layer, and both before speculative prefetches. Completions run callbacks on the
// I/O thread; the owners of the buffers (expert store, spine streamer) wake their waiters there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "io/direct_file.h"
#include "io/read_queue.h"

namespace deltafin::experts {

enum class ReadPriority {
  kDemand = 0,    // experts of the layer being computed
  kSpine = 1,     // the next streamed spine layer
  kPrefetch = 2,  // predicted experts: only worth the disk's idle time
};
inline constexpr int kReadPriorities = 3;

struct ReadJob {
  const io::DirectFile* file = nullptr;  // must outlive the job
  uint64_t offset = 0;                   // aligned for O_DIRECT (see io::align_span)
  size_t length = 0;
  size_t required_bytes = 0;  // 0: all of length
  void* dest = nullptr;
  ReadPriority priority = ReadPriority::kDemand;
  // Runs on the I/O thread when the read finishes (or fails, or is dropped at shutdown with
  // ECANCELED). Must not call back into the scheduler's blocking functions.
  std::function<void(const io::ReadCompletion&)> done;
  // What the read is for, shown on the timeline (base/timeline.h); -1 where it does not apply.
  int trace_layer = -1;
  int trace_expert = -1;
};

// Cumulative figures; GB/s = bytes / busy seconds is what the device gave while it had work.
struct ReadSchedulerStats {
  uint64_t bytes[kReadPriorities] = {};  // read, by priority
  uint64_t reads = 0;
  double busy_seconds = 0;  // time with at least one read in flight
};

class ReadScheduler {
 public:
  // depth: reads in flight at once. kind: io_uring or the pread pool (kAuto picks as
  // io::make_read_queue does).
  explicit ReadScheduler(int depth, io::QueueKind kind = io::QueueKind::kAuto);
  // Drops queued jobs (their callbacks see ECANCELED) and waits for the reads in flight.
  ~ReadScheduler();
  ReadScheduler(const ReadScheduler&) = delete;
  ReadScheduler& operator=(const ReadScheduler&) = delete;

  const char* queue_name() const { return queue_name_; }
  int depth() const { return depth_; }

  // Queues a read; returns its id (never 0).
  uint64_t submit(ReadJob job);
  // Removes a job that has not reached the device yet; its callback never runs. False when it
  // was already issued (or finished): the read completes normally.
  bool cancel(uint64_t id);
  // Moves a queued job to a more urgent priority (a prefetch the route now demands).
  void promote(uint64_t id, ReadPriority priority);

  ReadSchedulerStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Queued {
    uint64_t id;
    ReadJob job;
    Clock::time_point queued_at;  // recorded only while the timeline records
  };
  struct Issued {
    ReadJob job;
    Clock::time_point queued_at, issued_at;
    int lane;  // which of the depth reads in flight it is (timeline rows)
  };

  void run();
  bool pop_next(Queued* out);  // highest priority first, FIFO within one; caller holds mu_
  // One read on the timeline: issued → now, with its priority (the final one), layer, expert.
  void trace_read(const ReadJob& job, const Issued& done, uint64_t bytes);

  int depth_;
  const char* queue_name_ = "";
  // Touched only by the I/O thread after construction, except for wake().
  std::unique_ptr<io::ReadQueue> queue_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queued_[kReadPriorities];
  std::map<uint64_t, Issued> issued_;  // by id (the queue's user_tag)
  std::vector<bool> lane_busy_;        // [depth]
  uint64_t next_id_ = 1;
  bool stop_ = false;
  ReadSchedulerStats stats_;
  Clock::time_point busy_since_;
  std::thread thread_;
};

}  // namespace deltafin::experts
