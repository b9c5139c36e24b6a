// Hugging Face's BPE model over bytes: a word starts as one symbol per byte and the adjacent pair
// with the lowest merge rank (the leftmost on ties) is merged until no adjacent pair is a merge.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltafin::tokenizer {

class MergeBpe {
 public:
  struct Merge {
    int32_t left = 0;
    int32_t right = 0;
    int32_t merged = 0;  // the id of left's bytes followed by right's
  };

  MergeBpe() = default;
  // byte_ids[b]: the id of the one-byte token b; merges in rank order (rank = index). A pair
  // listed twice keeps its first (lowest) rank, as Hugging Face's loader does.
  MergeBpe(const int32_t (&byte_ids)[256], const std::vector<Merge>& merges);

  // Appends the ids of `piece` (non-empty bytes) to `out`.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  // The O(n^2) form, kept as the reference the fast paths are tested against.
  void encode_reference(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = UINT64_MAX;
  static constexpr uint32_t kNoMerge = UINT32_MAX;

  // Rank of merging (left, right) and the resulting id in *merged, or kNoMerge.
  uint32_t find(int32_t left, int32_t right, int32_t* merged) const;
  void encode_short(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;
  void encode_long(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;

  int32_t byte_ids_[256] = {};
  std::vector<Slot> slots_;  // open addressing, power-of-two size, load factor <= 1/2
  uint64_t mask_ = 0;
};

}  // namespace deltafin::tokenizer
