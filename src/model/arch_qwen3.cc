// Qwen3 dense: GQA with per-head q/k norms and NeoX RoPE on every layer, a SiLU-gated dense MLP on
// every layer, plain pre-norm residuals, no experts.
#include "base/error.h"
#include "model/arch.h"

namespace deltafin::model {
namespace {

void require(bool ok, const char* field, const char* what) {
  if (!ok) base::fail("config.json: ", field, ": ", what, " (required for qwen3)");
}

}  // namespace

ArchTraits qwen3_traits(const format::ModelConfig& c) {
  require(c.hidden_act == "silu", "hidden_act", "must be \"silu\"");
  require(c.num_experts == 0, "num_experts", "must be absent: Qwen3 dense has no experts");
  require(c.count_layers(format::AttentionKind::kGqa) == c.num_hidden_layers, "num_hidden_layers",
          "every layer must be GQA");
  require(c.count_layers(format::MlpKind::kDense) == c.num_hidden_layers, "intermediate_size",
          "every layer must have the dense MLP");
  ArchTraits t;
  t.name = "qwen3";
  t.activation = {Activation::Kind::kSiLU, 0.0f, 0.0f};
  t.routed_scaling = 1.0f;
  t.attn_res_block_size = 0;
  return t;
}

}  // namespace deltafin::model
