// The residual stream: block bookkeeping around the AttnRes mix kernel.
#include "model/attn_res.h"

#include <cstring>

#include "kernels/attn_res.h"
#include "kernels/elementwise.h"

namespace deltafin::model {

float* ResidualStream::begin(int64_t n, int64_t hidden, int64_t n_layers, int64_t block_size,
                             float eps) {
  n_ = n;
  hidden_ = hidden;
  block_size_ = block_size;
  eps_ = eps;
  n_blocks_ = 0;
  restart_ = false;
  if (block_size > 0) blocks_.get(((n_layers + block_size - 1) / block_size) * n * hidden);
  return partial_.get(n * hidden);
}

void ResidualStream::mix_rows(const AttnResSite& site, int64_t first, int64_t rows,
                              float* out) const {
  const float* partial = partial_.data() + first * hidden_;
  if (n_blocks_ == 0) {
    std::memcpy(out, partial, rows * hidden_ * sizeof(float));
    return;
  }
  const float* blocks = blocks_.data() + first * hidden_;
  kernels::attn_res_mix(site.key.data(), blocks, n_blocks_, n_ * hidden_, partial, rows, hidden_,
                        eps_, out);
}

void ResidualStream::enter_layer(int64_t layer) {
  if (block_size_ == 0 || layer % block_size_ != 0) return;
  const int64_t size = n_ * hidden_;
  float* blocks = blocks_.get((n_blocks_ + 1) * size);
  std::memcpy(blocks + n_blocks_ * size, partial_.get(size), size * sizeof(float));
  ++n_blocks_;
  restart_ = true;
}

void ResidualStream::add(const float* y) {
  float* partial = partial_.get(n_ * hidden_);
  if (restart_) {
    std::memcpy(partial, y, n_ * hidden_ * sizeof(float));
    restart_ = false;
  } else {
    kernels::add(y, n_ * hidden_, partial);
  }
}

}  // namespace deltafin::model
