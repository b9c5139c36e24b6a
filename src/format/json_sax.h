// Pieces shared by the streaming (SAX) JSON readers of safetensors headers and shard indexes: they
// read hundreds of thousands of entries without building a DOM, and see duplicate keys, which a DOM
// would silently merge.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deltafin::format::detail {

using Json = nlohmann::json;

// Consumes one JSON value of any shape, event by event: call begin() before the value's first
// event, then feed events (keys excepted) to consume() while active().
class ValueSkipper {
 public:
  bool active() const { return active_; }
  void begin() {
    active_ = true;
    depth_ = 0;
  }
  // Feed a scalar (+0), a start (+1) or an end (-1); the skip ends with the value.
  void consume(int depth_change) {
    depth_ += depth_change;
    if (depth_ == 0) active_ = false;
  }

 private:
  bool active_ = false;
  int depth_ = 0;
};

// Turns nlohmann's parse error into a base::Error that names the file.
[[noreturn]] inline void fail_json(const std::string& what_file,
                                   const nlohmann::detail::exception& e) {
  base::fail(what_file, ": invalid JSON: ", e.what());
}

}  // namespace deltafin::format::detail
