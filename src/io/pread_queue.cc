// The pread pool: depth() worker threads, each doing one blocking pread loop at a time. Used
// where io_uring is unavailable (seccomp filters, old kernels) and as a comparison point.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include <cerrno>

#include "io/read_queue.h"
#include "io/read_step.h"

namespace deltafin::io {
namespace {

using detail::ReadState;
using detail::StepResult;

class PreadQueue final : public ReadQueue {
 public:
  explicit PreadQueue(int depth) : ReadQueue(depth) {
    for (int i = 0; i < depth; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  ~PreadQueue() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  const char* name() const override { return "pread"; }

  int in_flight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }

  int max_in_flight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_;
  }

  void submit(const ReadRequest& request) override {
    ReadCompletion rejected;
    std::unique_lock<std::mutex> lock(mu_);
    if (!detail::check_request(request, &rejected)) {
      done_.push_back(std::move(rejected));
      return;
    }
    done_cv_.wait(lock, [&] { return in_flight_ < depth(); });
    pending_.push_back(ReadState{request, 0});
    ++in_flight_;
    if (in_flight_ > max_in_flight_) max_in_flight_ = in_flight_;
    work_cv_.notify_one();
  }

  bool wait(ReadCompletion* out) override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return !done_.empty() || in_flight_ == 0 || woken_; });
    woken_ = false;
    return pop_done(out);
  }

  void wake() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken_ = true;
    }
    done_cv_.notify_all();
  }

  bool poll(ReadCompletion* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    return pop_done(out);
  }

 private:
  bool pop_done(ReadCompletion* out) {
    if (done_.empty()) return false;
    *out = std::move(done_.front());
    done_.pop_front();
    return true;
  }

  void worker_loop() {
    for (;;) {
      ReadState state;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (stop_) return;
        state = pending_.front();
        pending_.pop_front();
      }
      ReadCompletion completion;
      for (;;) {
        const ssize_t got = pread(state.request.file->fd(), state.next_dest(), state.remaining(),
                                  static_cast<off_t>(state.next_offset()));
        if (detail::apply_result(state, got < 0 ? -errno : got, &completion) ==
            StepResult::kFinished) {
          break;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        --in_flight_;
        done_.push_back(std::move(completion));
      }
      // Both a waiting submit (a slot freed) and a waiting wait (a completion) may need this.
      done_cv_.notify_all();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<ReadState> pending_;
  std::deque<ReadCompletion> done_;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  bool stop_ = false;
  bool woken_ = false;  // wake() since the last wait()
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<ReadQueue> make_pread_queue(int depth) {
  return std::make_unique<PreadQueue>(depth < 1 ? 1 : depth);
}

}  // namespace deltafin::io
