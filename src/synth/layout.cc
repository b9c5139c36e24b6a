// Tensor roster and shard plan of a synthetic K3 checkpoint (spec/kimi-k3.md §2).
#include "synth/layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace deltafin::synth {
namespace {

using format::DType;

// Root mean square of an E2M1 code drawn uniformly from all 16 codes: sqrt(137 / 16).
constexpr double kE2m1Rms = 2.9261749;
// Root mean square of 2^k for k uniform in {-2, -1, 0, 1}.
constexpr double kScaleSpreadRms = 1.1524;

TensorSpec uniform(std::string name, DType dtype, std::vector<int64_t> shape, double std) {
  TensorSpec t{std::move(name), dtype, std::move(shape)};
  t.init = Init::kUniform;
  t.std = static_cast<float>(std);
  return t;
}

// A Linear weight [out, in]: std gain / sqrt(in), so activations keep their size through it.
TensorSpec linear(std::string name, int64_t out, int64_t in, double gain = 1.0) {
  return uniform(std::move(name), DType::kBF16, {out, in}, gain / std::sqrt(double(in)));
}

TensorSpec norm(std::string name, int64_t n, DType dtype = DType::kBF16) {
  TensorSpec t{std::move(name), dtype, {n}};
  t.init = Init::kNearOne;
  t.std = 0.1f;
  return t;
}

// The six U8 tensors of matrix w{k} = [out, in] in MXFP4: codes packed two per byte, one E8M0
// scale per 32 inputs. The scales centre the decoded values on std 1/sqrt(in).
void add_mxfp4(std::vector<TensorSpec>& out, const std::string& stem, int64_t rows, int64_t cols) {
  TensorSpec packed{stem + ".weight_packed", DType::kU8, {rows, cols / 2}};
  packed.init = Init::kRandomBytes;
  TensorSpec scale{stem + ".weight_scale", DType::kU8, {rows, cols / 32}};
  scale.init = Init::kScaleBytes;
  const double target = 1.0 / std::sqrt(double(cols));
  const int centre =
      127 + static_cast<int>(std::lround(std::log2(target / (kE2m1Rms * kScaleSpreadRms))));
  scale.scale_lo = static_cast<uint8_t>(centre - 2);
  scale.scale_hi = static_cast<uint8_t>(centre + 1);
  out.push_back(std::move(packed));
  out.push_back(std::move(scale));
}

std::string layer_prefix(int layer) {
  return std::string(kPrefix) + "model.layers." + std::to_string(layer) + ".";
}

void add_kda(std::vector<TensorSpec>& t, const SynthDims& d, const std::string& a) {
  const int64_t h = d.hidden_size, nh = d.kda_heads, dh = d.kda_head_dim, p = nh * dh;
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "g_proj"}) {
    t.push_back(linear(a + proj + ".weight", p, h));
  }
  t.push_back(linear(a + "f_a_proj.weight", dh, h));
  // Small gate input: the lower-bounded gate stays in its sensitive range around dt_bias.
  t.push_back(linear(a + "f_b_proj.weight", p, dh, 0.3));
  t.push_back(linear(a + "b_proj.weight", nh, h));
  t.push_back(linear(a + "o_proj.weight", h, p));
  for (const char* conv : {"q_conv1d", "k_conv1d", "v_conv1d"}) {
    t.push_back(uniform(a + conv + ".weight", DType::kF32, {p, 1, d.short_conv_kernel}, 0.5));
  }
  TensorSpec a_log{a + "A_log", DType::kF32, {dh}};
  a_log.init = Init::kALog;
  a_log.n_valid = static_cast<int>(nh);
  t.push_back(std::move(a_log));
  t.push_back(uniform(a + "dt_bias", DType::kF32, {p}, 0.1));
  t.push_back(norm(a + "o_norm.weight", dh, DType::kF32));
}

void add_mla(std::vector<TensorSpec>& t, const SynthDims& d, const std::string& a) {
  const int64_t h = d.hidden_size, nh = d.mla_heads;
  t.push_back(linear(a + "q_a_proj.weight", d.q_lora_rank, h));
  t.push_back(norm(a + "q_a_layernorm.weight", d.q_lora_rank));
  t.push_back(
      linear(a + "q_b_proj.weight", nh * (d.qk_nope_head_dim + d.qk_rope_head_dim), d.q_lora_rank));
  t.push_back(linear(a + "kv_a_proj_with_mqa.weight", d.kv_lora_rank + d.qk_rope_head_dim, h));
  t.push_back(norm(a + "kv_a_layernorm.weight", d.kv_lora_rank));
  t.push_back(
      linear(a + "kv_b_proj.weight", nh * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank));
  t.push_back(linear(a + "g_proj.weight", nh * d.v_head_dim, h));
  t.push_back(linear(a + "o_proj.weight", h, nh * d.v_head_dim));
}

void add_moe(std::vector<TensorSpec>& t, const SynthDims& d, const std::string& m) {
  const int64_t h = d.hidden_size, lat = d.routed_expert_hidden_size,
                inter = d.moe_intermediate_size, shared = d.num_shared_experts * inter;
  // Router logits of std ~2: sigmoid scores spread over (0, 1), routes differ per token.
  t.push_back(linear(m + "gate.weight", d.num_experts, h, 2.0));
  t.push_back(uniform(m + "gate.e_score_correction_bias", DType::kF32, {d.num_experts}, 0.05));
  t.push_back(linear(m + "routed_expert_down_proj.weight", lat, h));
  t.push_back(linear(m + "routed_expert_up_proj.weight", h, lat));
  t.push_back(norm(m + "routed_expert_norm.weight", lat));
  t.push_back(linear(m + "shared_experts.gate_proj.weight", shared, h));
  t.push_back(linear(m + "shared_experts.up_proj.weight", shared, h));
  t.push_back(linear(m + "shared_experts.down_proj.weight", h, shared));
  for (int e = 0; e < d.num_experts; ++e) {
    const std::string x = m + "experts." + std::to_string(e) + ".";
    add_mxfp4(t, x + "w1", inter, lat);  // gate [inter, latent]
    add_mxfp4(t, x + "w2", lat, inter);  // down [latent, inter]
    add_mxfp4(t, x + "w3", inter, lat);  // up [inter, latent]
  }
}

void sort_by_name(std::vector<TensorSpec>& t) {
  std::sort(t.begin(), t.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
}

}  // namespace

int SynthDims::vocab_size() const { return base_vocab + kReservedTokens; }

SynthDims demo_dims() {
  SynthDims d;
  d.hidden_size = 256;
  d.base_vocab = 768;  // 256 byte tokens + 512 merges
  d.num_hidden_layers = 13;
  d.attn_res_block_size = 4;
  d.kda_heads = 4;
  d.kda_head_dim = 64;
  d.mla_heads = 4;
  d.q_lora_rank = 128;
  d.kv_lora_rank = 64;
  d.qk_nope_head_dim = 64;
  d.qk_rope_head_dim = 32;
  d.v_head_dim = 64;
  d.intermediate_size = 1024;
  d.moe_intermediate_size = 128;
  d.routed_expert_hidden_size = 128;
  d.num_experts = 64;
  d.num_experts_per_token = 8;
  d.num_shared_experts = 2;
  d.layers_per_shard = 4;
  return d;
}

SynthDims k3_dims() {
  SynthDims d;
  d.hidden_size = 7168;
  d.base_vocab = 163584;
  d.num_hidden_layers = 93;
  d.attn_res_block_size = 12;
  d.kda_heads = 96;
  d.kda_head_dim = 128;
  d.mla_heads = 96;
  d.q_lora_rank = 1536;
  d.kv_lora_rank = 512;
  d.qk_nope_head_dim = 128;
  d.qk_rope_head_dim = 64;
  d.v_head_dim = 128;
  d.intermediate_size = 33792;
  d.moe_intermediate_size = 3072;
  d.routed_expert_hidden_size = 3584;
  d.num_experts = 896;
  d.num_experts_per_token = 16;
  d.num_shared_experts = 2;
  d.layers_per_shard = 1;  // a K3 layer's experts alone are 15.7 GB: one layer per shard
  d.drop_page_cache = true;
  return d;
}

bool is_mla_layer(const SynthDims& dims, int layer) {
  return (layer + 1) % 4 == 0 || layer == dims.num_hidden_layers - 1;
}

std::vector<int> full_attn_layers_1based(const SynthDims& dims) {
  std::vector<int> out;
  for (int l = 0; l < dims.num_hidden_layers; ++l) {
    if (is_mla_layer(dims, l)) out.push_back(l + 1);
  }
  return out;
}

std::vector<int> kda_layers_1based(const SynthDims& dims) {
  std::vector<int> out;
  for (int l = 0; l < dims.num_hidden_layers; ++l) {
    if (!is_mla_layer(dims, l)) out.push_back(l + 1);
  }
  return out;
}

uint64_t TensorSpec::nbytes() const {
  uint64_t n = format::dtype_size(dtype);
  for (int64_t s : shape) n *= static_cast<uint64_t>(s);
  return n;
}

std::vector<TensorSpec> layer_tensors(const SynthDims& d, int layer) {
  const std::string p = layer_prefix(layer);
  const int64_t h = d.hidden_size;
  std::vector<TensorSpec> t;
  t.push_back(norm(p + "input_layernorm.weight", h));
  t.push_back(norm(p + "post_attention_layernorm.weight", h));
  // AttnRes mixing keys: score std ~1 over sources, so the mix is neither uniform nor one-hot.
  t.push_back(norm(p + "self_attention_res_norm.weight", h));
  t.push_back(linear(p + "self_attention_res_proj.weight", 1, h));
  t.push_back(norm(p + "mlp_res_norm.weight", h));
  t.push_back(linear(p + "mlp_res_proj.weight", 1, h));
  if (is_mla_layer(d, layer)) {
    add_mla(t, d, p + "self_attn.");
  } else {
    add_kda(t, d, p + "self_attn.");
  }
  if (layer == 0) {  // first_k_dense_replace = 1
    t.push_back(linear(p + "mlp.gate_proj.weight", d.intermediate_size, h));
    t.push_back(linear(p + "mlp.up_proj.weight", d.intermediate_size, h));
    t.push_back(linear(p + "mlp.down_proj.weight", h, d.intermediate_size));
  } else {
    add_moe(t, d, p + "block_sparse_moe.");
  }
  sort_by_name(t);
  return t;
}

TensorSpec embedding_tensor(const SynthDims& d) {
  return uniform(std::string(kPrefix) + "model.embed_tokens.weight", DType::kBF16,
                 {d.vocab_size(), d.hidden_size}, 1.0);
}

std::vector<TensorSpec> head_tensors(const SynthDims& d) {
  const std::string m = std::string(kPrefix) + "model.";
  std::vector<TensorSpec> t;
  t.push_back(norm(m + "norm.weight", d.hidden_size));
  t.push_back(norm(m + "output_attn_res_norm.weight", d.hidden_size));
  t.push_back(linear(m + "output_attn_res_proj.weight", 1, d.hidden_size));
  // Logits of std ~3: a peaked but not one-hot next-token distribution. Reserved ids and bytes
  // that are not text get near-zero logits, as in a trained model, so output reads as text.
  TensorSpec lm_head =
      linear(std::string(kPrefix) + "lm_head.weight", d.vocab_size(), d.hidden_size, 3.0);
  lm_head.init = Init::kUniformTail;
  lm_head.n_valid = d.base_vocab;
  t.push_back(std::move(lm_head));
  return t;
}

std::vector<ShardSpec> shard_layout(const SynthDims& d) {
  std::vector<ShardSpec> shards;
  for (int l = 0; l < d.num_hidden_layers; l += d.layers_per_shard) {
    ShardSpec s;
    s.first_layer = l;
    s.end_layer = std::min(l + d.layers_per_shard, d.num_hidden_layers);
    shards.push_back(s);
  }
  shards.front().has_embedding = true;
  shards.back().has_head = true;
  return shards;
}

std::vector<TensorSpec> shard_tensors(const SynthDims& d, const ShardSpec& shard) {
  std::vector<TensorSpec> t;
  if (shard.has_embedding) t.push_back(embedding_tensor(d));
  for (int l = shard.first_layer; l < shard.end_layer; ++l) {
    std::vector<TensorSpec> layer = layer_tensors(d, l);
    std::move(layer.begin(), layer.end(), std::back_inserter(t));
  }
  if (shard.has_head) {
    std::vector<TensorSpec> head = head_tensors(d);
    std::move(head.begin(), head.end(), std::back_inserter(t));
  }
  sort_by_name(t);
  return t;
}

std::string shard_file_name(int index_0based, int n_shards) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%06d.safetensors", index_0based + 1, n_shards);
  return buf;
}

uint64_t expert_bytes(const SynthDims& d) {
  const uint64_t m = uint64_t(d.moe_intermediate_size) * uint64_t(d.routed_expert_hidden_size);
  return 3 * (m / 2 + m / 32);
}

uint64_t total_tensor_bytes(const SynthDims& d) {
  // One layer's roster at a time: memory stays small even for 93 layers of 896 experts.
  uint64_t total = embedding_tensor(d).nbytes();
  for (const TensorSpec& t : head_tensors(d)) total += t.nbytes();
  for (int l = 0; l < d.num_hidden_layers; ++l) {
    for (const TensorSpec& t : layer_tensors(d, l)) total += t.nbytes();
  }
  return total;
}

void validate_dims(const SynthDims& d) {
  auto need = [](bool ok, const char* what) {
    if (!ok) base::fail("synth: ", what);
  };
  need(d.num_hidden_layers >= 1, "--layers must be at least 1");
  need(d.num_experts >= 1, "--experts must be at least 1");
  need(d.num_experts_per_token >= 1 && d.num_experts_per_token <= d.num_experts,
       "num_experts_per_token must be between 1 and the expert count");
  need(d.routed_expert_hidden_size % 32 == 0 && d.moe_intermediate_size % 32 == 0,
       "expert widths must be multiples of 32 (one E8M0 scale per 32 inputs)");
  need(d.kda_head_dim >= d.kda_heads, "A_log is stored as [head_dim]: head_dim >= num_heads");
  need(d.layers_per_shard >= 1 && d.attn_res_block_size >= 1, "invalid shard or block size");
  need(d.base_vocab >= 256 && d.hidden_size > 0, "invalid vocabulary or hidden size");
}

}  // namespace deltafin::synth
