// Stop strings on streamed, decoded text: finds the earliest occurrence of any stop string and
// emits only text that can no longer become part of one, so a client never sees a stop string or
// a piece of one. Text comes in whole UTF-8 characters and stop strings are valid UTF-8, so every
// cut lands on a character boundary.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deltafin::runtime {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds text; returns what is safe to show now. Once a stop string is found, stopped() is true,
  // the returned text ends right before it, and later pushes return nothing.
  std::string push(std::string_view text);
  // The text still held back because it might have begun a stop string (the stream ended).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace deltafin::runtime
