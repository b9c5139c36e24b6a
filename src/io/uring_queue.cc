// The io_uring queue: one SQE per request in flight (a short read re-issues the rest in the same
// slot), plus, while the owner sleeps in wait(), one read of an eventfd that wake() writes, so the
// submission ring never holds more than depth() + 1 entries. Built only with liburing.
#include "io/read_queue.h"

#if DELTAFIN_HAVE_URING

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include "base/error.h"
#include "io/read_step.h"

namespace deltafin::io {
namespace {

using detail::ReadState;
using detail::StepResult;

// The SQE length field is 32 bits; longer requests continue as short reads.
constexpr size_t kMaxSqeBytes = size_t{1} << 30;
// user_data of the eventfd read; read slots are 0..depth-1.
constexpr uint64_t kWakeTag = ~uint64_t{0};

class UringQueue final : public ReadQueue {
 public:
  explicit UringQueue(int depth) : ReadQueue(depth), slots_(depth) {
    for (int i = depth - 1; i >= 0; --i) free_.push_back(i);
  }

  // 0, or -errno from io_uring_queue_init (seccomp, io_uring_disabled, old kernel).
  int init() {
    wake_fd_ = eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ < 0) return -errno;
    const int ret = io_uring_queue_init(static_cast<unsigned>(depth() + 1), &ring_, 0);
    initialized_ = ret == 0;
    return ret;
  }

  ~UringQueue() override {
    if (initialized_) {
      // The buffers belong to the caller: never leave the kernel writing into them after we go.
      while (in_flight_ > 0) reap(/*block=*/true);
      if (wake_armed_) wake();
      while (wake_armed_) reap(/*block=*/true);
      io_uring_queue_exit(&ring_);
    }
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  const char* name() const override { return "io_uring"; }
  int in_flight() const override { return in_flight_; }
  int max_in_flight() const override { return max_in_flight_; }

  void submit(const ReadRequest& request) override {
    ReadCompletion rejected;
    if (!detail::check_request(request, &rejected)) {
      ready_.push_back(std::move(rejected));
      return;
    }
    while (in_flight_ == depth()) reap(/*block=*/true);
    const int slot = free_.back();
    free_.pop_back();
    slots_[slot] = ReadState{request, 0};
    ++in_flight_;
    max_in_flight_ = std::max(max_in_flight_, in_flight_);
    issue(slot);
  }

  bool wait(ReadCompletion* out) override {
    if (ready_.empty() && in_flight_ > 0 && !woken_ && !wake_armed_) arm_wake();
    while (ready_.empty() && in_flight_ > 0 && !woken_) reap(/*block=*/true);
    woken_ = false;
    return pop_ready(out);
  }

  void wake() override {
    const uint64_t one = 1;
    while (write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }

  bool poll(ReadCompletion* out) override {
    while (in_flight_ > 0 && reap(/*block=*/false)) {
    }
    return pop_ready(out);
  }

 private:
  bool pop_ready(ReadCompletion* out) {
    if (ready_.empty()) return false;
    *out = std::move(ready_.front());
    ready_.pop_front();
    return true;
  }

  // Puts a read of the eventfd in the ring: it completes when wake() writes (or has written).
  void arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    DF_ASSERT(sqe != nullptr);  // the ring has room for depth() reads and this one
    io_uring_prep_read(sqe, wake_fd_, &wake_count_, sizeof wake_count_, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    wake_armed_ = true;
    submit_ring();
  }

  void submit_ring() {
    for (;;) {
      const int ret = io_uring_submit(&ring_);
      if (ret >= 0) return;
      if (ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
        base::fail("io_uring_submit failed: ", std::strerror(-ret));
      }
    }
  }

  void issue(int slot) {
    const ReadState& s = slots_[slot];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    DF_ASSERT(sqe != nullptr);  // at most depth() SQEs exist and each is submitted at once
    io_uring_prep_read(sqe, s.request.file->fd(), s.next_dest(),
                       static_cast<unsigned>(std::min(s.remaining(), kMaxSqeBytes)),
                       s.next_offset());
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    submit_ring();
  }

  // Handles one completion; returns false when none was available (block == false).
  bool reap(bool block) {
    io_uring_cqe* cqe = nullptr;
    int ret;
    do {
      ret = block ? io_uring_wait_cqe(&ring_, &cqe) : io_uring_peek_cqe(&ring_, &cqe);
    } while (ret == -EINTR);
    if (ret == -EAGAIN || cqe == nullptr) return false;
    if (ret < 0) base::fail("io_uring_wait_cqe failed: ", std::strerror(-ret));
    const uint64_t tag = io_uring_cqe_get_data64(cqe);
    const int result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (tag == kWakeTag) {  // wake() was called: the eventfd's count is consumed by the read
      wake_armed_ = false;
      woken_ = true;
      return true;
    }
    const int slot = static_cast<int>(tag);
    ReadCompletion completion;
    if (detail::apply_result(slots_[slot], result, &completion) == StepResult::kResubmit) {
      issue(slot);
      return true;
    }
    free_.push_back(slot);
    --in_flight_;
    ready_.push_back(std::move(completion));
    return true;
  }

  io_uring ring_{};
  bool initialized_ = false;
  std::vector<ReadState> slots_;
  std::vector<int> free_;
  std::deque<ReadCompletion> ready_;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  int wake_fd_ = -1;
  bool wake_armed_ = false;  // the eventfd read is in the ring
  bool woken_ = false;       // its completion arrived since the last wait()
  uint64_t wake_count_ = 0;  // where that read puts the eventfd's count
};

}  // namespace

std::unique_ptr<ReadQueue> make_uring_queue(int depth, std::string* why_not) {
  auto queue = std::make_unique<UringQueue>(std::max(depth, 1));
  const int ret = queue->init();
  if (ret < 0) {
    if (why_not != nullptr) *why_not = base::str_cat("io_uring_queue_init: ", std::strerror(-ret));
    return nullptr;
  }
  return queue;
}

}  // namespace deltafin::io

#else  // !DELTAFIN_HAVE_URING

namespace deltafin::io {

std::unique_ptr<ReadQueue> make_uring_queue(int, std::string* why_not) {
  if (why_not != nullptr) *why_not = "deltafin was built without liburing";
  return nullptr;
}

}  // namespace deltafin::io

#endif
