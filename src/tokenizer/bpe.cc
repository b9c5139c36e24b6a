// Byte-pair merging (see bpe.h). Short pieces, nearly all of them in prose, use a scan over a
// small stack array; long ones (a 10 kB word, a run of digits or emoji) use a min-heap over a
// linked list so that the cost stays O(n log n) instead of tiktoken's O(n^2).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "base/error.h"

namespace deltafin::tokenizer {
namespace {

// Pieces up to this many bytes take the array path; the scan over ~n entries per merge is cheaper
// than heap bookkeeping at these sizes.
constexpr size_t kShortPieceBytes = 64;

Rank rank_of(const Vocab& vocab, const uint8_t* p, size_t begin, size_t end) {
  return vocab.find(p + begin, end - begin);
}

void emit(const Vocab& vocab, const uint8_t* p, size_t begin, size_t end,
          std::vector<int32_t>& out) {
  const Rank r = rank_of(vocab, p, begin, end);
  DF_ASSERT(r != kNoRank);  // every part is a token by construction
  out.push_back(static_cast<int32_t>(r));
}

void encode_short(const Vocab& vocab, const uint8_t* p, size_t n, std::vector<int32_t>& out) {
  // start[i]: byte offset of part i; rank[i]: rank of part i merged with part i + 1.
  uint32_t start[kShortPieceBytes + 1];
  Rank rank[kShortPieceBytes + 1];
  size_t n_parts = n;
  for (size_t i = 0; i <= n; ++i) start[i] = static_cast<uint32_t>(i);
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = rank_of(vocab, p, i, i + 2);
  rank[n - 1] = kNoRank;
  for (;;) {
    Rank best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n_parts; ++i) {
      if (rank[i] < best) {
        best = rank[i];
        at = i;
      }
    }
    if (best == kNoRank) break;
    // Merge part at+1 into part at, then refresh the two pairs that now touch the merged part.
    std::copy(start + at + 2, start + n_parts + 1, start + at + 1);
    std::copy(rank + at + 2, rank + n_parts, rank + at + 1);
    --n_parts;
    rank[at] = at + 1 < n_parts ? rank_of(vocab, p, start[at], start[at + 2]) : kNoRank;
    if (at > 0) rank[at - 1] = rank_of(vocab, p, start[at - 1], start[at + 1]);
  }
  for (size_t i = 0; i < n_parts; ++i) emit(vocab, p, start[i], start[i + 1], out);
}

void encode_long(const Vocab& vocab, const uint8_t* p, size_t n, std::vector<int32_t>& out) {
  // Parts are identified by their start offset; next[i]/prev[i] link the live parts.
  std::vector<uint32_t> next(n + 1), prev(n + 1);
  std::vector<Rank> rank(n + 1, kNoRank);  // rank of part i merged with its successor
  std::vector<bool> live(n + 1, true);
  for (size_t i = 0; i <= n; ++i) {
    next[i] = static_cast<uint32_t>(i + 1);
    prev[i] = static_cast<uint32_t>(i == 0 ? 0 : i - 1);
  }
  using Entry = std::pair<Rank, uint32_t>;  // (rank, start): lowest rank, then leftmost
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (size_t i = 0; i + 1 < n; ++i) {
    rank[i] = rank_of(vocab, p, i, i + 2);
    if (rank[i] != kNoRank) heap.emplace(rank[i], static_cast<uint32_t>(i));
  }
  const auto refresh = [&](uint32_t i) {
    const uint32_t j = next[i];
    rank[i] = j < n ? rank_of(vocab, p, i, next[j]) : kNoRank;
    if (rank[i] != kNoRank) heap.emplace(rank[i], i);
  };
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    // Entries are never removed in place: one is stale when its part is gone or its pair changed.
    if (!live[i] || rank[i] != r) continue;
    const uint32_t j = next[i];  // merged into i
    live[j] = false;
    next[i] = next[j];
    prev[next[j]] = i;
    refresh(i);
    if (i > 0) refresh(prev[i]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) emit(vocab, p, i, next[i], out);
}

}  // namespace

void byte_pair_encode(const Vocab& vocab, std::string_view piece, std::vector<int32_t>& out) {
  const auto* p = reinterpret_cast<const uint8_t*>(piece.data());
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(static_cast<int32_t>(vocab.byte_rank(p[0])));
    return;
  }
  const Rank whole = vocab.find(p, n);
  if (whole != kNoRank) {
    out.push_back(static_cast<int32_t>(whole));
    return;
  }
  if (n <= kShortPieceBytes) {
    encode_short(vocab, p, n, out);
  } else {
    encode_long(vocab, p, n, out);
  }
}

void byte_pair_encode_reference(const Vocab& vocab, std::string_view piece,
                                std::vector<int32_t>& out) {
  std::vector<std::string_view> parts;
  for (size_t i = 0; i < piece.size(); ++i) parts.push_back(piece.substr(i, 1));
  for (;;) {
    Rank best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::string_view merged(parts[i].data(), parts[i].size() + parts[i + 1].size());
      const Rank r = vocab.find(merged);
      if (r < best) {
        best = r;
        at = i;
      }
    }
    if (best == kNoRank) break;
    parts[at] = std::string_view(parts[at].data(), parts[at].size() + parts[at + 1].size());
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (const auto part : parts) out.push_back(static_cast<int32_t>(vocab.find(part)));
}

}  // namespace deltafin::tokenizer
