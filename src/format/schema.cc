// Resolving a family's table for one config: sizes, conditions, names, the expert encoding.
#include "format/schema.h"

#include "base/error.h"

namespace deltafin::format {
namespace {

bool needed(Need need, const ModelConfig& c) {
  switch (need) {
    case Need::kAlways:
      return true;
    case Need::kQLowRank:
      return c.q_lora_rank > 0;
    case Need::kNoQLowRank:
      return c.q_lora_rank == 0;
    case Need::kMlaOutputGate:
      return c.mla_use_output_gate;
    case Need::kKdaFullRankGate:
      return c.use_full_rank_gate;
    case Need::kKdaLowRankGate:
      return !c.use_full_rank_gate;
    case Need::kUntiedLmHead:
      return !c.tie_word_embeddings;
    case Need::kSharedExperts:
      return c.num_shared_experts > 0;
    case Need::kLatentMoe:
      return c.routed_expert_hidden_size > 0;
    case Need::kLatentMoeNorm:
      return c.latent_moe_use_norm;
  }
  return false;
}

std::vector<int64_t> resolve(const Shape& shape, const ModelConfig& c) {
  std::vector<int64_t> out;
  for (int i = 0; i < shape.rank; ++i) out.push_back(dim_size(shape.dims[i], c));
  return out;
}

std::vector<DType> allowed(const DTypes& d) {
  return std::vector<DType>(d.allowed.begin(), d.allowed.begin() + d.n_allowed);
}

Block attention_block(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kKda:
      return Block::kKda;
    case AttentionKind::kMla:
      return Block::kMla;
    case AttentionKind::kGqa:
      return Block::kGqa;
  }
  return Block::kMla;
}

Block mlp_block(MlpKind kind) { return kind == MlpKind::kDense ? Block::kDense : Block::kMoe; }

ExpectedTensor expected(const TensorRow& row, const ModelConfig& c, std::string prefix,
                        int64_t layer) {
  ExpectedTensor t;
  t.name = std::move(prefix) + row.name;
  t.shape = resolve(row.shape, c);
  t.dtypes = allowed(row.dtypes);
  t.placement = layer < 0 ? Placement::kResident : Placement::kLayer;
  t.layer = layer;
  t.shape_rule = row.rule;
  t.role = row.role;
  t.stored = row.dtypes.stored;
  return t;
}

}  // namespace

int64_t dim_size(Dim dim, const ModelConfig& c) {
  switch (dim) {
    case Dim::kOne:
      return 1;
    case Dim::kHidden:
      return c.hidden_size;
    case Dim::kVocab:
      return c.vocab_size;
    case Dim::kIntermediate:
      return c.intermediate_size;
    case Dim::kKdaHeads:
      return c.kda_num_heads;
    case Dim::kKdaHeadDim:
      return c.kda_head_dim;
    case Dim::kKdaWidth:
      return c.kda_num_heads * c.kda_head_dim;
    case Dim::kConvKernel:
      return c.short_conv_kernel_size;
    case Dim::kQLoraRank:
      return c.q_lora_rank;
    case Dim::kMlaQWidth:
      return c.num_attention_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
    case Dim::kKvLoraRank:
      return c.kv_lora_rank;
    case Dim::kMlaKvAWidth:
      return c.kv_lora_rank + c.qk_rope_head_dim;
    case Dim::kMlaKvBWidth:
      return c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim);
    case Dim::kMlaOWidth:
      return c.num_attention_heads * c.v_head_dim;
    case Dim::kHeadDim:
      return c.head_dim;
    case Dim::kGqaQWidth:
      return c.num_attention_heads * c.head_dim;
    case Dim::kGqaKvWidth:
      return c.num_key_value_heads * c.head_dim;
    case Dim::kExperts:
      return c.num_experts;
    case Dim::kSharedWidth:
      return c.moe_intermediate_size * c.num_shared_experts;
    case Dim::kLatent:
      return c.routed_expert_hidden_size;
    case Dim::kExpertIn:
      return c.expert_in_size();
    case Dim::kExpertMid:
      return c.moe_intermediate_size;
  }
  return 0;
}

const FamilySchema& family_schema(Arch arch) {
  switch (arch) {
    case Arch::kKimiK3:
      return kimi_k3_schema();
    case Arch::kKimiLinear:
      return kimi_linear_schema();
    case Arch::kQwen3:
      return qwen3_schema();
  }
  base::fail("config.json: no tensor schema for this architecture");
}

std::vector<ExpectedTensor> global_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  for (const TensorRow& row : family_schema(c.arch).rows) {
    if (row.block == Block::kGlobal && needed(row.need, c))
      out.push_back(expected(row, c, family_schema(c.arch).tensor_prefix, -1));
  }
  return out;
}

std::vector<ExpectedTensor> layer_tensors(const ModelConfig& c, int64_t layer) {
  const LayerKind kind = c.layer_kinds[static_cast<size_t>(layer)];
  const Block attention = attention_block(kind.attention), mlp = mlp_block(kind.mlp);
  const std::string prefix = layer_prefix(c, layer);
  std::vector<ExpectedTensor> out;
  for (const TensorRow& row : family_schema(c.arch).rows) {
    const bool in_layer = row.block == Block::kLayer || row.block == attention || row.block == mlp;
    if (in_layer && needed(row.need, c)) out.push_back(expected(row, c, prefix, layer));
  }
  return out;
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out = global_tensors(c);
  const ExpertSchema experts = expert_schema(c);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (ExpectedTensor& t : layer_tensors(c, l)) out.push_back(std::move(t));
    if (c.layer_kinds[static_cast<size_t>(l)].mlp != MlpKind::kMoe) continue;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string prefix = expert_prefix(c, l, e);
      for (const ExpertSchema::Tensor& part : experts.tensors) {
        ExpectedTensor t;
        t.name = prefix + part.suffix;
        t.shape = part.shape;
        t.dtypes = part.dtypes;
        t.placement = Placement::kExpert;
        t.layer = l;
        t.expert = e;
        t.role = experts.matrices[part.matrix].role;
        t.stored = part.dtypes.front();
        out.push_back(std::move(t));
      }
    }
  }
  return out;
}

bool shape_matches(const ExpectedTensor& e, const std::vector<int64_t>& got) {
  return shape_matches(e.shape, e.shape_rule, got);
}

bool shape_matches(const std::vector<int64_t>& want, ShapeRule rule,
                   const std::vector<int64_t>& got) {
  if (rule == ShapeRule::kExact) return got == want;
  // At most one dimension differs from 1, so the element count is that dimension (no overflow).
  int64_t numel = 1, n_wide = 0;
  for (int64_t dim : got) {
    if (dim == 1) continue;
    ++n_wide;
    numel = dim;
  }
  return n_wide <= 1 && numel >= want[0];
}

ExpertSchema expert_schema(const ModelConfig& c) {
  ExpertSchema s;
  s.mxfp4 = c.experts_mxfp4;
  for (const TensorRow& row : family_schema(c.arch).rows) {
    if (row.block != Block::kExpert) continue;
    DF_ASSERT(row.shape.rank == 2);
    const std::vector<int64_t> shape = resolve(row.shape, c);
    ExpertSchema::Matrix m{row.role, shape[0], shape[1], s.tensors.size(), 0};
    const size_t index = s.matrices.size();
    const std::string stem = row.name;
    if (s.mxfp4) {
      // packed: 2 codes per byte; scale: one E8M0 byte per 32 inputs.
      s.tensors.push_back({stem + ".weight_packed",
                           {m.rows, m.cols / 2},
                           {DType::kU8},
                           ExpertSchema::Part::kPacked,
                           index});
      m.scales = s.tensors.size();
      s.tensors.push_back({stem + ".weight_scale",
                           {m.rows, m.cols / 32},
                           {DType::kU8},
                           ExpertSchema::Part::kScales,
                           index});
    } else {
      s.tensors.push_back(
          {stem + ".weight", shape, allowed(row.dtypes), ExpertSchema::Part::kWeight, index});
    }
    s.matrices.push_back(m);
  }
  for (const ExpertSchema::Tensor& t : s.tensors) {
    uint64_t n = dtype_size(t.dtypes.front());
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    s.span_bytes += n;
  }
  return s;
}

std::string layer_prefix(const ModelConfig& c, int64_t layer) {
  const FamilySchema& f = family_schema(c.arch);
  return std::string(f.tensor_prefix) + f.layers + std::to_string(layer) + ".";
}

std::string expert_prefix(const ModelConfig& c, int64_t layer, int64_t expert) {
  return layer_prefix(c, layer) + family_schema(c.arch).experts + std::to_string(expert) + ".";
}

std::vector<std::string> expert_tensor_suffixes(const ModelConfig& c) {
  std::vector<std::string> out;
  for (const ExpertSchema::Tensor& t : expert_schema(c).tensors) out.push_back(t.suffix);
  return out;
}

uint64_t expert_span_bytes(const ModelConfig& c) { return expert_schema(c).span_bytes; }

std::string dtypes_to_string(const std::vector<DType>& dtypes) {
  std::string s;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i) s += i + 1 == dtypes.size() ? " or " : ", ";
    s += dtype_name(dtypes[i]);
  }
  return s;
}

}  // namespace deltafin::format
