// Internal assertion failure: print where and abort (sanitizers and debuggers catch the abort).
#include "base/error.h"

#include <cstdio>
#include <cstdlib>

namespace deltafin::base {

void assert_failed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "deltafin: internal error: %s (%s:%d)\n", cond, file, line);
  std::abort();
}

}  // namespace deltafin::base
