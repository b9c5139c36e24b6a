// Greedy and temperature / top-k / top-p sampling.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace deltafin::runtime {

int32_t argmax(std::span<const float> logits) {
  // The running maximum stays in a register: reading logits[best] back every step made K3's
  // 163,840 logits take ~0.7 ms, a fifth of a GPU token (0.12 ms now). Same result: the first
  // maximum, and a NaN never wins (nor is replaced when it is the first).
  int32_t best = 0;
  float best_value = logits.empty() ? 0.0f : logits[0];
  for (size_t i = 1; i < logits.size(); ++i) {
    const float v = logits[i];
    if (v > best_value) {
      best_value = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

Sampler::Sampler(const GenerateOptions& options) : options_(options), rng_(options.seed) {}

int32_t Sampler::next(std::span<const float> logits) {
  if (options_.temperature <= 0.0f) return argmax(logits);
  // Candidates by logit, descending (ties: lower id first), cut by top_k.
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = options_.top_k > 0 ? std::min<size_t>(options_.top_k, ids.size()) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  ids.resize(k);
  std::vector<double> p(k);
  const double top = logits[ids[0]];
  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::exp((logits[ids[i]] - top) / options_.temperature);
    sum += p[i];
  }
  // Smallest prefix whose probability mass reaches top_p.
  size_t keep = k;
  if (options_.top_p < 1.0f) {
    double acc = 0.0;
    for (size_t i = 0; i < k; ++i) {
      acc += p[i] / sum;
      if (acc >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<size_t> pick(p.begin(), p.begin() + keep);
  return ids[pick(rng_)];
}

}  // namespace deltafin::runtime
