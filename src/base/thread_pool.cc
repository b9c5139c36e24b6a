// ThreadPool: workers wait on a generation counter; each owns chunk `index` of every job that has
// at least index + 1 active threads.
#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>

namespace deltafin::base {
namespace {

void chunk_range(size_t n, size_t grain, int parts, int index, size_t* begin, size_t* end) {
  const size_t units = (n + grain - 1) / grain;
  const size_t per = units / parts, extra = units % parts;
  const size_t ub = index * per + std::min<size_t>(index, extra);
  const size_t ue = ub + per + (static_cast<size_t>(index) < extra ? 1 : 0);
  *begin = std::min(n, ub * grain);
  *end = std::min(n, ue * grain);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)), active_(n_threads_) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* job;
    size_t n, grain;
    int parts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A worker beyond the job's active threads sits it out, neither running nor counted.
      work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && index < job_parts_); });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      grain = job_grain_;
      parts = job_parts_;
    }
    size_t b, e;
    chunk_range(n, grain, parts, index, &b, &e);
    if (b < e) (*job)(b, e);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  std::unique_lock<std::mutex> lock(mu_);
  const int parts = active_;
  if (parts == 1 || n <= grain) {
    lock.unlock();
    fn(0, n);
    return;
  }
  // One job at a time: the job fields and pending_ belong to the caller that set busy_.
  idle_cv_.wait(lock, [&] { return !busy_; });
  busy_ = true;
  job_ = &fn;
  job_parts_ = parts;
  job_n_ = n;
  job_grain_ = grain;
  pending_ = parts - 1;
  ++generation_;
  lock.unlock();
  work_cv_.notify_all();
  size_t b, e;
  chunk_range(n, grain, parts, 0, &b, &e);
  if (b < e) fn(b, e);
  lock.lock();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  busy_ = false;
  lock.unlock();
  idle_cv_.notify_one();
}

void ThreadPool::set_active_threads(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = std::clamp(n, 1, n_threads_);
}

int ThreadPool::active_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& default_pool() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("DELTAFIN_THREADS")) {
      const int n = std::atoi(env);
      if (n > 0) return n;
    }
    return available_cpus();
  }());
  return pool;
}

}  // namespace deltafin::base
