// Choosing the next id from a row of logits: greedy (argmax, lowest id on ties) or sampling at a
// temperature with top-k / top-p, from a seeded generator so runs repeat.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "deltafin/generate.h"

namespace deltafin::runtime {

int32_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const GenerateOptions& options);
  int32_t next(std::span<const float> logits);

 private:
  GenerateOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace deltafin::runtime
