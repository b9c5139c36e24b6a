// ReadScheduler: the one thread that owns the process's ReadQueue (a queue belongs to one thread)
// and feeds it from prioritized job lists, so reads a computation waits on go before those the
// next step needs, and both before speculative ones (for the engine: the current layer's experts,
// then the next streamed spine layer, then predicted experts). A job may be split into pieces
// issued one after another: then a more urgent job overtakes it at the next piece, and a cancel
// stops it there instead of letting a wrong guess read to its end. Completions run callbacks on
// the I/O thread; the owners of the buffers (expert store, spine streamer) wake their waiters
// there.
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

#include "base/stopwatch.h"
#include "io/direct_file.h"
#include "io/drive.h"
#include "io/read_queue.h"

namespace deltafin::io {

enum class ReadPriority {
  kNow = 0,          // a computation is waiting for it (the current layer's experts)
  kNext = 1,         // the next step needs it (the next streamed spine layer)
  kSpeculative = 2,  // a guess (predicted experts): only worth the disk's idle time
};
inline constexpr int kReadPriorities = 3;

struct ReadJob {
  const DirectFile* file = nullptr;  // must outlive the job
  uint64_t offset = 0;               // aligned for O_DIRECT (see align_span)
  size_t length = 0;
  size_t required_bytes = 0;  // 0: all of length
  void* dest = nullptr;
  ReadPriority priority = ReadPriority::kNow;
  // Runs on the I/O thread when the read finishes (or fails, or is dropped at shutdown or stopped
  // by cancel() with ECANCELED). Must not call back into the scheduler's blocking functions.
  std::function<void(const ReadCompletion&)> done;
  // What the read is for, shown on the timeline (base/timeline.h); -1 where it does not apply.
  int trace_layer = -1;
  int trace_expert = -1;
  // > 0 (a multiple of kDirectAlignment): issued as requests of at most this many bytes, in
  // order, each taking one of the depth lanes. 0: one request.
  size_t piece_bytes = 0;
  // Which drive (DriveTable index) holds `file`; -1: found from the file's st_dev at submit.
  int drive = -1;
};

enum class CancelResult {
  kDropped,   // nothing had reached the device: the callback never runs
  kStopping,  // pieces are in flight: the rest are dropped, and the callback runs with ECANCELED
              // once those land (the bytes they placed are in its completion)
  kTooLate,   // every piece was issued, or the job finished: it completes normally
};

// Cumulative figures; GB/s = bytes / busy seconds is what the device gave while it had work.
struct ReadSchedulerStats {
  uint64_t bytes[kReadPriorities] = {};  // read, by priority
  uint64_t requests = 0;                 // issued to the device (pieces count one each)
  double busy_seconds = 0;               // time with at least one read in flight
};

class ReadScheduler {
 public:
  // depth: requests in flight at once on each drive; max_drives: drives that may be busy at once
  // (the queue holds depth * max_drives). kind: io_uring or the pread pool (kAuto picks as
  // make_read_queue does). Each drive has its own job lists, depth and figures (drives()).
  explicit ReadScheduler(int depth, QueueKind kind = QueueKind::kAuto, int max_drives = 1);
  // Over a queue the caller made (tests inject failures with a wrapping queue): depth per drive,
  // the queue's depth in all.
  ReadScheduler(std::unique_ptr<ReadQueue> queue, int depth);
  // Drops queued jobs (their callbacks see ECANCELED) and waits for the reads in flight.
  ~ReadScheduler();
  ReadScheduler(const ReadScheduler&) = delete;
  ReadScheduler& operator=(const ReadScheduler&) = delete;

  int depth() const { return depth_; }

  // Queues a read; returns its id (never 0).
  uint64_t submit(ReadJob job);
  // Stops a job at its next piece (see CancelResult).
  CancelResult cancel(uint64_t id);
  // Moves a job with pieces left to issue to a more urgent priority (a prefetch the route now
  // demands); the pieces already issued keep theirs.
  void promote(uint64_t id, ReadPriority priority);

  ReadSchedulerStats stats() const;
  // Every drive a job has named or whose file was submitted; dispatch picks holders here.
  DriveTable& drives() { return drives_; }
  const DriveTable& drives() const { return drives_; }

 private:
  using Clock = std::chrono::steady_clock;
  // A submitted job, from submit() until its callback runs (or cancel() drops it).
  struct Job {
    ReadJob job;
    uint64_t issue_end = 0;  // bytes to issue: length, or with pieces the required bytes aligned up
    uint64_t issued = 0;     // bytes of it issued so far
    int in_flight = 0;       // pieces on the device
    size_t bytes = 0;        // bytes placed by the pieces that landed
    int error = 0;           // the first failure; no piece is issued after it
    std::string message;
    bool cancelled = false;       // stopped by cancel() or shutdown with pieces in flight
    Clock::time_point queued_at;  // recorded only while the timeline records
    bool stopped() const { return error != 0 || cancelled; }
  };
  struct Piece {
    uint64_t job;
    ReadPriority priority;
    Clock::time_point queued_at, issued_at;
    int lane;  // which of the depth requests in flight it is (timeline rows)
    int drive = 0;
    uint64_t length = 0;
  };

  void run();
  // The next piece of the most urgent job (FIFO within a priority) as a request with a new tag;
  // false when nothing is queued. Caller holds mu_.
  bool pop_next(ReadRequest* request, Piece* piece);
  void unqueue(uint64_t id);  // caller holds mu_
  // The job's bytes that will never be issued leave its drive's queue. Caller holds mu_.
  void release_unissued(Job& job);
  // A landed piece. Returns the job's callback and completion when that was its last piece.
  bool piece_done(const ReadCompletion& c, const Piece& piece,
                  std::function<void(const ReadCompletion&)>* done, ReadCompletion* out);
  // One request on the timeline: issued → now, with its priority, layer, expert.
  void trace_read(const ReadJob& job, const Piece& piece, uint64_t bytes);

  int depth_;        // per drive
  int total_depth_;  // the queue's
  DriveTable drives_;
  std::vector<int> drive_in_flight_;  // [drive], under mu_
  // Touched only by the I/O thread after construction, except for wake().
  std::unique_ptr<ReadQueue> queue_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Job> jobs_;                  // by id
  std::deque<uint64_t> queued_[kReadPriorities];  // jobs with pieces left to issue
  std::map<uint64_t, Piece> issued_;              // by the queue's user_tag
  std::vector<bool> lane_busy_;                   // [depth]
  uint64_t next_id_ = 1;
  uint64_t next_tag_ = 1;
  bool stop_ = false;
  ReadSchedulerStats stats_;
  base::Stopwatch busy_;  // since the device last went from idle to busy
  std::thread thread_;
};

}  // namespace deltafin::io
