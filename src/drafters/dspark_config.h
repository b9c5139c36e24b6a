// The k3_dspark config.json of a DSpark block drafter (Inferact/Kimi-K3-DSpark layout): every key
// read and checked, and the YaRN RoPE tables and softmax scale derived from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin::drafters {

// The Markov and confidence heads are fixed to the published variant (vanilla, with Markov).
struct DSparkConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t nope_dim = 0;  // qk_nope_head_dim
  int64_t rope_dim = 0;  // qk_rope_head_dim
  int64_t v_dim = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 0;
  int64_t max_position_embeddings = 0;
  int64_t target_hidden_size = 0;
  int64_t target_num_hidden_layers = 0;
  std::vector<int64_t> target_layer_ids;  // 0-based target layers tapped, ascending
  int32_t mask_token_id = 0;
  int64_t markov_rank = 0;
  int32_t bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;
  // RoPE: the base is the config's rope_theta (spec drafting.md §1.2a: TorchSpec's training code
  // rotates with 10000 instead, so the base must stay a value a caller can change).
  double rope_theta = 0;
  double yarn_factor = 0;
  int64_t yarn_original_max_positions = 0;
  double yarn_beta_fast = 0, yarn_beta_slow = 0;
  double yarn_mscale = 0, yarn_mscale_all_dim = 0;

  int64_t qk_dim() const { return nope_dim + rope_dim; }
  int64_t n_taps() const { return static_cast<int64_t>(target_layer_ids.size()); }
  int64_t context_width() const { return n_taps() * target_hidden_size; }
};

// Parses a k3_dspark config; throws base::Error naming the file and field.
DSparkConfig parse_dspark_config(const std::string& json_text, const std::string& path_for_errors);
DSparkConfig load_dspark_config(const std::string& dir);  // reads DIR/config.json

// YaRN (DeepSeek form) over the rope dims, pairs i = 0 .. rope_dim/2 - 1.
struct YarnTable {
  int64_t low = 0, high = 0;     // the ramp's ends (pairs below low unscaled, from high /factor)
  std::vector<double> inv_freq;  // [rope_dim / 2]
  double cos_sin_scale = 1.0;    // mscale(factor, mscale) / mscale(factor, mscale_all_dim)
};
YarnTable yarn_table(const DSparkConfig& c);
// The attention score scale: qk_dim^-0.5 · mscale(factor, mscale_all_dim)².
double softmax_scale(const DSparkConfig& c);

}  // namespace deltafin::drafters
