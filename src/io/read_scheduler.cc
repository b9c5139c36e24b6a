// ReadScheduler: the I/O thread's loop. It sleeps on a condition variable while nothing is in
// flight, and otherwise in the queue's wait(). A job queued while fewer than depth requests are in
// flight wakes that wait and is issued at once: a route's reads must not queue behind a guess
// that happens to be the only read in flight (measured: 13.6 ms of a 180 ms token, K3-scale).
// Jobs with pieces stay at the head of their priority's queue until their last piece is issued,
// so the lanes go to one expert after another and each completes as early as it can.
#include "io/read_scheduler.h"

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/timeline.h"

namespace deltafin::io {
namespace {

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// The bytes that must arrive (ReadJob::required_bytes, where 0 means all of length).
size_t required_of(const ReadJob& job) {
  return job.required_bytes == 0 ? job.length : job.required_bytes;
}

}  // namespace

ReadScheduler::ReadScheduler(int depth, QueueKind kind, int max_drives)
    : depth_(std::max(depth, 1)),
      total_depth_(depth_ * std::max(max_drives, 1)),
      queue_(make_read_queue(total_depth_, kind)),
      lane_busy_(static_cast<size_t>(total_depth_), false) {
  thread_ = std::thread([this] { run(); });
}

ReadScheduler::ReadScheduler(std::unique_ptr<ReadQueue> queue, int depth)
    : depth_(std::max(depth, 1)),
      total_depth_(queue->depth()),
      queue_(std::move(queue)),
      lane_busy_(static_cast<size_t>(total_depth_), false) {
  thread_ = std::thread([this] { run(); });
}

ReadScheduler::~ReadScheduler() {
  std::vector<ReadJob> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (std::deque<uint64_t>& q : queued_) {
      for (uint64_t id : q) {
        Job& job = jobs_.at(id);
        release_unissued(job);
        if (job.in_flight > 0) {
          job.cancelled = true;  // its callback runs when the pieces in flight land
        } else {
          dropped.push_back(std::move(job.job));
          jobs_.erase(id);
        }
      }
      q.clear();
    }
  }
  cv_.notify_all();
  thread_.join();
  for (ReadJob& job : dropped) {
    ReadCompletion c;
    c.error = ECANCELED;
    c.message = "read cancelled at shutdown";
    if (job.done) job.done(c);
  }
}

uint64_t ReadScheduler::submit(ReadJob job) {
  DF_ASSERT(job.length > 0 && job.piece_bytes % kDirectAlignment == 0);
  if (job.drive < 0) {
    // fstat, not a cache by descriptor: descriptors are reused once a cache file closes.
    job.drive = job.file != nullptr ? drives_.drive_of_fd(job.file->fd()) : -1;
    if (job.drive < 0) job.drive = drives_.drive_of_device(0);
  }
  DF_ASSERT(job.drive < drives_.size());
  uint64_t id;
  bool wake_queue;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DF_ASSERT(!stop_);
    id = next_id_++;
    Job& j = jobs_[id];
    // Pieces past the required bytes could find the end of the file; one whole request asks
    // for its aligned length as the queue expects.
    j.issue_end = job.piece_bytes > 0 ? align_up(required_of(job), kDirectAlignment) : job.length;
    j.queued_at = base::timeline::on() ? Clock::now() : Clock::time_point{};
    queued_[static_cast<int>(job.priority)].push_back(id);
    drives_.on_queued(job.drive, j.issue_end);
    if (drive_in_flight_.size() <= static_cast<size_t>(job.drive))
      drive_in_flight_.resize(job.drive + 1, 0);
    j.job = std::move(job);
    // The I/O thread is in the queue's wait() exactly when something is in flight.
    wake_queue = !issued_.empty() && static_cast<int>(issued_.size()) < total_depth_;
  }
  if (wake_queue) queue_->wake();
  cv_.notify_one();
  return id;
}

void ReadScheduler::release_unissued(Job& job) {
  if (job.issued < job.issue_end) drives_.on_dropped(job.job.drive, job.issue_end - job.issued);
  job.issue_end = job.issued;
}

void ReadScheduler::unqueue(uint64_t id) {
  for (std::deque<uint64_t>& q : queued_) {
    auto it = std::find(q.begin(), q.end(), id);
    if (it != q.end()) {
      q.erase(it);
      return;
    }
  }
}

CancelResult ReadScheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return CancelResult::kTooLate;
  Job& job = it->second;
  if (job.cancelled) return CancelResult::kStopping;
  if (job.issued >= job.issue_end || job.error != 0) return CancelResult::kTooLate;
  unqueue(id);
  release_unissued(job);
  if (job.issued == 0) {
    jobs_.erase(it);
    return CancelResult::kDropped;
  }
  job.cancelled = true;
  return CancelResult::kStopping;
}

void ReadScheduler::promote(uint64_t id, ReadPriority priority) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int p = static_cast<int>(priority) + 1; p < kReadPriorities; ++p) {
    auto it = std::find(queued_[p].begin(), queued_[p].end(), id);
    if (it == queued_[p].end()) continue;
    queued_[p].erase(it);
    jobs_.at(id).job.priority = priority;
    queued_[static_cast<int>(priority)].push_back(id);
    return;
  }
}

ReadSchedulerStats ReadScheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ReadSchedulerStats s = stats_;
  if (!issued_.empty()) s.busy_seconds += busy_.elapsed_seconds();
  return s;
}

void ReadScheduler::trace_read(const ReadJob& job, const Piece& piece, uint64_t bytes) {
  static const char* const kNames[kReadPriorities] = {"demand", "spine", "prefetch"};
  const char* name = kNames[static_cast<int>(piece.priority)];
  const double queued_ms = base::ms_between(piece.queued_at, piece.issued_at);
  base::timeline::span(
      base::timeline::kDiskLane + piece.lane, name, "read", piece.issued_at, Clock::now(),
      base::str_cat("\"layer\":", job.trace_layer, ",\"expert\":", job.trace_expert,
                    ",\"bytes\":", bytes, ",\"queued_ms\":", queued_ms));
}

bool ReadScheduler::pop_next(ReadRequest* request, Piece* piece) {
  for (std::deque<uint64_t>& q : queued_) {
    // FIFO within the priority, skipping jobs whose drive has its depth in flight: a busy drive
    // must not hold back a read another drive could start.
    for (auto qi = q.begin(); qi != q.end(); ++qi) {
      const uint64_t id = *qi;
      Job& job = jobs_.at(id);
      const ReadJob& r = job.job;
      if (drive_in_flight_[r.drive] >= depth_) continue;
      const uint64_t at = job.issued;
      const uint64_t length =
          r.piece_bytes > 0 ? std::min<uint64_t>(r.piece_bytes, job.issue_end - at) : r.length;
      const size_t required = required_of(r);
      *request = {r.file, r.offset + at, length, static_cast<uint8_t*>(r.dest) + at, next_tag_++,
                  // Only the piece that holds the end of the required bytes may come back short.
                  required < at + length ? required - at : 0};
      *piece = {id, r.priority, job.queued_at, Clock::time_point{}, 0, r.drive, length};
      job.issued += length;
      ++job.in_flight;
      ++drive_in_flight_[r.drive];
      if (job.issued >= job.issue_end) q.erase(qi);
      return true;
    }
  }
  return false;
}

bool ReadScheduler::piece_done(const ReadCompletion& c, const Piece& piece,
                               std::function<void(const ReadCompletion&)>* done,
                               ReadCompletion* out) {
  auto it = jobs_.find(piece.job);
  DF_ASSERT(it != jobs_.end());
  Job& job = it->second;
  --job.in_flight;
  job.bytes += c.bytes;
  if (!c.ok() && job.error == 0) {
    job.error = c.error;
    job.message = c.message;
    if (job.issued < job.issue_end) unqueue(piece.job);
    release_unissued(job);
  }
  if (job.in_flight > 0 || (!job.stopped() && job.issued < job.issue_end)) return false;
  out->user_tag = piece.job;
  out->bytes = job.bytes;
  out->error = job.error;
  out->message = std::move(job.message);
  if (job.error == 0 && job.cancelled) {
    out->error = ECANCELED;
    out->message = "read cancelled";
  }
  *done = std::move(job.job.done);
  jobs_.erase(it);
  return true;
}

void ReadScheduler::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      if (stop_ || !issued_.empty()) return true;
      for (const std::deque<uint64_t>& q : queued_)
        if (!q.empty()) return true;
      return false;
    });
    if (stop_ && issued_.empty()) return;
    ReadRequest request;
    Piece piece;
    while (!stop_ && static_cast<int>(issued_.size()) < total_depth_ &&
           pop_next(&request, &piece)) {
      if (issued_.empty()) busy_.restart();
      int lane = 0;
      while (lane_busy_[lane]) ++lane;  // fewer than total_depth_ are busy
      lane_busy_[lane] = true;
      piece.lane = lane;
      if (base::timeline::on()) piece.issued_at = Clock::now();
      issued_.emplace(request.user_tag, piece);
      ++stats_.requests;
      drives_.on_issued(piece.drive);
      lock.unlock();
      queue_->submit(request);  // never blocks: fewer than depth requests are in flight
      lock.lock();
    }
    if (issued_.empty()) continue;
    lock.unlock();
    ReadCompletion completion;
    const bool got = queue_->wait(&completion);
    lock.lock();
    if (!got) continue;  // woken: a job was queued, and there is room to issue it
    auto it = issued_.find(completion.user_tag);
    DF_ASSERT(it != issued_.end());
    const Piece landed = it->second;
    issued_.erase(it);
    lane_busy_[landed.lane] = false;
    --drive_in_flight_[landed.drive];
    drives_.on_completed(landed.drive, landed.length, completion.bytes, completion.ok());
    if (base::timeline::on()) trace_read(jobs_.at(landed.job).job, landed, completion.bytes);
    stats_.bytes[static_cast<int>(landed.priority)] += completion.bytes;
    if (issued_.empty()) stats_.busy_seconds += busy_.elapsed_seconds();
    std::function<void(const ReadCompletion&)> done;
    ReadCompletion finished;
    if (!piece_done(completion, landed, &done, &finished)) continue;
    lock.unlock();
    if (done) done(finished);  // without mu_: owners take their own locks here
    lock.lock();
  }
}

}  // namespace deltafin::io
