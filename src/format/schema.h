// A model family's tensor schema, written once as a table (format/family_*.cc): every tensor's
// role, name, shape in terms of the config, accepted dtypes and where its bytes live. The inventory
// check, the weight binding, the synthesizer and the routed-expert layout all read it; a new
// family is one new table (plus its block choices in model/arch_*.cc).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/dtype.h"

namespace deltafin::format {

// What a tensor is for. The binding asks for tensors by role, never by name.
enum class Role : uint8_t {
  // Global
  kTokenEmbedding,
  kFinalNorm,
  kOutputResNorm,  // the attention-residual mix before the final norm
  kOutputResProj,
  kLmHead,
  // Every layer
  kInputNorm,
  kPostAttentionNorm,
  kAttnResNorm,  // the attention-residual mix before attention
  kAttnResProj,
  kMlpResNorm,  // the attention-residual mix before the MLP
  kMlpResProj,
  // KDA
  kKdaQProj,
  kKdaKProj,
  kKdaVProj,
  kKdaQConv,
  kKdaKConv,
  kKdaVConv,
  kKdaFAProj,  // forget gate, low rank
  kKdaFBProj,
  kKdaBProj,  // beta logits per head
  kKdaALog,
  kKdaDtBias,
  kKdaONorm,
  kKdaOProj,
  kKdaGProj,   // full-rank output gate
  kKdaGAProj,  // low-rank output gate
  kKdaGBProj,
  // MLA
  kMlaQProj,  // without q low rank
  kMlaQAProj,
  kMlaQANorm,
  kMlaQBProj,
  kMlaKvAProj,
  kMlaKvANorm,
  kMlaKvBProj,
  kMlaOProj,
  kMlaGProj,  // output gate
  // GQA (Qwen3)
  kGqaQProj,
  kGqaKProj,
  kGqaVProj,
  kGqaOProj,
  kGqaQNorm,  // per head, over head_dim, before RoPE
  kGqaKNorm,
  // Dense MLP
  kMlpGate,
  kMlpUp,
  kMlpDown,
  // MoE
  kRouter,
  kRouterBias,
  kSharedGate,  // the shared experts, fused
  kSharedUp,
  kSharedDown,
  kLatentDown,  // latent MoE: hidden -> expert width and back
  kLatentUp,
  kLatentNorm,
  // One routed expert's matrices
  kExpertGate,
  kExpertDown,
  kExpertUp,
};

// Which block a row belongs to: a layer holds the kLayer rows, those of its attention kind and
// those of its MLP kind; a MoE layer's routed experts each hold the kExpert rows.
enum class Block : uint8_t { kGlobal, kLayer, kKda, kMla, kGqa, kDense, kMoe, kExpert };

// Where a tensor's bytes live while the model runs.
enum class Placement : uint8_t {
  kResident,  // global tensors: embeddings, final norms, lm_head
  kLayer,     // a layer's spine: mapped, or streamed layer by layer
  kExpert,    // a routed expert's tensors, read per token
};

// A size the config decides. Products are named (kKdaWidth = heads x head_dim) so a shape reads
// as the release's own formula.
enum class Dim : uint8_t {
  kOne,
  kHidden,
  kVocab,
  kIntermediate,  // dense MLP
  kKdaHeads,
  kKdaHeadDim,
  kKdaWidth,  // KDA heads x head_dim
  kConvKernel,
  kQLoraRank,
  kMlaQWidth,  // heads x (qk_nope + qk_rope)
  kKvLoraRank,
  kMlaKvAWidth,  // kv_lora_rank + qk_rope
  kMlaKvBWidth,  // heads x (qk_nope + v): per head k_nope rows, then v rows
  kMlaOWidth,    // heads x v
  kHeadDim,      // GQA head_dim
  kGqaQWidth,    // GQA query heads x head_dim
  kGqaKvWidth,   // GQA key/value heads x head_dim
  kExperts,      // routed experts per MoE layer
  kSharedWidth,  // moe_intermediate x shared experts (fused)
  kLatent,       // routed_expert_hidden_size
  kExpertIn,     // a routed expert's input width: the latent width, else hidden
  kExpertMid,    // moe_intermediate_size
};
int64_t dim_size(Dim dim, const ModelConfig& config);

// At most three dims (the depthwise conv weights [width, 1, kernel]).
struct Shape {
  constexpr Shape(std::initializer_list<Dim> list) : rank(static_cast<int>(list.size())) {
    int i = 0;
    for (Dim d : list) dims[i++] = d;
  }
  std::array<Dim, 3> dims{};
  int rank = 0;
};

// The dtypes a tensor may have (in the order messages list them) and the one the family's release
// stores (what the synthesizer writes).
struct DTypes {
  std::array<DType, 2> allowed;
  int n_allowed;
  DType stored;
};
inline constexpr DTypes kBf16{{DType::kBF16}, 1, DType::kBF16};
// Norm weights, gates, biases, A_log, dt_bias and conv weights: some releases keep them in F32.
inline constexpr DTypes kSmallF32{{DType::kF32, DType::kBF16}, 2, DType::kF32};
inline constexpr DTypes kSmallBf16{{DType::kF32, DType::kBF16}, 2, DType::kBF16};

// A row present only when the config asks for it.
enum class Need : uint8_t {
  kAlways,
  kQLowRank,         // q_lora_rank > 0
  kNoQLowRank,       // q_lora_rank == 0
  kMlaOutputGate,    // mla_use_output_gate
  kKdaFullRankGate,  // use_full_rank_gate
  kKdaLowRankGate,   // !use_full_rank_gate
  kUntiedLmHead,     // !tie_word_embeddings
  kSharedExperts,    // num_shared_experts > 0
  kLatentMoe,        // routed_expert_hidden_size > 0
  kLatentMoeNorm,    // latent_moe_use_norm
};

enum class ShapeRule : uint8_t {
  kExact,
  // A per-head vector that may carry padding: at most one dimension differs from 1 and the element
  // count is at least shape[0] (K3's A_log is F32 [128] for 96 heads, the tail zero).
  kPerHeadVector,
};

// One row of a family's table. `name` follows the block's prefix (FamilySchema): the tensor prefix
// for kGlobal, the layer prefix for a layer's blocks, the expert prefix for kExpert, whose rows
// are matrices stored as the config's expert encoding says (MXFP4: <name>.weight_packed and
// <name>.weight_scale, else <name>.weight).
struct TensorRow {
  Block block;
  Role role;
  const char* name;
  Shape shape;
  DTypes dtypes = kBf16;
  Need need = Need::kAlways;
  ShapeRule rule = ShapeRule::kExact;
};

struct FamilySchema {
  Arch arch;
  const char* tensor_prefix;    // every name starts with it: "language_model." for K3
  const char* layers;           // then a layer's names: "model.layers." <L> "."
  const char* experts;          // then a routed expert's: "block_sparse_moe.experts." <E> "."
  std::vector<TensorRow> rows;  // globals, then layer rows, in the order the inventory lists them
};
const FamilySchema& kimi_k3_schema();
const FamilySchema& kimi_linear_schema();
const FamilySchema& qwen3_schema();
const FamilySchema& family_schema(Arch arch);

// One tensor of a model, resolved from its family's table for a config.
struct ExpectedTensor {
  std::string name;  // full name, prefix included
  std::vector<int64_t> shape;
  std::vector<DType> dtypes;  // accepted dtypes
  Placement placement = Placement::kLayer;
  int64_t layer = -1;   // -1 for the global tensors
  int64_t expert = -1;  // routed experts only
  ShapeRule shape_rule = ShapeRule::kExact;
  Role role = Role::kTokenEmbedding;
  DType stored = DType::kBF16;  // the dtype the family's release stores
};

// The global tensors, in table order.
std::vector<ExpectedTensor> global_tensors(const ModelConfig& config);
// One layer's spine: the per-layer rows and those of the layer's attention and MLP kinds, in table
// order (no routed experts).
std::vector<ExpectedTensor> layer_tensors(const ModelConfig& config, int64_t layer);
// Every tensor the architecture needs, globals first, then layer by layer (spine tensors, then the
// routed experts in id order, each expert's tensors in file order).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);
bool shape_matches(const ExpectedTensor& expected, const std::vector<int64_t>& shape);
bool shape_matches(const std::vector<int64_t>& want, ShapeRule rule,
                   const std::vector<int64_t>& got);

// One routed expert's tensors, the same for every expert of every MoE layer: the family's kExpert
// rows in the config's encoding, in their required file order (K3: w1.weight_packed,
// w1.weight_scale, w2.weight_packed, w2.weight_scale, w3.weight_packed, w3.weight_scale).
struct ExpertSchema {
  enum class Part : uint8_t { kWeight, kPacked, kScales };
  struct Tensor {
    std::string suffix;  // after the expert prefix: "w1.weight_packed"
    std::vector<int64_t> shape;
    std::vector<DType> dtypes;
    Part part;
    size_t matrix;  // index into matrices
  };
  struct Matrix {
    Role role;           // kExpertGate, kExpertDown or kExpertUp
    int64_t rows, cols;  // [out, in] of the values, whatever the encoding
    size_t data;         // index into tensors: the values (MXFP4: the packed codes)
    size_t scales;       // MXFP4: index into tensors of the E8M0 scales; otherwise unused
  };
  bool mxfp4 = false;
  std::vector<Tensor> tensors;
  std::vector<Matrix> matrices;
  uint64_t span_bytes = 0;  // all tensors back to back (17,547,264 for K3)
};
ExpertSchema expert_schema(const ModelConfig& config);

// "language_model.model.layers.5.": every name of the layer starts with it, no other name does.
std::string layer_prefix(const ModelConfig& config, int64_t layer);
// "language_model.model.layers.5.block_sparse_moe.experts.17."
std::string expert_prefix(const ModelConfig& config, int64_t layer, int64_t expert);
// expert_schema(config)'s tensor suffixes, in file order.
std::vector<std::string> expert_tensor_suffixes(const ModelConfig& config);
// Bytes of one routed expert's tensors together (17,547,264 for K3).
uint64_t expert_span_bytes(const ModelConfig& config);

std::string dtypes_to_string(const std::vector<DType>& dtypes);  // "F32 or BF16"

}  // namespace deltafin::format
