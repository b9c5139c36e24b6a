// The per-position figures and their totals, in double throughout.
#include "eval/divergence.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/error.h"

namespace deltafin::eval {

void log_softmax(std::span<const float> logits, std::span<double> out) {
  DF_ASSERT(out.size() == logits.size() && !logits.empty());
  double max = -std::numeric_limits<double>::infinity();
  for (float x : logits) max = std::max(max, static_cast<double>(x));
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    out[i] = static_cast<double>(logits[i]) - max;
    sum += std::exp(out[i]);
  }
  const double log_sum = std::log(sum);  // sum >= 1: the max's term is exp(0)
  for (double& v : out) v -= log_sum;
}

std::vector<double> log_softmax(std::span<const float> logits) {
  std::vector<double> out(logits.size());
  log_softmax(logits, out);
  return out;
}

double kl_divergence(std::span<const double> log_p, std::span<const double> log_q) {
  DF_ASSERT(log_p.size() == log_q.size());
  double kl = 0;
  for (size_t i = 0; i < log_p.size(); ++i) {
    const double p = std::exp(log_p[i]);
    if (p == 0) continue;
    kl += p * (log_p[i] - log_q[i]);
  }
  return std::max(kl, 0.0);
}

std::vector<int32_t> top_ids(std::span<const float> logits, int k) {
  const size_t n = std::min(logits.size(), static_cast<size_t>(std::max(k, 0)));
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  ids.resize(n);
  return ids;
}

double overlap(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::max(a.size(), b.size());
  if (n == 0) return 1.0;
  size_t common = 0;
  for (int32_t x : a) common += std::find(b.begin(), b.end(), x) != b.end();
  return static_cast<double>(common) / static_cast<double>(n);
}

std::optional<int64_t> first_non_finite(std::span<const float> logits) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i])) return static_cast<int64_t>(i);
  return std::nullopt;
}

PositionFigures compare_position(std::span<const float> exact, std::span<const float> variant,
                                 int32_t next_id) {
  DF_ASSERT(exact.size() == variant.size() && next_id >= 0 &&
            static_cast<size_t>(next_id) < exact.size());
  const std::vector<double> log_p = log_softmax(exact);
  const std::vector<double> log_q = log_softmax(variant);
  PositionFigures f;
  f.kl = kl_divergence(log_p, log_q);
  f.nll_exact = -log_p[next_id];
  f.nll_variant = -log_q[next_id];
  const std::vector<int32_t> top_p = top_ids(exact, kTopK);
  const std::vector<int32_t> top_q = top_ids(variant, kTopK);
  f.top1_exact = top_p.front();
  f.top1_variant = top_q.front();
  f.top5_overlap = overlap(top_p, top_q);
  return f;
}

double percentile(std::vector<double> values, double p) {
  DF_ASSERT(!values.empty() && p >= 0 && p <= 100);
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

Spread spread(const std::vector<double>& values) {
  Spread s;
  if (values.empty()) return s;
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    sum += values[i];
    if (s.max_index < 0 || values[i] > s.max) {
      s.max = values[i];
      s.max_index = static_cast<int64_t>(i);
    }
  }
  s.mean = sum / static_cast<double>(values.size());
  s.p50 = percentile(values, 50);
  s.p99 = percentile(values, 99);
  return s;
}

void Tally::add(int64_t position, const PositionFigures& figures) {
  positions_.push_back(position);
  figures_.push_back(figures);
}

Summary Tally::summary() const {
  Summary s;
  s.positions = static_cast<int64_t>(figures_.size());
  if (figures_.empty()) return s;
  std::vector<double> kl;
  kl.reserve(figures_.size());
  for (const PositionFigures& f : figures_) {
    kl.push_back(f.kl);
    s.nll_exact += f.nll_exact;
    s.nll_variant += f.nll_variant;
    s.top1_agreements += f.top1_agrees();
    s.top5_overlap += f.top5_overlap;
  }
  s.kl = spread(kl);
  const double n = static_cast<double>(s.positions);
  s.nll_exact /= n;
  s.nll_variant /= n;
  s.top5_overlap /= n;
  return s;
}

std::optional<int64_t> first_difference(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  if (a.size() != b.size()) return static_cast<int64_t>(n);
  return std::nullopt;
}

}  // namespace deltafin::eval
