// Tensor roster (the K3 schema's, with initializers by role) and shard plan of a synthetic K3
// checkpoint (spec/kimi-k3.md §2).
#include "synth/layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "format/schema.h"

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
TensorSpec linear(const format::ExpectedTensor& e, double gain = 1.0) {
  return uniform(e.name, e.stored, e.shape, gain / std::sqrt(double(e.shape[1])));
}

TensorSpec norm(const format::ExpectedTensor& e) {
  TensorSpec t{e.name, e.stored, e.shape};
  t.init = Init::kNearOne;
  t.std = 0.1f;
  return t;
}

// A spine tensor's values as its role calls for.
TensorSpec spine_values(const format::ExpectedTensor& e, const format::ModelConfig& c) {
  using format::Role;
  switch (e.role) {
    case Role::kTokenEmbedding:
      return uniform(e.name, e.stored, e.shape, 1.0);
    case Role::kLmHead: {
      // Logits of std ~3: a peaked but not one-hot next-token distribution. Reserved ids and bytes
      // that are not text get near-zero logits, as in a trained model, so output reads as text.
      TensorSpec t = linear(e, 3.0);
      t.init = Init::kUniformTail;
      t.n_valid = static_cast<int>(c.vocab_size) - kReservedTokens;
      return t;
    }
    case Role::kFinalNorm:
    case Role::kOutputResNorm:
    case Role::kInputNorm:
    case Role::kPostAttentionNorm:
    case Role::kAttnResNorm:
    case Role::kMlpResNorm:
    case Role::kKdaONorm:
    case Role::kMlaQANorm:
    case Role::kMlaKvANorm:
    case Role::kLatentNorm:
      return norm(e);
    case Role::kKdaQConv:
    case Role::kKdaKConv:
    case Role::kKdaVConv:
      return uniform(e.name, e.stored, e.shape, 0.5);
    case Role::kKdaALog: {
      // K3 stores A_log as [head_dim], the entries past the head count 0.
      TensorSpec t{e.name, e.stored, {c.kda_head_dim}};
      t.init = Init::kALog;
      t.n_valid = static_cast<int>(e.shape[0]);
      return t;
    }
    case Role::kKdaDtBias:
      return uniform(e.name, e.stored, e.shape, 0.1);
    case Role::kKdaFBProj:
      // Small gate input: the lower-bounded gate stays in its sensitive range around dt_bias.
      return linear(e, 0.3);
    case Role::kRouter:
      // Router logits of std ~2: sigmoid scores spread over (0, 1), routes differ per token.
      return linear(e, 2.0);
    case Role::kRouterBias:
      return uniform(e.name, e.stored, e.shape, 0.05);
    default:
      // Every other spine tensor is a Linear weight. The AttnRes mixing keys ([1, hidden]) among
      // them get score std ~1 over sources, so the mix is neither uniform nor one-hot.
      return linear(e);
  }
}

// A spine tensor of the schema with the values its role calls for.
TensorSpec spine_tensor(const format::ExpectedTensor& e, const format::ModelConfig& c) {
  TensorSpec t = spine_values(e, c);
  t.role = e.role;
  return t;
}

// One routed expert's tensors in file order. MXFP4: codes packed two per byte, one E8M0 scale per
// 32 inputs; the scales centre the decoded values on std 1/sqrt(in).
void add_expert(std::vector<TensorSpec>& out, const format::ExpertSchema& schema,
                const std::string& prefix) {
  for (const format::ExpertSchema::Tensor& part : schema.tensors) {
    const format::ExpertSchema::Matrix& m = schema.matrices[part.matrix];
    TensorSpec t{prefix + part.suffix, part.dtypes.front(), part.shape};
    switch (part.part) {
      case format::ExpertSchema::Part::kWeight:
        t = uniform(t.name, t.dtype, t.shape, 1.0 / std::sqrt(double(m.cols)));
        break;
      case format::ExpertSchema::Part::kPacked:
        t.init = Init::kRandomBytes;
        break;
      case format::ExpertSchema::Part::kScales: {
        t.init = Init::kScaleBytes;
        const double target = 1.0 / std::sqrt(double(m.cols));
        const int centre =
            127 + static_cast<int>(std::lround(std::log2(target / (kE2m1Rms * kScaleSpreadRms))));
        t.scale_lo = static_cast<uint8_t>(centre - 2);
        t.scale_hi = static_cast<uint8_t>(centre + 1);
        break;
      }
    }
    out.push_back(std::move(t));
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

std::vector<TensorSpec> layer_tensors(const format::ModelConfig& c, int layer) {
  std::vector<TensorSpec> t;
  for (const format::ExpectedTensor& e : format::layer_tensors(c, layer))
    t.push_back(spine_tensor(e, c));
  if (c.layer_kinds[static_cast<size_t>(layer)].mlp == format::MlpKind::kMoe) {
    const format::ExpertSchema schema = format::expert_schema(c);
    for (int64_t e = 0; e < c.num_experts; ++e)
      add_expert(t, schema, format::expert_prefix(c, layer, e));
  }
  sort_by_name(t);
  return t;
}

TensorSpec embedding_tensor(const format::ModelConfig& c) {
  for (const format::ExpectedTensor& e : format::global_tensors(c)) {
    if (e.role == format::Role::kTokenEmbedding) return spine_tensor(e, c);
  }
  base::fail("synth: the schema has no token embedding");
}

std::vector<TensorSpec> head_tensors(const format::ModelConfig& c) {
  std::vector<TensorSpec> t;
  for (const format::ExpectedTensor& e : format::global_tensors(c)) {
    if (e.role != format::Role::kTokenEmbedding) t.push_back(spine_tensor(e, c));
  }
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

std::vector<TensorSpec> shard_tensors(const format::ModelConfig& c, const ShardSpec& shard) {
  std::vector<TensorSpec> t;
  if (shard.has_embedding) t.push_back(embedding_tensor(c));
  for (int l = shard.first_layer; l < shard.end_layer; ++l) {
    std::vector<TensorSpec> layer = layer_tensors(c, l);
    std::move(layer.begin(), layer.end(), std::back_inserter(t));
  }
  if (shard.has_head) {
    std::vector<TensorSpec> head = head_tensors(c);
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

uint64_t total_tensor_bytes(const format::ModelConfig& c) {
  // One layer's roster at a time: memory stays small even for 93 layers of 896 experts.
  uint64_t total = embedding_tensor(c).nbytes();
  for (const TensorSpec& t : head_tensors(c)) total += t.nbytes();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (const TensorSpec& t : layer_tensors(c, l)) total += t.nbytes();
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
