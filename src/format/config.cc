// config.json parsing: the Kimi K3 / Kimi-Linear schema (Qwen3 in format/family_qwen3.cc) with its
// consistency checks, read with base::JsonObject so that every error names the file and the field.
#include "format/config.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "base/error.h"
#include "base/json_fields.h"
#include "format/family_qwen3.h"

namespace deltafin::format {

using base::describe_json;
using base::fail;
using base::FieldProblem;
using base::Json;
using base::JsonObject;

namespace {

// Sizes above this are refused: no model has them, and bounding them keeps every shape product
// in the inventory far from int64 overflow.
constexpr int64_t kMaxSize = int64_t{1} << 20;

// A consistency check between fields failed: the message says which and why.
template <typename... Args>
[[noreturn]] void fail_field(const JsonObject& f, const std::string& key, Args&&... args) {
  f.fail(key, FieldProblem::kInvalid, std::forward<Args>(args)...);
}

int64_t size(const JsonObject& f, const std::string& key) { return f.integer(key, 1, kMaxSize); }

double positive_number(const JsonObject& f, const std::string& key) {
  const base::JsonField v = f.at(key);
  const double d = v.number();
  if (!(d > 0))
    v.fail(FieldProblem::kOutOfRange, "expected a positive number, got ", describe_json(v.json()));
  return d;
}
double positive_number_or(const JsonObject& f, const std::string& key, double fallback) {
  return f.has(key) ? positive_number(f, key) : fallback;
}

// A string field that must have one value deltafin implements.
std::string expect_string(const JsonObject& f, const std::string& key, const std::string& want) {
  std::string got = f.string(key);
  if (got != want) fail_field(f, key, "expected \"", want, "\", got \"", got, "\"");
  return got;
}

// 1-based layer numbers, each in [1, n_layers], no repeats.
std::vector<int64_t> layer_list(const JsonObject& f, const std::string& key, int64_t n_layers) {
  const Json& v = f.at(key).json();
  if (!v.is_array()) {
    f.fail(key, FieldProblem::kWrongType, "expected an array of 1-based layer numbers, got ",
           describe_json(v));
  }
  std::vector<int64_t> out;
  std::vector<bool> seen(static_cast<size_t>(n_layers) + 1, false);
  for (const Json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 1 || e.get<int64_t>() > n_layers) {
      f.fail(key, FieldProblem::kOutOfRange, "expected 1-based layer numbers in [1, ", n_layers,
             "] (num_hidden_layers), got ", describe_json(e));
    }
    const int64_t layer = e.get<int64_t>();
    if (seen[static_cast<size_t>(layer)]) fail_field(f, key, "layer ", layer, " is listed twice");
    seen[static_cast<size_t>(layer)] = true;
    out.push_back(layer);
  }
  return out;
}

// Each layer's attention kind from the 1-based kda_layers / full_attn_layers: together they must
// name every layer exactly once; either alone determines the other.
std::vector<AttentionKind> read_attention_kinds(const JsonObject& lin, int64_t n_layers) {
  const bool has_kda = lin.has("kda_layers"), has_full = lin.has("full_attn_layers");
  if (!has_kda && !has_full) fail_field(lin, "kda_layers", "missing (and so is full_attn_layers)");
  std::vector<int> kind(static_cast<size_t>(n_layers), -1);  // 1 = KDA, 0 = MLA
  if (has_kda) {
    for (int64_t l : layer_list(lin, "kda_layers", n_layers)) kind[static_cast<size_t>(l - 1)] = 1;
  }
  if (has_full) {
    for (int64_t l : layer_list(lin, "full_attn_layers", n_layers)) {
      if (kind[static_cast<size_t>(l - 1)] == 1) {
        fail_field(lin, "full_attn_layers", "layer ", l, " is also in kda_layers");
      }
      kind[static_cast<size_t>(l - 1)] = 0;
    }
  }
  std::vector<AttentionKind> out(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l) {
    int k = kind[static_cast<size_t>(l)];
    if (k < 0) {
      if (has_kda && has_full) {
        fail_field(lin, "kda_layers", "layer ", l + 1,
                   " (1-based) is in neither kda_layers nor full_attn_layers");
      }
      k = has_kda ? 0 : 1;
    }
    out[static_cast<size_t>(l)] = k == 1 ? AttentionKind::kKda : AttentionKind::kMla;
  }
  return out;
}

// compressed-tensors MXFP4 (the K3 release) is the one quantization deltafin reads.
void check_quantization(const JsonObject& q) {
  expect_string(q, "quant_method", "compressed-tensors");
  expect_string(q, "format", "mxfp4-pack-quantized");
  if (q.has("quantization_status")) expect_string(q, "quantization_status", "compressed");
  const JsonObject groups = q.object("config_groups");
  const std::vector<std::string> group_names = groups.keys();
  if (group_names.empty()) fail_field(q, "config_groups", "expected at least one group");
  for (const std::string& name : group_names) {
    const JsonObject group = groups.object(name);
    if (group.has("format")) expect_string(group, "format", "mxfp4-pack-quantized");
    const JsonObject weights = group.object("weights");
    if (weights.integer("num_bits", 0, 64) != 4)
      fail_field(weights, "num_bits", "expected 4 (MXFP4)");
    expect_string(weights, "type", "float");
    if (weights.integer("group_size", 0, kMaxSize) != 32)
      fail_field(weights, "group_size", "expected 32 (MXFP4)");
    if (weights.has("strategy")) expect_string(weights, "strategy", "group");
    if (group.has("input_activations")) {
      fail_field(group, "input_activations",
                 "expected null (only weight-only quantization is supported)");
    }
  }
}

int64_t token_id(const JsonObject& text, const JsonObject& top, const std::string& key) {
  const JsonObject& f = text.has(key) ? text : top;
  if (!f.has(key)) return -1;
  const Json& v = f.at(key).json();
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  if (!v.is_array()) return f.integer(key, 0, kMaxId);
  // HF allows a list of ids; the first is the canonical one.
  if (v.empty() || !v[0].is_number_integer() || v[0].get<int64_t>() < 0 ||
      v[0].get<int64_t>() > kMaxId) {
    fail_field(f, key, "expected a token id or a list of them, got ", describe_json(v));
  }
  return v[0].get<int64_t>();
}

}  // namespace

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::kKimiK3:
      return "kimi_k3";
    case Arch::kKimiLinear:
      return "kimi_linear";
    case Arch::kQwen3:
      return "qwen3";
  }
  return "?";
}

int64_t ModelConfig::expert_in_size() const {
  return routed_expert_hidden_size > 0 ? routed_expert_hidden_size : hidden_size;
}

int64_t ModelConfig::count_layers(AttentionKind kind) const {
  int64_t n = 0;
  for (const LayerKind& k : layer_kinds) n += k.attention == kind;
  return n;
}

int64_t ModelConfig::count_layers(MlpKind kind) const {
  int64_t n = 0;
  for (const LayerKind& k : layer_kinds) n += k.mlp == kind;
  return n;
}

ModelConfig parse_config_json(const std::string& json_text, const std::string& file) {
  const base::JsonReadOptions options{file};
  const Json root = base::parse_json(json_text, options);
  const JsonObject top(base::JsonField(root, "", options));

  ModelConfig c{};
  c.model_type = top.string("model_type");
  if (c.model_type == "kimi_k3") {
    c.arch = Arch::kKimiK3;
  } else if (c.model_type == "kimi_linear") {
    c.arch = Arch::kKimiLinear;
  } else if (c.model_type == "qwen3") {
    return parse_qwen3_config(top);  // a family of its own keys (format/family_qwen3.cc)
  } else {
    fail_field(top, "model_type", "expected \"kimi_k3\", \"kimi_linear\" or \"qwen3\", got \"",
               c.model_type, "\"");
  }
  // K3 wraps the language model's fields in text_config; Kimi-Linear has them at the top level.
  const JsonObject text = c.arch == Arch::kKimiK3 ? top.object("text_config") : top;
  if (c.arch == Arch::kKimiK3) expect_string(text, "model_type", "kimi_linear");

  c.hidden_size = size(text, "hidden_size");
  c.vocab_size = size(text, "vocab_size");
  c.num_hidden_layers = size(text, "num_hidden_layers");

  // MLA
  c.num_attention_heads = size(text, "num_attention_heads");
  c.num_key_value_heads =
      text.integer_or("num_key_value_heads", c.num_attention_heads, 1, kMaxSize);
  if (c.num_key_value_heads != c.num_attention_heads) {
    fail_field(text, "num_key_value_heads", c.num_key_value_heads,
               " differs from num_attention_heads ", c.num_attention_heads,
               " (MLA has one key/value head per query head)");
  }
  c.q_lora_rank = text.integer_or("q_lora_rank", 0, 0, kMaxSize);
  c.kv_lora_rank = size(text, "kv_lora_rank");
  c.qk_nope_head_dim = size(text, "qk_nope_head_dim");
  c.qk_rope_head_dim = text.integer("qk_rope_head_dim", 0, kMaxSize);
  c.v_head_dim = size(text, "v_head_dim");
  // HF's default is false, but Kimi's MLA asserts NoPE and deltafin implements no RoPE.
  c.mla_use_nope = text.boolean_or("mla_use_nope", false);
  if (!c.mla_use_nope) {
    fail_field(text, "mla_use_nope", "expected true (MLA with RoPE is not supported)");
  }
  c.mla_use_output_gate = text.boolean_or("mla_use_output_gate", false);

  // KDA
  const JsonObject lin = text.object("linear_attn_config");
  c.kda_num_heads = size(lin, "num_heads");
  c.kda_head_dim = size(lin, "head_dim");
  c.short_conv_kernel_size = lin.integer("short_conv_kernel_size", 1, 64);
  c.use_full_rank_gate = lin.boolean_or("use_full_rank_gate", false);
  if (lin.has("gate_lower_bound")) c.gate_lower_bound = lin.number("gate_lower_bound");
  const std::vector<AttentionKind> attention = read_attention_kinds(lin, c.num_hidden_layers);

  // MoE
  c.num_experts = size(text, "num_experts");
  c.num_experts_per_token = size(text, "num_experts_per_token");
  if (c.num_experts_per_token > c.num_experts) {
    fail_field(text, "num_experts_per_token", c.num_experts_per_token, " exceeds num_experts ",
               c.num_experts);
  }
  c.num_shared_experts = text.integer_or("num_shared_experts", 0, 0, 1024);
  c.moe_intermediate_size = size(text, "moe_intermediate_size");
  c.routed_expert_hidden_size = text.integer_or("routed_expert_hidden_size", 0, 0, kMaxSize);
  c.latent_moe_use_norm = text.boolean_or("latent_moe_use_norm", false);
  if (c.latent_moe_use_norm && c.routed_expert_hidden_size == 0) {
    fail_field(text, "latent_moe_use_norm",
               "is true but routed_expert_hidden_size is absent (no latent MoE)");
  }
  c.first_k_dense_replace = text.integer_or("first_k_dense_replace", 0, 0, c.num_hidden_layers);
  c.moe_layer_freq = text.integer_or("moe_layer_freq", 1, 1, kMaxSize);
  c.num_expert_group = text.integer_or("num_expert_group", 1, 1, c.num_experts);
  if (c.num_experts % c.num_expert_group != 0) {
    fail_field(text, "num_expert_group", c.num_expert_group, " does not divide num_experts ",
               c.num_experts);
  }
  c.topk_group = text.integer_or("topk_group", 1, 1, c.num_expert_group);
  if (c.topk_group * (c.num_experts / c.num_expert_group) < c.num_experts_per_token) {
    fail_field(text, "topk_group", c.topk_group, " groups of ", c.num_experts / c.num_expert_group,
               " experts cannot supply num_experts_per_token ", c.num_experts_per_token);
  }
  c.moe_renormalize = text.boolean_or("moe_renormalize", true);
  c.use_grouped_topk = text.boolean_or("use_grouped_topk", true);
  c.routed_scaling_factor = positive_number_or(text, "routed_scaling_factor", 1.0);
  c.moe_router_activation_func = text.has("moe_router_activation_func")
                                     ? expect_string(text, "moe_router_activation_func", "sigmoid")
                                     : "sigmoid";
  c.topk_method =
      text.has("topk_method") ? expect_string(text, "topk_method", "noaux_tc") : "noaux_tc";

  c.layer_kinds.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const bool moe = c.num_experts > 0 && l >= c.first_k_dense_replace && l % c.moe_layer_freq == 0;
    c.layer_kinds[static_cast<size_t>(l)] = {attention[static_cast<size_t>(l)],
                                             moe ? MlpKind::kMoe : MlpKind::kDense};
  }
  const bool any_dense = c.count_layers(MlpKind::kDense) > 0;
  c.intermediate_size = any_dense ? size(text, "intermediate_size")
                                  : text.integer_or("intermediate_size", 0, 0, kMaxSize);

  c.hidden_act = text.string("hidden_act");
  if (c.hidden_act == "situ") {
    c.situ_beta = positive_number(text, "activation_situ_beta");
    c.situ_linear_beta = positive_number(text, "activation_situ_linear_beta");
  } else if (c.hidden_act != "silu") {
    fail_field(text, "hidden_act", "expected \"situ\" or \"silu\", got \"", c.hidden_act, "\"");
  }
  c.rms_norm_eps = positive_number(text, "rms_norm_eps");
  c.attn_res_block_size = text.integer_or("attn_res_block_size", 0, 0, kMaxSize);
  const JsonObject& position_fields = text.has("max_position_embeddings") ? text : top;
  c.max_position_embeddings =
      position_fields.integer_or("max_position_embeddings", 0, 0, int64_t{1} << 40);

  const JsonObject& tie_fields = text.has("tie_word_embeddings") ? text : top;
  c.tie_word_embeddings = tie_fields.boolean_or("tie_word_embeddings", false);
  c.bos_token_id = token_id(text, top, "bos_token_id");
  c.eos_token_id = token_id(text, top, "eos_token_id");
  // Generation stops at this id, and the sampler only ever produces ids below vocab_size: an id
  // beyond it would never end a generation.
  if (c.eos_token_id >= c.vocab_size) {
    fail_field(text.has("eos_token_id") ? text : top, "eos_token_id", c.eos_token_id,
               " is outside the vocabulary (vocab_size ", c.vocab_size, ")");
  }
  c.pad_token_id = token_id(text, top, "pad_token_id");

  // The quantization_config sits in text_config in the K3 release, at the top level in others.
  const JsonObject& quant_owner = text.has("quantization_config") ? text : top;
  c.experts_mxfp4 = quant_owner.has("quantization_config");
  if (c.experts_mxfp4) {
    check_quantization(quant_owner.object("quantization_config"));
    if (c.expert_in_size() % 32 != 0) {
      fail_field(text,
                 c.routed_expert_hidden_size > 0 ? "routed_expert_hidden_size" : "hidden_size",
                 c.expert_in_size(), " is not a multiple of the MXFP4 group size 32");
    }
    if (c.moe_intermediate_size % 32 != 0) {
      fail_field(text, "moe_intermediate_size", c.moe_intermediate_size,
                 " is not a multiple of the MXFP4 group size 32");
    }
  }
  return c;
}

ModelConfig load_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("file ", path, ": cannot open (a model folder needs config.json)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config_json(text.str(), path);
}

}  // namespace deltafin::format
