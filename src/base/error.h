// Errors a user can cause (bad file, bad config, bad request) travel as deltafin::base::Error with
// a message that names the file, tensor or field and what was expected. Hot paths never throw.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace deltafin::base {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates any streamable values: str_cat("tensor ", name, " has ", n, " bytes").
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

}  // namespace deltafin::base

// Internal invariant (a bug if it fires, not a user error): aborts with the location.
#define DF_ASSERT(cond)                                                      \
  do {                                                                       \
    if (!(cond)) ::deltafin::base::assert_failed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace deltafin::base {
[[noreturn]] void assert_failed(const char* cond, const char* file, int line);
}  // namespace deltafin::base
