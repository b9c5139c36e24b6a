// One sequence's DSpark context cache: per committed target position and per draft layer, the
// normalized latent and the roped shared key part that the block attends over. Append-only while
// the sequence grows; truncate() follows a session that rewinds.
#pragma once

#include <cstdint>
#include <vector>

#include "drafters/dspark_config.h"

namespace deltafin::drafters {

class DSparkContext {
 public:
  DSparkContext() = default;
  // Reserves room for max_positions (0: grow as needed).
  DSparkContext(const DSparkConfig& c, int64_t max_positions = 0);

  int64_t length() const { return n_; }
  int64_t n_layers() const { return static_cast<int64_t>(latent_.size()); }
  // Layer `layer`'s rows [0, length()): latent [n, kv_lora], k_pe [n, rope].
  const float* latent(int64_t layer) const { return latent_[layer].data(); }
  const float* k_pe(int64_t layer) const { return k_pe_[layer].data(); }

  // Room for `rows` more positions in every layer; returns the first new row's index. The caller
  // fills rows [length(), length() + rows) through mutable_* and then calls commit(rows).
  int64_t extend(int64_t rows);
  float* mutable_latent(int64_t layer, int64_t row) { return &latent_[layer][row * rank_]; }
  float* mutable_k_pe(int64_t layer, int64_t row) { return &k_pe_[layer][row * rope_]; }
  void commit(int64_t rows) { n_ += rows; }

  // Keeps positions [0, n) (n <= length()); reset() empties the cache. Storage is kept.
  void truncate(int64_t n);
  void reset() { truncate(0); }

 private:
  int64_t rank_ = 0, rope_ = 0, n_ = 0;
  std::vector<std::vector<float>> latent_, k_pe_;  // per layer
};

}  // namespace deltafin::drafters
