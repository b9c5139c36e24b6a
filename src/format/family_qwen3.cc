// Qwen3 dense (Qwen3-0.6B-Base / 1.7B-Base, HF Qwen3ForCausalLM): its config keys, checked, and its
// tensor table: GQA with per-head q/k RMSNorm, a dense SiLU MLP on every layer, usually tied
// embeddings (no lm_head.weight in the file). No prefix, no experts.
#include <limits>

#include "format/family_qwen3.h"
#include "format/schema.h"

namespace deltafin::format {

using base::describe_json;
using base::FieldProblem;
using base::Json;
using base::JsonObject;

namespace {

constexpr int64_t kMaxSize = int64_t{1} << 20;  // as config.cc: keeps shape products small

template <typename... Args>
[[noreturn]] void invalid(const JsonObject& f, const std::string& key, Args&&... args) {
  f.fail(key, FieldProblem::kInvalid, std::forward<Args>(args)...);
}

int64_t size(const JsonObject& f, const std::string& key) { return f.integer(key, 1, kMaxSize); }

double positive_or(const JsonObject& f, const std::string& key, double fallback) {
  if (!f.has(key)) return fallback;
  const base::JsonField v = f.at(key);
  const double d = v.number();
  if (!(d > 0))
    v.fail(FieldProblem::kOutOfRange, "expected a positive number, got ", describe_json(v.json()));
  return d;
}

// HF allows one id or a list of them; the first is the canonical one. -1 when absent.
int64_t token_id(const JsonObject& f, const std::string& key) {
  if (!f.has(key)) return -1;
  const Json& v = f.at(key).json();
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  if (!v.is_array()) return f.integer(key, 0, kMaxId);
  if (v.empty() || !v[0].is_number_integer() || v[0].get<int64_t>() < 0 ||
      v[0].get<int64_t>() > kMaxId)
    invalid(f, key, "expected a token id or a list of them, got ", describe_json(v));
  return v[0].get<int64_t>();
}

// rope_theta at the top level (transformers 4.x) or in rope_parameters (5.x); only the plain
// rotation is implemented, so any scaling is refused.
double read_rope_theta(const JsonObject& top) {
  if (top.has("rope_scaling"))
    invalid(top, "rope_scaling", "expected null (RoPE scaling is not supported for qwen3), got ",
            describe_json(top.at("rope_scaling").json()));
  if (top.has("rope_parameters")) {
    const JsonObject rope = top.object("rope_parameters");
    if (rope.has("rope_type") && rope.string("rope_type") != "default")
      invalid(rope, "rope_type", "expected \"default\", got \"", rope.string("rope_type"), "\"");
    if (rope.has("rope_theta")) return positive_or(rope, "rope_theta", 0.0);
  }
  return positive_or(top, "rope_theta", 10000.0);  // Qwen3Config's default
}

}  // namespace

ModelConfig parse_qwen3_config(const JsonObject& top) {
  ModelConfig c{};
  c.arch = Arch::kQwen3;
  c.model_type = top.string("model_type");
  c.hidden_size = size(top, "hidden_size");
  c.vocab_size = size(top, "vocab_size");
  c.num_hidden_layers = size(top, "num_hidden_layers");
  c.intermediate_size = size(top, "intermediate_size");
  c.num_attention_heads = size(top, "num_attention_heads");
  c.num_key_value_heads =
      top.integer_or("num_key_value_heads", c.num_attention_heads, 1, c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    invalid(top, "num_key_value_heads", c.num_key_value_heads,
            " does not divide num_attention_heads ", c.num_attention_heads);
  // Qwen3Config's default is hidden / heads; 0.6B sets 128 against 1024 / 16 = 64.
  c.head_dim = top.integer_or("head_dim", c.hidden_size / c.num_attention_heads, 1, kMaxSize);
  if (c.head_dim % 2 != 0)
    invalid(top, "head_dim", c.head_dim, " is odd (RoPE rotates pairs of channels)");
  c.rope_theta = read_rope_theta(top);
  c.rms_norm_eps = positive_or(top, "rms_norm_eps", 1e-6);
  c.hidden_act = top.has("hidden_act") ? top.string("hidden_act") : "silu";
  if (c.hidden_act != "silu")
    invalid(top, "hidden_act", "expected \"silu\", got \"", c.hidden_act, "\"");
  if (top.boolean_or("attention_bias", false))
    invalid(top, "attention_bias", "expected false (q/k/v/o biases are not supported for qwen3)");
  if (top.boolean_or("use_sliding_window", false))
    invalid(top, "use_sliding_window",
            "expected false (sliding-window attention is not supported)");
  if (top.has("layer_types")) {
    const base::JsonField types = top.at("layer_types");
    for (size_t i = 0; i < types.array_size(); ++i)
      if (types.element(i).string() != "full_attention")
        types.element(i).fail(FieldProblem::kInvalid, "expected \"full_attention\", got \"",
                              types.element(i).string(), "\"");
  }
  c.max_position_embeddings = top.integer_or("max_position_embeddings", 0, 0, int64_t{1} << 40);
  c.tie_word_embeddings = top.boolean_or("tie_word_embeddings", false);  // Qwen3Config's default
  c.bos_token_id = token_id(top, "bos_token_id");
  c.eos_token_id = token_id(top, "eos_token_id");
  if (c.eos_token_id >= c.vocab_size)
    invalid(top, "eos_token_id", c.eos_token_id, " is outside the vocabulary (vocab_size ",
            c.vocab_size, ")");
  c.pad_token_id = token_id(top, "pad_token_id");
  c.layer_kinds.assign(static_cast<size_t>(c.num_hidden_layers),
                       {AttentionKind::kGqa, MlpKind::kDense});
  // No experts, no MLA, no KDA: their sizes stay 0 (value-initialized above).
  c.routed_scaling_factor = 1.0;
  return c;
}

const FamilySchema& qwen3_schema() {
  using enum Block;
  using enum Role;
  using enum Dim;
  using enum Need;
  static const FamilySchema schema{
      Arch::kQwen3,
      "",
      "model.layers.",
      "",  // no routed experts
      {
          {kGlobal, kTokenEmbedding, "model.embed_tokens.weight", {kVocab, kHidden}},
          {kGlobal, kFinalNorm, "model.norm.weight", {kHidden}, kSmallBf16},
          {kGlobal, kLmHead, "lm_head.weight", {kVocab, kHidden}, kBf16, kUntiedLmHead},

          {kLayer, kInputNorm, "input_layernorm.weight", {kHidden}, kSmallBf16},
          {kLayer, kPostAttentionNorm, "post_attention_layernorm.weight", {kHidden}, kSmallBf16},

          {kGqa, kGqaQProj, "self_attn.q_proj.weight", {kGqaQWidth, kHidden}},
          {kGqa, kGqaKProj, "self_attn.k_proj.weight", {kGqaKvWidth, kHidden}},
          {kGqa, kGqaVProj, "self_attn.v_proj.weight", {kGqaKvWidth, kHidden}},
          {kGqa, kGqaOProj, "self_attn.o_proj.weight", {kHidden, kGqaQWidth}},
          {kGqa, kGqaQNorm, "self_attn.q_norm.weight", {kHeadDim}, kSmallBf16},
          {kGqa, kGqaKNorm, "self_attn.k_norm.weight", {kHeadDim}, kSmallBf16},

          {kDense, kMlpGate, "mlp.gate_proj.weight", {kIntermediate, kHidden}},
          {kDense, kMlpUp, "mlp.up_proj.weight", {kIntermediate, kHidden}},
          {kDense, kMlpDown, "mlp.down_proj.weight", {kHidden, kIntermediate}},
      }};
  return schema;
}

}  // namespace deltafin::format
