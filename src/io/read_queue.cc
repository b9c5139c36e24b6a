// Choosing a ReadQueue implementation at run time.
#include "io/read_queue.h"

#include <cstdlib>
#include <string>

#include "base/error.h"
#include "base/log.h"

namespace deltafin::io {

std::unique_ptr<ReadQueue> make_read_queue(int depth, QueueKind kind) {
  if (kind == QueueKind::kAuto) {
    const char* env = std::getenv("DELTAFIN_IO");
    const std::string forced = env != nullptr ? env : "";
    if (forced == "uring") {
      kind = QueueKind::kUring;
    } else if (forced == "pread") {
      kind = QueueKind::kPread;
    } else if (!forced.empty()) {
      base::fail("DELTAFIN_IO must be 'uring' or 'pread', got '", forced, "'");
    }
  }
  if (kind == QueueKind::kPread) return make_pread_queue(depth);
  std::string why_not;
  auto uring = make_uring_queue(depth, &why_not);
  if (uring) return uring;
  if (kind == QueueKind::kUring) base::fail("io_uring was requested but is unavailable: ", why_not);
  base::log_debug("io: io_uring unavailable (", why_not, "); using the pread pool");
  return make_pread_queue(depth);
}

}  // namespace deltafin::io
