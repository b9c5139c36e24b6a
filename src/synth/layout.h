// The K3 release layout for synthetic checkpoints: model sizes per preset, every tensor (the K3
// schema's names, shapes and release dtypes, format/schema.h) with its initializer, and which
// shard holds which layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/dtype.h"
#include "format/schema.h"

namespace deltafin::synth {

// The K3 text_config fields that decide tensor shapes. Names follow config.json.
struct SynthDims {
  int hidden_size = 0;
  int base_vocab = 0;  // BPE ranks; vocab_size = base_vocab + kReservedTokens
  int num_hidden_layers = 0;
  int attn_res_block_size = 0;
  // KDA (linear_attn_config)
  int kda_heads = 0;
  int kda_head_dim = 0;  // also A_log's stored length and f_a_proj's rank
  int short_conv_kernel = 4;
  // Gated MLA
  int mla_heads = 0;
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  // MLP
  int intermediate_size = 0;          // dense layer 0
  int moe_intermediate_size = 0;      // per routed (and per shared) expert
  int routed_expert_hidden_size = 0;  // latent MoE width
  int num_experts = 0;
  int num_experts_per_token = 0;
  int num_shared_experts = 0;
  // Files
  int layers_per_shard = 1;
  bool drop_page_cache = false;  // output larger than RAM: keep the page cache out of it

  int vocab_size() const;
};

// 256 reserved ids follow the BPE ranks, as in K3 (163584..163839).
inline constexpr int kReservedTokens = 256;

// Small K3-shaped model: made in seconds, runs interactively.
SynthDims demo_dims();
// K3's real per-layer sizes (hidden 7168, 896 experts of 17,547,264 bytes, vocab 163840).
SynthDims k3_dims();

// K3's placement of gated MLA: every 4th layer (1-based) and the last one; all others are KDA.
bool is_mla_layer(const SynthDims& dims, int layer);
// 1-based lists as config.json's linear_attn_config writes them.
std::vector<int> full_attn_layers_1based(const SynthDims& dims);
std::vector<int> kda_layers_1based(const SynthDims& dims);

// How a tensor's values are made (see weights.h).
enum class Init {
  kUniform,      // symmetric uniform with standard deviation `std`
  kUniformTail,  // kUniform, but rows from n_valid on get std / 16 (reserved-token logits)
  kNearOne,      // 1 + uniform with standard deviation `std` (norm weights)
  kALog,         // first n_valid entries log(U(1, 16)), the rest exactly 0 (K3 stores [head_dim])
  kRandomBytes,  // uniform bytes: MXFP4 codes, two per byte
  kScaleBytes,   // E8M0 block scales, uniform in [scale_lo, scale_hi]
};

struct TensorSpec {
  std::string name;  // full name, "language_model." prefix included
  format::DType dtype;
  std::vector<int64_t> shape;
  Init init = Init::kUniform;
  float std = 0.0f;
  int n_valid = 0;
  uint8_t scale_lo = 0;
  uint8_t scale_hi = 0;
  // The schema's role of a spine or global tensor (plant.h rewrites some by role); routed expert
  // tensors keep the default, which no planting step touches.
  format::Role role = format::Role::kExpertGate;
  uint64_t nbytes() const;
};

// The roster below is the family schema's for `config` (synth_config(dims), model_files.h), with
// the values' initializers chosen by role.
// Tensors of one layer (attention, norms, MLP or MoE with all routed experts), sorted by name.
std::vector<TensorSpec> layer_tensors(const format::ModelConfig& config, int layer);
// The embedding, and the other global tensors: final norm, output AttnRes and lm_head.
TensorSpec embedding_tensor(const format::ModelConfig& config);
std::vector<TensorSpec> head_tensors(const format::ModelConfig& config);

// Shards hold whole layers, in layer order; the embedding sits with the first layers and the
// final norm, output AttnRes and lm_head with the last, as in the release.
struct ShardSpec {
  int first_layer = 0;
  int end_layer = 0;  // exclusive
  bool has_embedding = false;
  bool has_head = false;
};
std::vector<ShardSpec> shard_layout(const SynthDims& dims);
// The shard's tensors in lexicographic name order, the order of their data in the file. That order
// puts each expert's six tensors back to back (w1p, w1s, w2p, w2s, w3p, w3s) and each layer's
// experts in one run (experts.0, .1, .10, .100, ...), as in the release.
std::vector<TensorSpec> shard_tensors(const format::ModelConfig& config, const ShardSpec& shard);
// "model-00001-of-000096.safetensors": 5-digit index, 6-digit total, as K3 names its shards.
std::string shard_file_name(int index_0based, int n_shards);

// Sum of all tensor bytes (index.json's metadata.total_size).
uint64_t total_tensor_bytes(const format::ModelConfig& config);

// Throws base::Error when the sizes cannot form a valid K3-layout model (odd widths, top-k above
// the expert count, ...).
void validate_dims(const SynthDims& dims);

}  // namespace deltafin::synth
