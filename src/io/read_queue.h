// ReadQueue: asynchronous reads with a bounded number in flight, completed in whatever order the
// device finishes them. Two implementations: io_uring (liburing) and a pread thread pool for
// kernels or sandboxes where io_uring_queue_init fails. DELTAFIN_IO=uring|pread forces one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "io/direct_file.h"

namespace deltafin::io {

struct ReadRequest {
  const DirectFile* file = nullptr;  // must outlive the request
  uint64_t offset = 0;               // kDirectAlignment-aligned for an O_DIRECT file
  size_t length = 0;                 // ditto
  void* dest = nullptr;              // ditto; at least `length` bytes
  uint64_t user_tag = 0;             // returned in the completion
  // Bytes that must arrive; the file may end after that and before `length` (an aligned request
  // that covers a span near EOF). 0 means all of `length`.
  size_t required_bytes = 0;
};

struct ReadCompletion {
  uint64_t user_tag = 0;
  size_t bytes = 0;     // bytes placed at dest
  int error = 0;        // 0, or an errno value (EIO; ENODATA when the file ended too early)
  std::string message;  // names the file and offset when error != 0
  bool ok() const { return error == 0; }
};

// One owner thread submits and collects; implementations may use threads internally.
class ReadQueue {
 public:
  virtual ~ReadQueue() = default;

  virtual const char* name() const = 0;  // "io_uring" or "pread"
  int depth() const { return depth_; }
  // Requests handed to the kernel (or a worker) and not yet finished.
  virtual int in_flight() const = 0;
  // The largest in_flight() seen since construction; never exceeds depth().
  virtual int max_in_flight() const = 0;

  // Starts a read. When depth() reads are in flight it first waits for one to finish (its
  // completion is kept for wait/poll). A request that cannot be valid (misaligned for O_DIRECT,
  // null file) completes at once with an error instead of being issued.
  virtual void submit(const ReadRequest& request) = 0;
  // Blocks for the next completion; false when nothing is in flight or pending, or when wake()
  // was called (since the last wait that returned false for it) before a completion was ready.
  virtual bool wait(ReadCompletion* out) = 0;
  // Makes the owner's wait() return promptly. The one call any thread may make: the owner sleeps
  // in wait() while reads are in flight, and another thread uses this to hand it new work.
  virtual void wake() = 0;
  // A finished completion if there is one, without blocking.
  virtual bool poll(ReadCompletion* out) = 0;

 protected:
  explicit ReadQueue(int depth) : depth_(depth) {}

 private:
  int depth_;
};

enum class QueueKind { kAuto, kUring, kPread };

// kAuto: DELTAFIN_IO when set ("uring" or "pread"), else io_uring when it initializes, else the
// pread pool. Forcing io_uring where it cannot start is a user error (base::Error with why).
std::unique_ptr<ReadQueue> make_read_queue(int depth, QueueKind kind = QueueKind::kAuto);
// nullptr when io_uring is unavailable (not built, or io_uring_queue_init failed); *why_not then
// says why.
std::unique_ptr<ReadQueue> make_uring_queue(int depth, std::string* why_not);
std::unique_ptr<ReadQueue> make_pread_queue(int depth);

}  // namespace deltafin::io
