// config.json parsing: a small field reader that names the field in every error, and the Kimi K3 /
// Kimi-Linear schema with its consistency checks.
#include "format/config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deltafin::format {

using base::fail;
using Json = nlohmann::json;

namespace {

// Sizes above this are refused: no model has them, and bounding them keeps every shape product
// in the inventory far from int64 overflow.
constexpr int64_t kMaxSize = int64_t{1} << 20;

std::string describe(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Reads fields of one JSON object; every error names the file and the dotted field path.
class Fields {
 public:
  Fields(const Json* obj, std::string prefix, const std::string& file)
      : obj_(obj), prefix_(std::move(prefix)), file_(file) {}

  std::string path(const std::string& key) const { return prefix_ + key; }

  // Present and not null.
  bool has(const std::string& key) const {
    if (!obj_) return false;
    auto it = obj_->find(key);
    return it != obj_->end() && !it->is_null();
  }
  const Json& at(const std::string& key) const {
    if (!has(key)) fail_field(key, "missing");
    return *obj_->find(key);
  }

  template <typename... Args>
  [[noreturn]] void fail_field(const std::string& key, Args&&... args) const {
    fail(file_, ": field ", path(key), ": ", std::forward<Args>(args)...);
  }

  int64_t integer(const std::string& key, int64_t min, int64_t max) const {
    const Json& v = at(key);
    const bool in_range =
        v.is_number_unsigned()
            ? v.get<uint64_t>() <= static_cast<uint64_t>(max) && v.get<int64_t>() >= min
        : v.is_number_integer() ? v.get<int64_t>() >= min && v.get<int64_t>() <= max
                                : false;
    if (!in_range)
      fail_field(key, "expected an integer in [", min, ", ", max, "], got ", describe(v));
    return v.get<int64_t>();
  }
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t min, int64_t max) const {
    return has(key) ? integer(key, min, max) : fallback;
  }
  int64_t size(const std::string& key) const { return integer(key, 1, kMaxSize); }

  double number(const std::string& key) const {
    const Json& v = at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      fail_field(key, "expected a number, got ", describe(v));
    return v.get<double>();
  }
  double positive_number(const std::string& key) const {
    const double d = number(key);
    if (!(d > 0)) fail_field(key, "expected a positive number, got ", describe(at(key)));
    return d;
  }
  double positive_number_or(const std::string& key, double fallback) const {
    return has(key) ? positive_number(key) : fallback;
  }

  bool boolean(const std::string& key) const {
    const Json& v = at(key);
    if (!v.is_boolean()) fail_field(key, "expected true or false, got ", describe(v));
    return v.get<bool>();
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    return has(key) ? boolean(key) : fallback;
  }

  std::string string(const std::string& key) const {
    const Json& v = at(key);
    if (!v.is_string()) fail_field(key, "expected a string, got ", describe(v));
    return v.get<std::string>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    return has(key) ? string(key) : fallback;
  }
  // A string field that must have one value deltafin implements.
  std::string expect_string(const std::string& key, const std::string& want) const {
    std::string got = string(key);
    if (got != want) fail_field(key, "expected \"", want, "\", got \"", got, "\"");
    return got;
  }

  Fields object(const std::string& key) const {
    const Json& v = at(key);
    if (!v.is_object()) fail_field(key, "expected an object, got ", describe(v));
    return Fields(&v, path(key) + ".", file_);
  }

  // 1-based layer numbers, each in [1, n_layers], no repeats.
  std::vector<int64_t> layer_list(const std::string& key, int64_t n_layers) const {
    const Json& v = at(key);
    if (!v.is_array())
      fail_field(key, "expected an array of 1-based layer numbers, got ", describe(v));
    std::vector<int64_t> out;
    std::vector<bool> seen(static_cast<size_t>(n_layers) + 1, false);
    for (const Json& e : v) {
      if (!e.is_number_integer() || e.get<int64_t>() < 1 || e.get<int64_t>() > n_layers) {
        fail_field(key, "expected 1-based layer numbers in [1, ", n_layers,
                   "] (num_hidden_layers), got ", describe(e));
      }
      const int64_t layer = e.get<int64_t>();
      if (seen[static_cast<size_t>(layer)]) fail_field(key, "layer ", layer, " is listed twice");
      seen[static_cast<size_t>(layer)] = true;
      out.push_back(layer);
    }
    return out;
  }

 private:
  const Json* obj_;
  std::string prefix_;
  const std::string& file_;
};

// Each layer's attention kind from the 1-based kda_layers / full_attn_layers: together they must
// name every layer exactly once; either alone determines the other.
std::vector<AttentionKind> read_attention_kinds(const Fields& lin, int64_t n_layers) {
  const bool has_kda = lin.has("kda_layers"), has_full = lin.has("full_attn_layers");
  if (!has_kda && !has_full) lin.fail_field("kda_layers", "missing (and so is full_attn_layers)");
  std::vector<int> kind(static_cast<size_t>(n_layers), -1);  // 1 = KDA, 0 = MLA
  if (has_kda) {
    for (int64_t l : lin.layer_list("kda_layers", n_layers)) kind[static_cast<size_t>(l - 1)] = 1;
  }
  if (has_full) {
    for (int64_t l : lin.layer_list("full_attn_layers", n_layers)) {
      if (kind[static_cast<size_t>(l - 1)] == 1) {
        lin.fail_field("full_attn_layers", "layer ", l, " is also in kda_layers");
      }
      kind[static_cast<size_t>(l - 1)] = 0;
    }
  }
  std::vector<AttentionKind> out(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l) {
    int k = kind[static_cast<size_t>(l)];
    if (k < 0) {
      if (has_kda && has_full) {
        lin.fail_field("kda_layers", "layer ", l + 1,
                       " (1-based) is in neither kda_layers nor full_attn_layers");
      }
      k = has_kda ? 0 : 1;
    }
    out[static_cast<size_t>(l)] = k == 1 ? AttentionKind::kKda : AttentionKind::kMla;
  }
  return out;
}

// compressed-tensors MXFP4 (the K3 release) is the one quantization deltafin reads.
void check_quantization(const Fields& q) {
  q.expect_string("quant_method", "compressed-tensors");
  q.expect_string("format", "mxfp4-pack-quantized");
  if (q.has("quantization_status")) q.expect_string("quantization_status", "compressed");
  const Fields groups = q.object("config_groups");
  const Json& groups_json = q.at("config_groups");
  if (groups_json.empty()) q.fail_field("config_groups", "expected at least one group");
  for (const auto& [name, group_json] : groups_json.items()) {
    (void)group_json;
    const Fields group = groups.object(name);
    if (group.has("format")) group.expect_string("format", "mxfp4-pack-quantized");
    const Fields weights = group.object("weights");
    if (weights.integer("num_bits", 0, 64) != 4)
      weights.fail_field("num_bits", "expected 4 (MXFP4)");
    weights.expect_string("type", "float");
    if (weights.integer("group_size", 0, kMaxSize) != 32)
      weights.fail_field("group_size", "expected 32 (MXFP4)");
    if (weights.has("strategy")) weights.expect_string("strategy", "group");
    if (group.has("input_activations")) {
      group.fail_field("input_activations",
                       "expected null (only weight-only quantization is supported)");
    }
  }
}

int64_t token_id(const Fields& text, const Fields& top, const std::string& key) {
  const Fields& f = text.has(key) ? text : top;
  if (!f.has(key)) return -1;
  const Json& v = f.at(key);
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  if (!v.is_array()) return f.integer(key, 0, kMaxId);
  // HF allows a list of ids; the first is the canonical one.
  if (v.empty() || !v[0].is_number_integer() || v[0].get<int64_t>() < 0 ||
      v[0].get<int64_t>() > kMaxId) {
    f.fail_field(key, "expected a token id or a list of them, got ", describe(v));
  }
  return v[0].get<int64_t>();
}

}  // namespace

const char* arch_name(Arch arch) { return arch == Arch::kKimiK3 ? "kimi_k3" : "kimi_linear"; }

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
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    fail(file, ": invalid JSON: ", e.what());
  }
  if (!root.is_object()) fail(file, ": expected a JSON object, got ", describe(root));
  const Fields top(&root, "", file);

  ModelConfig c{};
  c.model_type = top.string("model_type");
  if (c.model_type == "kimi_k3") {
    c.arch = Arch::kKimiK3;
  } else if (c.model_type == "kimi_linear") {
    c.arch = Arch::kKimiLinear;
  } else {
    top.fail_field("model_type", "expected \"kimi_k3\" or \"kimi_linear\", got \"", c.model_type,
                   "\"");
  }
  // K3 wraps the language model's fields in text_config; Kimi-Linear has them at the top level.
  const Fields text = c.arch == Arch::kKimiK3 ? top.object("text_config") : top;
  if (c.arch == Arch::kKimiK3) text.expect_string("model_type", "kimi_linear");

  c.hidden_size = text.size("hidden_size");
  c.vocab_size = text.size("vocab_size");
  c.num_hidden_layers = text.size("num_hidden_layers");

  // MLA
  c.num_attention_heads = text.size("num_attention_heads");
  c.num_key_value_heads =
      text.integer_or("num_key_value_heads", c.num_attention_heads, 1, kMaxSize);
  if (c.num_key_value_heads != c.num_attention_heads) {
    text.fail_field("num_key_value_heads", c.num_key_value_heads,
                    " differs from num_attention_heads ", c.num_attention_heads,
                    " (MLA has one key/value head per query head)");
  }
  c.q_lora_rank = text.integer_or("q_lora_rank", 0, 0, kMaxSize);
  c.kv_lora_rank = text.size("kv_lora_rank");
  c.qk_nope_head_dim = text.size("qk_nope_head_dim");
  c.qk_rope_head_dim = text.integer("qk_rope_head_dim", 0, kMaxSize);
  c.v_head_dim = text.size("v_head_dim");
  // HF's default is false, but Kimi's MLA asserts NoPE and deltafin implements no RoPE.
  c.mla_use_nope = text.boolean_or("mla_use_nope", false);
  if (!c.mla_use_nope) {
    text.fail_field("mla_use_nope", "expected true (MLA with RoPE is not supported)");
  }
  c.mla_use_output_gate = text.boolean_or("mla_use_output_gate", false);

  // KDA
  const Fields lin = text.object("linear_attn_config");
  c.kda_num_heads = lin.size("num_heads");
  c.kda_head_dim = lin.size("head_dim");
  c.short_conv_kernel_size = lin.integer("short_conv_kernel_size", 1, 64);
  c.use_full_rank_gate = lin.boolean_or("use_full_rank_gate", false);
  if (lin.has("gate_lower_bound")) c.gate_lower_bound = lin.number("gate_lower_bound");
  const std::vector<AttentionKind> attention = read_attention_kinds(lin, c.num_hidden_layers);

  // MoE
  c.num_experts = text.size("num_experts");
  c.num_experts_per_token = text.size("num_experts_per_token");
  if (c.num_experts_per_token > c.num_experts) {
    text.fail_field("num_experts_per_token", c.num_experts_per_token, " exceeds num_experts ",
                    c.num_experts);
  }
  c.num_shared_experts = text.integer_or("num_shared_experts", 0, 0, 1024);
  c.moe_intermediate_size = text.size("moe_intermediate_size");
  c.routed_expert_hidden_size = text.integer_or("routed_expert_hidden_size", 0, 0, kMaxSize);
  c.latent_moe_use_norm = text.boolean_or("latent_moe_use_norm", false);
  if (c.latent_moe_use_norm && c.routed_expert_hidden_size == 0) {
    text.fail_field("latent_moe_use_norm",
                    "is true but routed_expert_hidden_size is absent (no latent MoE)");
  }
  c.first_k_dense_replace = text.integer_or("first_k_dense_replace", 0, 0, c.num_hidden_layers);
  c.moe_layer_freq = text.integer_or("moe_layer_freq", 1, 1, kMaxSize);
  c.num_expert_group = text.integer_or("num_expert_group", 1, 1, c.num_experts);
  if (c.num_experts % c.num_expert_group != 0) {
    text.fail_field("num_expert_group", c.num_expert_group, " does not divide num_experts ",
                    c.num_experts);
  }
  c.topk_group = text.integer_or("topk_group", 1, 1, c.num_expert_group);
  if (c.topk_group * (c.num_experts / c.num_expert_group) < c.num_experts_per_token) {
    text.fail_field("topk_group", c.topk_group, " groups of ", c.num_experts / c.num_expert_group,
                    " experts cannot supply num_experts_per_token ", c.num_experts_per_token);
  }
  c.moe_renormalize = text.boolean_or("moe_renormalize", true);
  c.use_grouped_topk = text.boolean_or("use_grouped_topk", true);
  c.routed_scaling_factor = text.positive_number_or("routed_scaling_factor", 1.0);
  c.moe_router_activation_func = text.has("moe_router_activation_func")
                                     ? text.expect_string("moe_router_activation_func", "sigmoid")
                                     : "sigmoid";
  c.topk_method =
      text.has("topk_method") ? text.expect_string("topk_method", "noaux_tc") : "noaux_tc";

  c.layer_kinds.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const bool moe = c.num_experts > 0 && l >= c.first_k_dense_replace && l % c.moe_layer_freq == 0;
    c.layer_kinds[static_cast<size_t>(l)] = {attention[static_cast<size_t>(l)],
                                             moe ? MlpKind::kMoe : MlpKind::kDense};
  }
  const bool any_dense = c.count_layers(MlpKind::kDense) > 0;
  c.intermediate_size = any_dense ? text.size("intermediate_size")
                                  : text.integer_or("intermediate_size", 0, 0, kMaxSize);

  c.hidden_act = text.string("hidden_act");
  if (c.hidden_act == "situ") {
    c.situ_beta = text.positive_number("activation_situ_beta");
    c.situ_linear_beta = text.positive_number("activation_situ_linear_beta");
  } else if (c.hidden_act != "silu") {
    text.fail_field("hidden_act", "expected \"situ\" or \"silu\", got \"", c.hidden_act, "\"");
  }
  c.rms_norm_eps = text.positive_number("rms_norm_eps");
  c.attn_res_block_size = text.integer_or("attn_res_block_size", 0, 0, kMaxSize);
  const Fields& position_fields = text.has("max_position_embeddings") ? text : top;
  c.max_position_embeddings =
      position_fields.integer_or("max_position_embeddings", 0, 0, int64_t{1} << 40);

  const Fields& tie_fields = text.has("tie_word_embeddings") ? text : top;
  c.tie_word_embeddings = tie_fields.boolean_or("tie_word_embeddings", false);
  c.bos_token_id = token_id(text, top, "bos_token_id");
  c.eos_token_id = token_id(text, top, "eos_token_id");
  c.pad_token_id = token_id(text, top, "pad_token_id");

  // The quantization_config sits in text_config in the K3 release, at the top level in others.
  const Fields& quant_owner = text.has("quantization_config") ? text : top;
  c.experts_mxfp4 = quant_owner.has("quantization_config");
  if (c.experts_mxfp4) {
    check_quantization(quant_owner.object("quantization_config"));
    if (c.expert_in_size() % 32 != 0) {
      text.fail_field(c.routed_expert_hidden_size > 0 ? "routed_expert_hidden_size" : "hidden_size",
                      c.expert_in_size(), " is not a multiple of the MXFP4 group size 32");
    }
    if (c.moe_intermediate_size % 32 != 0) {
      text.fail_field("moe_intermediate_size", c.moe_intermediate_size,
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
