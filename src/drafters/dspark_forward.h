// The DSpark block drafter's math (spec drafting.md §1.2-1.4): context rows from the target's
// taps, the 7-row block [anchor, mask ×6] through pre-norm MLA layers with YaRN RoPE and no mask,
// final_norm, the target's lm_head, the Markov head's chained bias and the confidence head.
// fp32 activations over BF16 weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drafters/dspark_config.h"
#include "drafters/dspark_context.h"
#include "drafters/dspark_weights.h"

namespace deltafin::model {
class Model;
}

namespace deltafin::drafters {

// Rows the block always runs (the trained block size): the anchor and six mask rows.
inline constexpr int kDSparkBlockRows = 7;

struct DSparkProposal {
  std::vector<int32_t> ids;       // [width]: the greedy chain, row 0 predicting the first draft
  std::vector<float> confidence;  // [width]: sigmoid of confidence_logit
  std::vector<float> confidence_logit;  // [width]
  std::vector<int32_t> prev_ids;        // [width]: the anchor, then the previous row's draft
  // Filled when asked for: [7, hidden] final_norm outputs, [width, vocab] logits without and with
  // the Markov bias.
  std::vector<float> hidden, logits, logits_markov;
};

class DSparkModel {
 public:
  // Loads DIR (config.json + model.safetensors) for `target`, whose embedding and lm_head it
  // borrows (the target must outlive it). Throws base::Error naming the file, tensor or field,
  // or the target property that does not fit.
  static std::unique_ptr<DSparkModel> load(const std::string& dir, const model::Model& target);
  // The same from parts already checked (tests); embed and lm_head are [vocab, hidden].
  DSparkModel(DSparkConfig config, DSparkWeights weights, WeightMatrix embed, WeightMatrix lm_head);

  const DSparkConfig& config() const { return config_; }
  const YarnTable& yarn() const { return yarn_; }
  float attention_scale() const { return scale_; }
  uint64_t owned_bytes() const { return weights_.owned_bytes; }

  // Appends rows [0, keep_rows) of a target pass's taps to `ctx` at positions ctx.length() ...
  // taps: [n_taps, pass_rows, target_hidden] (model::ForwardOptions::tap_out's layout, the taps in
  // target_layer_ids order). first_position must equal ctx.length() (a check that the caller's
  // rows line up with the cache). features: null, or [keep_rows, hidden] receives u_p.
  void append_context(DSparkContext& ctx, const float* taps, int64_t pass_rows, int64_t keep_rows,
                      int64_t first_position, float* features = nullptr) const;

  // Runs the block at positions L .. L+6 (L = ctx.length()) and scores its first `width` rows
  // (1..7) through the lm_head. want_logits: also return hidden and logits.
  DSparkProposal propose(const DSparkContext& ctx, int32_t anchor, int width,
                         bool want_logits = false) const;

 private:
  // Interleaved-pair YaRN rotation of one rope_dim vector at `position`, in place.
  void rope(float* x, int64_t position) const;
  // out[7, heads · v] = attention of the block's queries over ctx's rows then the block's own.
  void attend(const DSparkLayerWeights& w, const DSparkContext& ctx, int64_t layer, const float* q,
              const float* lat, const float* kpe, float* out) const;

  DSparkConfig config_;
  DSparkWeights weights_;
  WeightMatrix embed_, lm_head_;
  YarnTable yarn_;
  float scale_ = 0;
};

}  // namespace deltafin::drafters
