// A grow-only scratch buffer: blocks keep one per intermediate in their workspace, so a pass
// allocates only when it is larger than every earlier one.
#pragma once

#include <cstdint>
#include <vector>

namespace deltafin::model {

template <typename T>
class Scratch {
 public:
  // At least n elements; contents are unspecified (whatever an earlier pass left).
  T* get(int64_t n) {
    if (static_cast<int64_t>(buf_.size()) < n) buf_.resize(n);
    return buf_.data();
  }
  // What the last get() returned.
  const T* data() const { return buf_.data(); }

 private:
  std::vector<T> buf_;
};

}  // namespace deltafin::model
