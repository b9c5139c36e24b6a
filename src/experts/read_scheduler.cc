// ReadScheduler: the I/O thread's loop. It sleeps on a condition variable while nothing is in
// flight, and otherwise in the queue's wait(). A job queued while fewer than depth reads are in
// flight wakes that wait and is issued at once: a route's reads must not queue behind a guess
// that happens to be the only read in flight (measured: 13.6 ms of a 180 ms token, K3-scale).
#include "experts/read_scheduler.h"

#include <cerrno>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/timeline.h"

namespace deltafin::experts {

ReadScheduler::ReadScheduler(int depth, io::QueueKind kind)
    : depth_(std::max(depth, 1)),
      queue_(io::make_read_queue(depth_, kind)),
      lane_busy_(static_cast<size_t>(depth_), false) {
  queue_name_ = queue_->name();
  thread_ = std::thread([this] { run(); });
}

ReadScheduler::~ReadScheduler() {
  std::vector<ReadJob> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (std::deque<Queued>& q : queued_) {
      for (Queued& item : q) dropped.push_back(std::move(item.job));
      q.clear();
    }
  }
  cv_.notify_all();
  thread_.join();
  for (ReadJob& job : dropped) {
    io::ReadCompletion c;
    c.error = ECANCELED;
    c.message = "read cancelled at shutdown";
    if (job.done) job.done(c);
  }
}

uint64_t ReadScheduler::submit(ReadJob job) {
  uint64_t id;
  bool wake_queue;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DF_ASSERT(!stop_);
    id = next_id_++;
    const Clock::time_point now = base::timeline::on() ? Clock::now() : Clock::time_point{};
    queued_[static_cast<int>(job.priority)].push_back({id, std::move(job), now});
    // The I/O thread is in the queue's wait() exactly when something is in flight.
    wake_queue = !issued_.empty() && static_cast<int>(issued_.size()) < depth_;
  }
  if (wake_queue) queue_->wake();
  cv_.notify_one();
  return id;
}

bool ReadScheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (std::deque<Queued>& q : queued_) {
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it->id == id) {
        q.erase(it);
        return true;
      }
    }
  }
  return false;
}

void ReadScheduler::promote(uint64_t id, ReadPriority priority) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int p = static_cast<int>(priority) + 1; p < kReadPriorities; ++p) {
    for (auto it = queued_[p].begin(); it != queued_[p].end(); ++it) {
      if (it->id == id) {
        Queued item = std::move(*it);
        queued_[p].erase(it);
        item.job.priority = priority;
        queued_[static_cast<int>(priority)].push_back(std::move(item));
        return;
      }
    }
  }
}

ReadSchedulerStats ReadScheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ReadSchedulerStats s = stats_;
  if (!issued_.empty())
    s.busy_seconds += std::chrono::duration<double>(Clock::now() - busy_since_).count();
  return s;
}

void ReadScheduler::trace_read(const ReadJob& job, const Issued& done, uint64_t bytes) {
  static const char* const kNames[kReadPriorities] = {"demand", "spine", "prefetch"};
  const char* name = kNames[static_cast<int>(job.priority)];
  const double queued_ms =
      std::chrono::duration<double, std::milli>(done.issued_at - done.queued_at).count();
  base::timeline::span(
      base::timeline::kDiskLane + done.lane, name, "read", done.issued_at, Clock::now(),
      base::str_cat("\"layer\":", job.trace_layer, ",\"expert\":", job.trace_expert,
                    ",\"bytes\":", bytes, ",\"queued_ms\":", queued_ms));
}

bool ReadScheduler::pop_next(Queued* out) {
  for (std::deque<Queued>& q : queued_) {
    if (!q.empty()) {
      *out = std::move(q.front());
      q.pop_front();
      return true;
    }
  }
  return false;
}

void ReadScheduler::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      if (stop_ || !issued_.empty()) return true;
      for (const std::deque<Queued>& q : queued_)
        if (!q.empty()) return true;
      return false;
    });
    if (stop_ && issued_.empty()) return;
    Queued next;
    while (!stop_ && static_cast<int>(issued_.size()) < depth_ && pop_next(&next)) {
      if (issued_.empty()) busy_since_ = Clock::now();
      const io::ReadRequest request{next.job.file, next.job.offset, next.job.length,
                                    next.job.dest, next.id,         next.job.required_bytes};
      int lane = 0;
      while (lane_busy_[lane]) ++lane;  // fewer than depth_ are busy
      lane_busy_[lane] = true;
      issued_.emplace(next.id,
                      Issued{std::move(next.job), next.queued_at,
                             base::timeline::on() ? Clock::now() : Clock::time_point{}, lane});
      lock.unlock();
      queue_->submit(request);  // never blocks: fewer than depth reads are in flight
      lock.lock();
    }
    if (issued_.empty()) continue;
    lock.unlock();
    io::ReadCompletion completion;
    const bool got = queue_->wait(&completion);
    lock.lock();
    if (!got) continue;  // woken: a job was queued, and there is room to issue it
    auto it = issued_.find(completion.user_tag);
    DF_ASSERT(it != issued_.end());
    Issued done = std::move(it->second);
    ReadJob job = std::move(done.job);
    issued_.erase(it);
    lane_busy_[done.lane] = false;
    if (base::timeline::on()) trace_read(job, done, completion.bytes);
    stats_.bytes[static_cast<int>(job.priority)] += completion.bytes;
    ++stats_.reads;
    if (issued_.empty())
      stats_.busy_seconds += std::chrono::duration<double>(Clock::now() - busy_since_).count();
    lock.unlock();
    if (job.done) job.done(completion);  // without mu_: owners take their own locks here
    lock.lock();
  }
}

}  // namespace deltafin::experts
