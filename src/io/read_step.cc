// Request validation and short-read handling shared by the io_uring and pread queues.
#include "io/read_step.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace deltafin::io::detail {
namespace {

using base::str_cat;

size_t required_of(const ReadRequest& request) {
  return request.required_bytes == 0 ? request.length : request.required_bytes;
}

void finish(const ReadState& state, int error, std::string message, ReadCompletion* out) {
  const ReadRequest& r = state.request;
  if (r.file->mode() == ReadMode::kBuffered && state.done > 0) {
    posix_fadvise(r.file->fd(), static_cast<off_t>(r.offset), static_cast<off_t>(state.done),
                  POSIX_FADV_DONTNEED);
  }
  out->user_tag = r.user_tag;
  out->bytes = state.done;
  out->error = error;
  out->message = std::move(message);
}

}  // namespace

bool check_request(const ReadRequest& r, ReadCompletion* out) {
  std::string problem;
  if (r.file == nullptr || !r.file->is_open()) {
    problem = "read request without an open file";
  } else if (r.dest == nullptr && r.length > 0) {
    problem = str_cat("read of ", r.file->path(), " at offset ", r.offset, " has no buffer");
  } else if (r.required_bytes > r.length) {
    problem = str_cat("read of ", r.file->path(), " at offset ", r.offset, " requires ",
                      r.required_bytes, " bytes of a ", r.length, "-byte request");
  } else if (r.file->mode() == ReadMode::kDirect &&
             (r.offset % kDirectAlignment != 0 || r.length % kDirectAlignment != 0 ||
              reinterpret_cast<uintptr_t>(r.dest) % kDirectAlignment != 0)) {
    problem = str_cat("O_DIRECT read of ", r.file->path(), " at offset ", r.offset, " (", r.length,
                      " bytes) is not aligned to ", kDirectAlignment,
                      " bytes in offset, length and buffer address");
  }
  if (problem.empty()) return true;
  out->user_tag = r.user_tag;
  out->bytes = 0;
  out->error = EINVAL;
  out->message = std::move(problem);
  return false;
}

StepResult apply_result(ReadState& state, ssize_t result, ReadCompletion* out) {
  const ReadRequest& r = state.request;
  if (result == -EINTR || result == -EAGAIN) return StepResult::kResubmit;
  if (result < 0) {
    const int err = static_cast<int>(-result);
    finish(state, err,
           str_cat("read of ", r.file->path(), " at offset ", state.next_offset(), " (",
                   state.remaining(), " bytes) failed: ", std::strerror(err)),
           out);
    return StepResult::kFinished;
  }
  state.done += static_cast<size_t>(result);
  if (state.done == r.length) {
    finish(state, 0, {}, out);
    return StepResult::kFinished;
  }
  const bool at_eof = result == 0 || state.next_offset() >= r.file->size_bytes();
  if (!at_eof) return StepResult::kResubmit;  // a short read in the middle: issue the rest
  if (state.done >= required_of(r)) {
    finish(state, 0, {}, out);
  } else {
    finish(state, ENODATA,
           str_cat("file ", r.file->path(), " ends at byte ", r.file->size_bytes(), " but ",
                   required_of(r), " bytes were needed from offset ", r.offset),
           out);
  }
  return StepResult::kFinished;
}

}  // namespace deltafin::io::detail
