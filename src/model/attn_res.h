// Attention Residuals (K3): the residual stream of a forward pass. Without AttnRes it is the plain
// running sum; with it, the stored block representations plus the live partial sum of the current
// block, mixed over depth (kernels/attn_res.h) before attention, before the MLP and at the output.
// The forward pass, the router lookahead and the output mix all read it through this one object.
#pragma once

#include <cstdint>
#include <vector>

#include "model/scratch.h"

namespace deltafin::model {

// One mixing site: the key is norm_w ⊙ proj_w[0, :] (folded at load; the product of two BF16
// values is exact in fp32).
struct AttnResSite {
  std::vector<float> key;  // [hidden]
};

class ResidualStream {
 public:
  // Starts a pass of n rows over a model of n_layers layers; block_size 0: no AttnRes. Returns the
  // partial sum [n, hidden] for the caller to fill with the embeddings.
  float* begin(int64_t n, int64_t hidden, int64_t n_layers, int64_t block_size, float eps);

  // out[r] for rows [first, first + rows): the mix of the blocks and the partial sum at `site`, or
  // the partial sum itself while there is no block (no AttnRes, or before the first layer).
  void mix(const AttnResSite& site, float* out) const { mix_rows(site, 0, n_, out); }
  void mix_rows(const AttnResSite& site, int64_t first, int64_t rows, float* out) const;
  // Layer `layer` starts; at a block boundary the partial sum is stored as a block, and the next
  // add() restarts it. Call after mixing the layer's attention input.
  void enter_layer(int64_t layer);
  // partial sum += y[n, hidden] (or = y right after a boundary).
  void add(const float* y);
  // The partial sum, [n, hidden]: the running sum of the current block.
  const float* partial() const { return partial_.data(); }

 private:
  int64_t n_ = 0, hidden_ = 0, block_size_ = 0, n_blocks_ = 0;
  float eps_ = 0.0f;
  bool restart_ = false;
  Scratch<float> partial_;  // [n, hidden]
  Scratch<float> blocks_;   // [max blocks, n, hidden]
};

}  // namespace deltafin::model
