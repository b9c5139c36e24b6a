// Test helpers: random weights held in memory, viewed as WeightMatrix (BF16 or MXFP4).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/weight_matrix.h"
#include "quant/bf16.h"

namespace deltafin::model::testing {

// Owns the bytes of a random matrix; `view` points into them.
struct OwnedMatrix {
  std::vector<uint8_t> data, scales;
  kernels::WeightMatrix view;
};

inline OwnedMatrix random_bf16(std::mt19937& rng, int64_t rows, int64_t cols, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  OwnedMatrix m;
  m.data.resize(rows * cols * 2);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint16_t b = quant::f32_to_bf16(dist(rng));
    m.data[2 * i] = static_cast<uint8_t>(b & 0xff);
    m.data[2 * i + 1] = static_cast<uint8_t>(b >> 8);
  }
  m.view = {kernels::WeightDType::kBF16, m.data.data(), nullptr, rows, cols};
  return m;
}

// Random E2M1 codes, E8M0 scales in [119, 124] as in the oracles.
inline OwnedMatrix random_mxfp4(std::mt19937& rng, int64_t rows, int64_t cols) {
  OwnedMatrix m;
  m.data.resize(rows * cols / 2);
  m.scales.resize(rows * cols / 32);
  for (uint8_t& b : m.data) b = static_cast<uint8_t>(rng() & 0xff);
  for (uint8_t& s : m.scales) s = static_cast<uint8_t>(119 + rng() % 6);
  m.view = {kernels::WeightDType::kMxfp4, m.data.data(), m.scales.data(), rows, cols};
  return m;
}

inline std::vector<float> random_vector(std::mt19937& rng, int64_t n, float mean, float scale) {
  std::normal_distribution<float> dist(mean, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// max |a - b| / max |b|
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / den;
}

}  // namespace deltafin::model::testing
