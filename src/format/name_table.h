// Name -> index lookup over a vector of named records that does not change once the table is built:
// open addressing with linear probing, 8 bytes a slot (32 hash bits as a tag, the index), and no
// allocation per name. K3 has half a million tensor names that share long prefixes, so the tag
// keeps most probes from touching the strings at all.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace deltafin::format::detail {

class NameTable {
 public:
  // Indexes names_of(0..n); returns the index of the first name equal to an earlier one, or -1.
  template <typename NameOf>
  int64_t build(size_t n, NameOf names_of) {
    size_t n_slots = 16;
    while (n_slots < 2 * n) n_slots *= 2;
    slots_.assign(n_slots, 0);
    mask_ = n_slots - 1;
    for (size_t i = 0; i < n; ++i) {
      const std::string_view name = names_of(i);
      const uint64_t h = std::hash<std::string_view>{}(name);
      size_t s = h & mask_;
      for (; slots_[s] != 0; s = (s + 1) & mask_) {
        if (tag(slots_[s]) == (h >> 32) && names_of(index(slots_[s])) == name)
          return static_cast<int64_t>(i);
      }
      slots_[s] = (h >> 32) << 32 | (i + 1);
    }
    return -1;
  }

  // Index of the record named `name`, or -1.
  template <typename NameOf>
  int64_t find(std::string_view name, NameOf names_of) const {
    if (slots_.empty()) return -1;
    const uint64_t h = std::hash<std::string_view>{}(name);
    for (size_t s = h & mask_; slots_[s] != 0; s = (s + 1) & mask_) {
      if (tag(slots_[s]) == (h >> 32) && names_of(index(slots_[s])) == name) {
        return static_cast<int64_t>(index(slots_[s]));
      }
    }
    return -1;
  }

 private:
  static uint64_t tag(uint64_t slot) { return slot >> 32; }
  static size_t index(uint64_t slot) { return static_cast<size_t>(slot & 0xffffffffu) - 1; }

  std::vector<uint64_t> slots_;  // tag << 32 | (index + 1); 0 = empty
  size_t mask_ = 0;
};

}  // namespace deltafin::format::detail
