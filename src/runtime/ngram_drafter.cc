// Prompt lookup over the history with an incremental index (see ngram_drafter.h).
#include "runtime/ngram_drafter.h"

#include <algorithm>
#include <cstring>

namespace deltafin::runtime {
namespace {

// Confidence prior: a longer matched context predicts its continuation better. Weighted as two
// observed positions so the first few verify passes move it quickly.
constexpr double kPriorWeight = 2.0;
double prior_acceptance(int n) { return static_cast<double>(n) / (n + 2.0); }

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Positions compared to decide whether a history extends the indexed one. A full comparison would
// make every step O(history); a reset or a different request changes the tail or the head.
constexpr size_t kCheckHead = 16;
constexpr size_t kCheckTail = 32;

}  // namespace

NgramDrafter::NgramDrafter(NgramOptions options) : options_(options) {
  options_.n_min = std::clamp(options_.n_min, 1, kMaxN);
  options_.n_max = std::clamp(options_.n_max, options_.n_min, kMaxN);
  tables_.resize(options_.n_max + 1);
  accepted_.assign(options_.n_max + 1, 0.0);
  failed_.assign(options_.n_max + 1, 0.0);
}

void NgramDrafter::reset() {
  for (auto& table : tables_) table.clear();
  seen_.clear();
  indexed_ = 0;
}

uint64_t NgramDrafter::key(std::span<const int32_t> ids) const {
  uint64_t h = mix(0x9e3779b97f4a7c15ULL * (ids.size() + 1));
  for (int32_t id : ids) h = mix(h ^ static_cast<uint32_t>(id));
  return h;
}

bool NgramDrafter::is_extension(std::span<const int32_t> history) const {
  const size_t seen = seen_.size();
  if (history.size() < seen) return false;
  if (seen == 0) return true;
  const size_t head = std::min(seen, kCheckHead);
  if (std::memcmp(history.data(), seen_.data(), head * sizeof(int32_t)) != 0) return false;
  const size_t tail = std::min(seen, kCheckTail);
  return std::memcmp(history.data() + seen - tail, seen_.data() + seen - tail,
                     tail * sizeof(int32_t)) == 0;
}

void NgramDrafter::index_up_to(std::span<const int32_t> history, size_t end_exclusive) {
  for (size_t p = indexed_; p < end_exclusive; ++p) {
    for (int n = options_.n_min; n <= options_.n_max && static_cast<size_t>(n) <= p + 1; ++n) {
      tables_[n][key(history.subspan(p + 1 - n, n))] = static_cast<int32_t>(p);
    }
    ++work_.indexed_positions;
  }
  indexed_ = std::max(indexed_, end_exclusive);
}

Draft NgramDrafter::propose(std::span<const int32_t> history, int max_tokens) {
  last_n_ = 0;
  if (!is_extension(history)) {
    reset();
    ++work_.rebuilds;
  }
  seen_.insert(seen_.end(), history.begin() + seen_.size(), history.end());
  const size_t len = history.size();
  Draft draft;
  if (len < 2 || max_tokens <= 0) return draft;
  // Only end positions before the pending id: a match must be an earlier occurrence.
  index_up_to(history, len - 1);

  const int n_top = static_cast<int>(std::min<size_t>(options_.n_max, len - 1));
  for (int n = n_top; n >= options_.n_min; --n) {
    const std::span<const int32_t> tail = history.subspan(len - n, n);
    ++work_.lookups;
    const auto it = tables_[n].find(key(tail));
    if (it == tables_[n].end()) continue;
    const size_t p = static_cast<size_t>(it->second);
    // A hash collision would propose unrelated ids: confirm the match.
    if (!std::equal(tail.begin(), tail.end(), history.begin() + (p + 1 - n))) continue;
    const size_t start = p + 1;
    const size_t period = len - start;  // ids from the match to the pending one, inclusive
    const size_t count = options_.continue_repeats
                             ? static_cast<size_t>(max_tokens)
                             : std::min<size_t>(static_cast<size_t>(max_tokens), period);
    draft.ids.reserve(count);
    for (size_t i = 0; i < count; ++i) draft.ids.push_back(history[start + i % period]);
    draft.confidence.assign(count, acceptance(n));
    last_n_ = n;
    break;
  }
  return draft;
}

void NgramDrafter::observe(int proposed, int accepted) {
  if (last_n_ == 0 || proposed <= 0) return;
  accepted = std::clamp(accepted, 0, proposed);
  accepted_[last_n_] += accepted;
  // Acceptance stops at the first miss: each pass shows `accepted` hits and at most one miss.
  if (accepted < proposed) failed_[last_n_] += 1.0;
}

float NgramDrafter::acceptance(int n) const {
  n = std::clamp(n, options_.n_min, options_.n_max);
  const double hits = accepted_[n] + prior_acceptance(n) * kPriorWeight;
  return static_cast<float>(hits / (accepted_[n] + failed_[n] + kPriorWeight));
}

}  // namespace deltafin::runtime
