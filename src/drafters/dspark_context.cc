// The context cache's storage: per layer, rows of latent and k_pe, grown in place.
#include "drafters/dspark_context.h"

#include "base/error.h"

namespace deltafin::drafters {

DSparkContext::DSparkContext(const DSparkConfig& c, int64_t max_positions)
    : rank_(c.kv_lora_rank), rope_(c.rope_dim), latent_(c.num_layers), k_pe_(c.num_layers) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    latent_[l].reserve(static_cast<size_t>(max_positions * rank_));
    k_pe_[l].reserve(static_cast<size_t>(max_positions * rope_));
  }
}

int64_t DSparkContext::extend(int64_t rows) {
  DF_ASSERT(rows >= 0);
  for (size_t l = 0; l < latent_.size(); ++l) {
    latent_[l].resize(static_cast<size_t>((n_ + rows) * rank_));
    k_pe_[l].resize(static_cast<size_t>((n_ + rows) * rope_));
  }
  return n_;
}

void DSparkContext::truncate(int64_t n) {
  if (n < 0 || n > n_) base::fail("DSpark context: cannot truncate ", n_, " positions to ", n);
  n_ = n;
  for (size_t l = 0; l < latent_.size(); ++l) {
    latent_[l].resize(static_cast<size_t>(n_ * rank_));
    k_pe_[l].resize(static_cast<size_t>(n_ * rope_));
  }
}

}  // namespace deltafin::drafters
