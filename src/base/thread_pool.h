// A fixed pool of worker threads for data-parallel kernels: parallel_for splits [0, n) into
// contiguous chunks, one per thread, so each thread's rows are fixed and results never depend on
// scheduling. Callers on several threads (a drafter beside the target) take turns a job at a time.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltafin::base {

class ThreadPool {
 public:
  // n_threads includes the calling thread; 1 means run inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // How many of the pool's threads run each parallel_for from now on (1..size()); the rest stay
  // idle. Each kernel's rows are computed the same way whatever the split, so results do not
  // change with it; only the memory bandwidth the pool draws does.
  void set_active_threads(int n);
  int active_threads() const;

  // Calls fn(begin, end) on disjoint chunks covering [0, n); chunk boundaries are multiples of
  // `grain` (except the end). Blocks until all chunks are done. Safe to call from several threads
  // at once: a job waits for the one in flight to finish, then runs with the same split it would
  // have had alone. Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  int active_;
  std::vector<std::thread> workers_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::condition_variable idle_cv_;  // a caller waits here while another caller's job runs
  bool busy_ = false;                // a job is posted and not yet finished
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  int job_parts_ = 1;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// Runs a pool's jobs on n of its threads until restore() or the end of the scope.
class ActiveThreads {
 public:
  ActiveThreads(ThreadPool& pool, int n) : pool_(pool), before_(pool.active_threads()) {
    pool.set_active_threads(n);
  }
  ~ActiveThreads() { restore(); }
  ActiveThreads(const ActiveThreads&) = delete;
  ActiveThreads& operator=(const ActiveThreads&) = delete;
  void restore() { pool_.set_active_threads(before_); }

 private:
  ThreadPool& pool_;
  int before_;
};

// Process-wide pool sized from DELTAFIN_THREADS or the CPUs this process may use.
ThreadPool& default_pool();
int available_cpus();

}  // namespace deltafin::base
