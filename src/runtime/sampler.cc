// Greedy and temperature / top-k / top-p sampling.
#include "runtime/sampler.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace deltafin::runtime {

int32_t argmax(std::span<const float> logits) {
  // The first maximum; a NaN never wins (nor is replaced when it is the first). Two passes, the
  // maximum then its first position, each 4 floats a step: K3's 163,840 logits take ~20 us where
  // a one-pass scalar scan took 0.12-0.7 ms, a noticeable share of a GPU decode step.
  const size_t n = logits.size();
  if (n == 0 || std::isnan(logits[0])) return 0;
  const float* p = logits.data();
  float top = p[0];
  size_t i = 0;
#if defined(__SSE2__)
  // _mm_max_ps(v, m) is v > m ? v : m, so a NaN v leaves m: the scalar rule below.
  __m128 m0 = _mm_set1_ps(top), m1 = m0, m2 = m0, m3 = m0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm_max_ps(_mm_loadu_ps(p + i), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(p + i + 4), m1);
    m2 = _mm_max_ps(_mm_loadu_ps(p + i + 8), m2);
    m3 = _mm_max_ps(_mm_loadu_ps(p + i + 12), m3);
  }
  alignas(16) float lanes[16];
  _mm_store_ps(lanes, m0);
  _mm_store_ps(lanes + 4, m1);
  _mm_store_ps(lanes + 8, m2);
  _mm_store_ps(lanes + 12, m3);
  for (const float v : lanes) top = v > top ? v : top;
#endif
  for (; i < n; ++i) top = p[i] > top ? p[i] : top;
  size_t k = 0;
#if defined(__SSE2__)
  const __m128 t = _mm_set1_ps(top);
  for (; k + 4 <= n; k += 4) {
    const int hits = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(p + k), t));
    if (hits != 0) return static_cast<int32_t>(k + static_cast<size_t>(__builtin_ctz(hits)));
  }
#endif
  for (; k < n; ++k)
    if (p[k] == top) return static_cast<int32_t>(k);
  return 0;  // unreachable: top is one of the values
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
