// k3_dspark config.json: every key of the published document read and checked against what the
// drafter implements, so an unsupported variant fails at load naming its field.
#include "drafters/dspark_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>

#include "base/error.h"
#include "base/json_fields.h"

namespace deltafin::drafters {
namespace {

using base::FieldProblem;
using base::Json;
using base::JsonObject;

constexpr int64_t kMaxSize = int64_t{1} << 20;

int64_t size(const JsonObject& f, const std::string& key) { return f.integer(key, 1, kMaxSize); }

double positive(const JsonObject& f, const std::string& key) {
  const base::JsonField v = f.at(key);
  const double d = v.number();
  if (!(d > 0)) v.fail(FieldProblem::kOutOfRange, "expected a positive number, got ", d);
  return d;
}

void expect_string(const JsonObject& f, const std::string& key, const std::string& want) {
  const std::string got = f.string(key);
  if (got != want)
    f.fail(key, FieldProblem::kUnsupported, "expected \"", want, "\", got \"", got, "\"");
}

void expect_bool(const JsonObject& f, const std::string& key, bool want) {
  if (f.boolean(key) != want)
    f.fail(key, FieldProblem::kUnsupported, "expected ", want ? "true" : "false",
           " (the only variant deltafin implements)");
}

void expect_equal(const JsonObject& f, const std::string& key, int64_t got, int64_t want,
                  const std::string& other) {
  if (got != want) f.fail(key, FieldProblem::kInvalid, got, " must equal ", other, " (", want, ")");
}

// The yarn rope_parameters block; its rope_theta must repeat the top-level one.
void read_rope(const JsonObject& rp, DSparkConfig& c) {
  expect_string(rp, "rope_type", "yarn");
  c.yarn_factor = positive(rp, "factor");
  c.yarn_original_max_positions = rp.integer("original_max_position_embeddings", 1, 1 << 30);
  c.yarn_beta_fast = positive(rp, "beta_fast");
  c.yarn_beta_slow = positive(rp, "beta_slow");
  c.yarn_mscale = positive(rp, "mscale");
  c.yarn_mscale_all_dim = positive(rp, "mscale_all_dim");
  if (positive(rp, "rope_theta") != c.rope_theta)
    rp.fail("rope_theta", FieldProblem::kInvalid, "differs from the top-level rope_theta ",
            c.rope_theta);
  if (!(c.yarn_beta_fast > c.yarn_beta_slow))
    rp.fail("beta_fast", FieldProblem::kInvalid, "must exceed beta_slow");
  rp.finish();
}

}  // namespace

DSparkConfig parse_dspark_config(const std::string& json_text, const std::string& path) {
  const base::JsonReadOptions options{path};
  const Json root = base::parse_json(json_text, options);
  const JsonObject top(base::JsonField(root, "", options));
  DSparkConfig c;
  const base::JsonField arch = top.at("architectures");
  if (arch.array_size() != 1 || arch.element(0).string() != "K3DSparkModel")
    arch.fail(FieldProblem::kUnsupported, "expected [\"K3DSparkModel\"]");
  expect_string(top, "model_type", "k3_dspark");
  expect_string(top, "torch_dtype", "bfloat16");
  expect_string(top, "markov_head_type", "vanilla");
  expect_bool(top, "mla_use_nope", false);
  expect_bool(top, "mla_use_output_gate", false);
  expect_bool(top, "enable_confidence_head", true);
  expect_bool(top, "confidence_head_with_markov", true);
  expect_bool(top, "tie_word_embeddings", false);
  // No hidden_act in the published config: TorchSpec's DSpark MLP is SiLU (spec §1.2).
  if (const auto act = top.get("hidden_act"); act && act->string() != "silu")
    act->fail(FieldProblem::kUnsupported, "expected \"silu\"");
  c.hidden_size = size(top, "hidden_size");
  c.intermediate_size = size(top, "intermediate_size");
  c.num_layers = top.integer("num_hidden_layers", 1, 1024);
  c.num_heads = top.integer("num_attention_heads", 1, 4096);
  expect_equal(top, "num_key_value_heads", top.integer("num_key_value_heads", 1, 4096), c.num_heads,
               "num_attention_heads");
  c.q_lora_rank = size(top, "q_lora_rank");
  c.kv_lora_rank = size(top, "kv_lora_rank");
  c.nope_dim = size(top, "qk_nope_head_dim");
  c.rope_dim = size(top, "qk_rope_head_dim");
  if (c.rope_dim % 2 != 0)
    top.fail("qk_rope_head_dim", FieldProblem::kInvalid, "must be even (interleaved pairs)");
  c.v_dim = size(top, "v_head_dim");
  c.vocab_size = top.integer("vocab_size", 1, int64_t{1} << 31);
  expect_equal(top, "draft_vocab_size", top.integer("draft_vocab_size", 1, int64_t{1} << 31),
               c.vocab_size, "vocab_size");
  c.rms_norm_eps = positive(top, "rms_norm_eps");
  c.max_position_embeddings = top.integer("max_position_embeddings", 1, int64_t{1} << 40);
  c.rope_theta = positive(top, "rope_theta");
  read_rope(top.object("rope_parameters"), c);
  c.target_hidden_size = size(top, "target_hidden_size");
  c.target_num_hidden_layers = top.integer("target_num_hidden_layers", 1, 4096);
  const base::JsonField ids = top.at("target_layer_ids");
  for (size_t i = 0; i < ids.array_size(); ++i) {
    const int64_t id = ids.element(i).integer(0, c.target_num_hidden_layers - 1);
    if (!c.target_layer_ids.empty() && id <= c.target_layer_ids.back())
      ids.element(i).fail(FieldProblem::kInvalid, "target layer ids must be ascending");
    c.target_layer_ids.push_back(id);
  }
  if (c.target_layer_ids.empty())
    ids.fail(FieldProblem::kInvalid, "expected at least one target layer");
  expect_equal(top, "num_target_layers", top.integer("num_target_layers", 1, 4096), c.n_taps(),
               "the length of target_layer_ids");
  c.mask_token_id = static_cast<int32_t>(top.integer("mask_token_id", 0, c.vocab_size - 1));
  c.markov_rank = size(top, "markov_rank");
  c.bos_token_id = static_cast<int32_t>(top.integer("bos_token_id", 0, c.vocab_size - 1));
  c.eos_token_id = static_cast<int32_t>(top.integer("eos_token_id", 0, c.vocab_size - 1));
  c.pad_token_id = static_cast<int32_t>(top.integer("pad_token_id", 0, c.vocab_size - 1));
  // Provenance keys only: they change nothing the drafter computes.
  for (const char* key : {"_torchspec_version", "transformers_version", "_name_or_path"})
    (void)top.get(key);
  top.finish();
  return c;
}

DSparkConfig load_dspark_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) base::fail("file ", path, ": cannot open (a DSpark drafter folder needs config.json)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_dspark_config(text.str(), path);
}

namespace {
double yarn_mscale(double factor, double m) {
  return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}
// The pair index whose wavelength makes `rotations` turns over the original context.
double correction_dim(double rotations, int64_t dim, double base, int64_t original) {
  return dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}
}  // namespace

YarnTable yarn_table(const DSparkConfig& c) {
  YarnTable t;
  const int64_t d = c.rope_dim, pairs = d / 2;
  const double low =
      std::floor(correction_dim(c.yarn_beta_fast, d, c.rope_theta, c.yarn_original_max_positions));
  const double high =
      std::ceil(correction_dim(c.yarn_beta_slow, d, c.rope_theta, c.yarn_original_max_positions));
  t.low = static_cast<int64_t>(std::max(low, 0.0));
  t.high = static_cast<int64_t>(std::min(high, static_cast<double>(d - 1)));
  // DeepSeek's linear ramp nudges an empty range so that it never divides by zero.
  const double span = t.high == t.low ? 0.001 : static_cast<double>(t.high - t.low);
  t.inv_freq.resize(pairs);
  for (int64_t i = 0; i < pairs; ++i) {
    const double extra = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / d);
    const double inter = extra / c.yarn_factor;
    const double ramp = std::clamp((i - t.low) / span, 0.0, 1.0);
    t.inv_freq[i] = inter * ramp + extra * (1.0 - ramp);
  }
  t.cos_sin_scale =
      yarn_mscale(c.yarn_factor, c.yarn_mscale) / yarn_mscale(c.yarn_factor, c.yarn_mscale_all_dim);
  return t;
}

double softmax_scale(const DSparkConfig& c) {
  const double m = yarn_mscale(c.yarn_factor, c.yarn_mscale_all_dim);
  return m * m / std::sqrt(static_cast<double>(c.qk_dim()));
}

}  // namespace deltafin::drafters
