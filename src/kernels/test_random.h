// Random inputs for the kernel tests: normally distributed floats from a seeded generator, so every
// test draws the same values on every run.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace deltafin::kernels {

inline std::vector<float> normal(std::mt19937& rng, int64_t n, float scale = 1.0f,
                                 float mean = 0.0f) {
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace deltafin::kernels
