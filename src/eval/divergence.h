// How far a variant's next-token distributions are from the exact path's, position by position:
// KL(exact || variant), the negative log-likelihood of the next corpus id under each, top-1
// agreement and top-5 overlap, in double from log-softmax; and their totals (docs/QUALITY.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace deltafin::eval {

// The size of the top-k sets compared (min(kTopK, vocab) when the vocabulary is smaller).
inline constexpr int kTopK = 5;

// log softmax(logits) in double, stable (the max is subtracted first). `out` has logits.size().
void log_softmax(std::span<const float> logits, std::span<double> out);
std::vector<double> log_softmax(std::span<const float> logits);

// KL(P || Q) = sum_i p_i (log p_i - log q_i) in nats, from log-probabilities of equal length.
// Terms with p_i == 0 add nothing; a sum below 0 (rounding, for distributions a few ulps apart) is
// returned as 0, so equal inputs give exactly 0.
double kl_divergence(std::span<const double> log_p, std::span<const double> log_q);

// The k highest logits' ids, highest first, ties to the lower id (the greedy sampler's rule).
std::vector<int32_t> top_ids(std::span<const float> logits, int k);

// |a ∩ b| / max(|a|, |b|): 1 when the sets are equal, 0 when disjoint.
double overlap(std::span<const int32_t> a, std::span<const int32_t> b);

// The first index holding NaN or an infinity, if any.
std::optional<int64_t> first_non_finite(std::span<const float> logits);

// One position: the exact and the variant's logits for the next id, [vocab] each.
struct PositionFigures {
  double kl = 0;           // KL(exact || variant), nats
  double nll_exact = 0;    // -log p_exact(next id)
  double nll_variant = 0;  // -log p_variant(next id)
  int32_t top1_exact = -1, top1_variant = -1;
  double top5_overlap = 0;  // |top5(exact) ∩ top5(variant)| / 5
  bool top1_agrees() const { return top1_exact == top1_variant; }
};

// Both rows must be finite and of one size; next_id must be inside it.
PositionFigures compare_position(std::span<const float> exact, std::span<const float> variant,
                                 int32_t next_id);

// Nearest-rank percentile of `values` (not empty), p in [0, 100]: the ceil(p/100 * n)-th smallest
// (the smallest for p = 0), so it is always one of the values: p50 of {1, 2} is 1, p99 of 100
// values is the 99th smallest.
double percentile(std::vector<double> values, double p);

struct Spread {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
  int64_t max_index = -1;  // which value (in the order added) is the max; the first on ties
};
Spread spread(const std::vector<double>& values);

// Totals over the positions compared.
struct Summary {
  int64_t positions = 0;
  Spread kl;
  double nll_exact = 0, nll_variant = 0;  // means, nats per id
  int64_t top1_agreements = 0;
  double top5_overlap = 0;  // mean
  double top1_agreement() const {
    return positions ? static_cast<double>(top1_agreements) / positions : 0.0;
  }
};

// Collects positions in order and keeps each one's figures (for the per-position output).
class Tally {
 public:
  void add(int64_t position, const PositionFigures& figures);
  Summary summary() const;
  const std::vector<int64_t>& positions() const { return positions_; }
  const std::vector<PositionFigures>& figures() const { return figures_; }

 private:
  std::vector<int64_t> positions_;
  std::vector<PositionFigures> figures_;
};

// The first index where two greedy continuations differ (a shorter one that is a prefix of the
// other differs at its length); nullopt when they are equal.
std::optional<int64_t> first_difference(std::span<const int32_t> a, std::span<const int32_t> b);

}  // namespace deltafin::eval
