// What both ReadQueue implementations do with the result of one read call: finish, issue the
// rest (a short read), or fail with a message naming the file and offset. Internal to io.
#pragma once

#include <sys/types.h>

#include "io/read_queue.h"

namespace deltafin::io::detail {

// A request in flight and how many of its bytes have arrived.
struct ReadState {
  ReadRequest request;
  size_t done = 0;

  uint8_t* next_dest() const { return static_cast<uint8_t*>(request.dest) + done; }
  uint64_t next_offset() const { return request.offset + done; }
  size_t remaining() const { return request.length - done; }
};

enum class StepResult { kFinished, kResubmit };

// Validates a request before it is issued; on a problem fills *out and returns false.
bool check_request(const ReadRequest& request, ReadCompletion* out);

// Applies `result` (bytes read, or -errno) to `state`. On kFinished *out holds the completion
// (and, for a buffered file, the range has been dropped from the page cache).
StepResult apply_result(ReadState& state, ssize_t result, ReadCompletion* out);

}  // namespace deltafin::io::detail
