// Merge-rank BPE (see merge_bpe.h). Short pieces use a scan over a stack array; long ones use a
// min-heap of (rank, position) over a linked list, the procedure Hugging Face's Word::merge_all
// follows, so that cost stays O(n log n).
#include "tokenizer/merge_bpe.h"

#include <algorithm>
#include <queue>

#include "base/error.h"

namespace deltafin::tokenizer {
namespace {

constexpr size_t kShortPieceBytes = 64;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

MergeBpe::MergeBpe(const int32_t (&byte_ids)[256], const std::vector<Merge>& merges) {
  std::copy(std::begin(byte_ids), std::end(byte_ids), byte_ids_);
  size_t n_slots = 16;
  while (n_slots < 2 * merges.size()) n_slots *= 2;
  slots_.assign(n_slots, Slot{});
  mask_ = n_slots - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& m = merges[rank];
    const uint64_t key = pair_key(m.left, m.right);
    for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) break;  // listed before: the first rank wins
      if (slots_[i].key == kEmpty) {
        slots_[i] = Slot{key, static_cast<uint32_t>(rank), m.merged};
        break;
      }
    }
  }
}

uint32_t MergeBpe::find(int32_t left, int32_t right, int32_t* merged) const {
  if (slots_.empty()) return kNoMerge;
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i].key == key) {
      *merged = slots_[i].merged;
      return slots_[i].rank;
    }
    if (slots_[i].key == kEmpty) return kNoMerge;
  }
}

void MergeBpe::encode_short(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  // sym[i]: id of part i; rank[i]/merged[i]: merging part i with part i + 1.
  int32_t sym[kShortPieceBytes];
  uint32_t rank[kShortPieceBytes];
  int32_t merged[kShortPieceBytes];
  for (size_t i = 0; i < n; ++i) sym[i] = byte_ids_[p[i]];
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = find(sym[i], sym[i + 1], &merged[i]);
  size_t n_parts = n;
  for (;;) {
    uint32_t best = kNoMerge;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n_parts; ++i) {
      if (rank[i] < best) {
        best = rank[i];
        at = i;
      }
    }
    if (best == kNoMerge) break;
    sym[at] = merged[at];
    std::copy(sym + at + 2, sym + n_parts, sym + at + 1);
    std::copy(rank + at + 2, rank + n_parts, rank + at + 1);
    std::copy(merged + at + 2, merged + n_parts, merged + at + 1);
    --n_parts;
    if (at + 1 < n_parts) rank[at] = find(sym[at], sym[at + 1], &merged[at]);
    if (at > 0) rank[at - 1] = find(sym[at - 1], sym[at], &merged[at - 1]);
  }
  out.insert(out.end(), sym, sym + n_parts);
}

void MergeBpe::encode_long(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  // Parts are identified by their first byte's position; next/prev link the live ones.
  std::vector<int32_t> sym(n);
  std::vector<uint32_t> next(n), prev(n);
  std::vector<uint32_t> rank(n, kNoMerge);  // rank of merging part i with its successor
  std::vector<int32_t> merged(n, 0);
  std::vector<bool> live(n, true);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = byte_ids_[p[i]];
    next[i] = static_cast<uint32_t>(i + 1);
    prev[i] = static_cast<uint32_t>(i == 0 ? 0 : i - 1);
  }
  using Entry = std::pair<uint32_t, uint32_t>;  // (rank, position): lowest rank, then leftmost
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  const auto refresh = [&](uint32_t i) {
    const uint32_t j = next[i];
    rank[i] = j < n ? find(sym[i], sym[j], &merged[i]) : kNoMerge;
    if (rank[i] != kNoMerge) heap.emplace(rank[i], i);
  };
  for (uint32_t i = 0; i + 1 < n; ++i) refresh(i);
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    // Entries are never removed in place: one is stale when its part is gone or its pair changed
    // (a pair's rank identifies the pair, so an equal rank means the same pair).
    if (!live[i] || rank[i] != r) continue;
    const uint32_t j = next[i];
    sym[i] = merged[i];
    live[j] = false;
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    refresh(i);
    if (i > 0) refresh(prev[i]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(sym[i]);
}

void MergeBpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  const auto* p = reinterpret_cast<const uint8_t*>(piece.data());
  const size_t n = piece.size();
  if (n == 0) return;
  if (n <= kShortPieceBytes) {
    encode_short(p, n, out);
  } else {
    encode_long(p, n, out);
  }
}

void MergeBpe::encode_reference(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> parts;
  for (const char c : piece) parts.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  for (;;) {
    uint32_t best = kNoMerge;
    int32_t best_merged = 0;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      int32_t m = 0;
      const uint32_t r = find(parts[i], parts[i + 1], &m);
      if (r < best) {
        best = r;
        best_merged = m;
        at = i;
      }
    }
    if (best == kNoMerge) break;
    parts[at] = best_merged;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  out.insert(out.end(), parts.begin(), parts.end());
}

}  // namespace deltafin::tokenizer
