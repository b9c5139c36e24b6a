// Synthetic drafters for a synthetic K3 model, in the published layouts: DSpark
// (Inferact/Kimi-K3-DSpark, spec/drafting.md §1.1) and Qwen3 0.6B/1.7B-Base (§2.1), written to
// MODEL/drafters/<name>/ (format/drafter_dirs.h). Random weights, seeded like the target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "synth/layout.h"

namespace deltafin::synth {

// The k3_dspark config fields that decide shapes, scaled to the target.
struct DSparkDims {
  int hidden_size = 0;  // = the target's hidden (its embedding is borrowed)
  int intermediate_size = 0;
  int num_layers = 5;
  int heads = 0;
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int vocab_size = 0;
  int markov_rank = 0;
  int target_num_hidden_layers = 0;
  std::vector<int> target_layer_ids;
  int mask_token_id = 0;
  int bos = 0, eos = 0, pad = 0;
};
// For K3's real sizes (hidden 7168, 93 layers) exactly the published config; otherwise scaled.
DSparkDims dspark_dims(const SynthDims& target);
// 5 taps (post-layer ids): [2,23,47,71,89] for 93 layers in blocks of 12, dspark-tiny-a's
// [1,3,4,7,11] for 13 layers in blocks of 4, else the published ids scaled to the layer count
// (strictly increasing, within 0..n-1); fewer than 5 layers: each layer once.
std::vector<int> dspark_target_layer_ids(int n_layers, int attn_res_block_size);

// The 68 tensors in lexicographic name order (what model.safetensors holds, embed_tokens included).
std::vector<TensorSpec> dspark_tensors(const DSparkDims& d);
std::string dspark_config_json(const DSparkDims& d);

enum class QwenSize { k0_6b, k1_7b };
struct QwenDims {
  int hidden_size = 0;
  int num_layers = 0;
  int intermediate_size = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int base_vocab = 0;  // BPE tokens; <|endoftext|> = base_vocab
  int vocab_size = 0;  // rows of the embedding (padded past the added tokens)
};
// k3-scale: Qwen3-0.6B-Base / 1.7B-Base exactly; demo: a small model of the same shape.
QwenDims qwen_dims(const SynthDims& target, QwenSize size);
const char* qwen_folder_name(QwenSize size);  // "qwen3-0.6b-base", "qwen3-1.7b-base"
std::vector<TensorSpec> qwen_tensors(const QwenDims& d);
std::string qwen_config_json(const QwenDims& d);
std::string qwen_generation_config_json(const QwenDims& d);

struct DrafterReport {
  std::string dspark_dir, qwen_dir;
  uint64_t dspark_bytes = 0, qwen_bytes = 0;  // file sizes
};
// Writes MODEL/drafters/dspark and MODEL/drafters/<qwen folder>. DSpark's embed_tokens is the
// target's embedding, bit for bit (same generator, same key).
DrafterReport write_drafters(const std::string& model_dir, const SynthDims& target, uint64_t seed,
                             QwenSize qwen);
// Removes the drafter files an earlier synth run left in MODEL/drafters (stale weights).
void remove_drafters(const std::string& model_dir);

}  // namespace deltafin::synth
