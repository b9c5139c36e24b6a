// config.json into a typed, validated model configuration: Kimi K3 (kimi_k3 with a kimi_linear
// text_config, MXFP4 experts), plain Kimi-Linear (kimi_linear at the top level, BF16 experts) and
// Qwen3 dense (qwen3: GQA with RoPE, dense MLP on every layer; format/family_qwen3.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deltafin::format {

enum class Arch { kKimiK3, kKimiLinear, kQwen3 };

// What a layer's two blocks are; the family's schema (format/schema.h) lists each kind's tensors.
enum class AttentionKind {
  kKda,  // Kimi Delta Attention: linear attention with a recurrent state
  kMla,  // gated multi-head latent attention: a latent cache per position
  kGqa,  // grouped-query attention with RoPE (Qwen3): keys and values cached per position
};
enum class MlpKind {
  kDense,  // a gated MLP of intermediate_size
  kMoe,    // routed experts (plus shared experts and the latent projections where configured)
};
struct LayerKind {
  AttentionKind attention;
  MlpKind mlp;
  bool operator==(const LayerKind&) const = default;
};

const char* arch_name(Arch arch);  // "kimi_k3", "kimi_linear", "qwen3"

struct ModelConfig {
  Arch arch;
  std::string model_type;  // the top-level model_type
  int64_t hidden_size, vocab_size, num_hidden_layers, intermediate_size;
  // Attention (MLA)
  int64_t num_attention_heads, num_key_value_heads;
  int64_t q_lora_rank;  // 0 = no q low-rank (Kimi-Linear: q_proj)
  int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  bool mla_use_nope, mla_use_output_gate;
  // GQA (Qwen3; 0 otherwise): head_dim may differ from hidden_size / num_attention_heads.
  int64_t head_dim;
  double rope_theta;
  // KDA (linear_attn_config)
  int64_t kda_num_heads, kda_head_dim, short_conv_kernel_size;
  bool use_full_rank_gate;                 // K3: g_proj [H*D, d]; else g_a_proj/g_b_proj
  std::optional<double> gate_lower_bound;  // K3: -5 lower-bound gate; absent: softplus gate
  // MoE
  int64_t num_experts, num_experts_per_token, num_shared_experts, moe_intermediate_size;
  int64_t routed_expert_hidden_size;  // 0 = no latent MoE
  int64_t first_k_dense_replace, moe_layer_freq, num_expert_group, topk_group;
  bool latent_moe_use_norm, moe_renormalize, use_grouped_topk;
  double routed_scaling_factor;
  std::string moe_router_activation_func, topk_method;
  std::string hidden_act;              // "situ" (K3) or "silu" (Kimi-Linear)
  double situ_beta, situ_linear_beta;  // 0 unless hidden_act is "situ"
  double rms_norm_eps;
  int64_t attn_res_block_size;      // 0 = no attention residuals (Kimi-Linear)
  int64_t max_position_embeddings;  // the longest context the model was built for; 0 = not stated
  bool tie_word_embeddings;
  int64_t bos_token_id, eos_token_id, pad_token_id;  // -1 when the config has none
  bool experts_mxfp4;  // compressed-tensors mxfp4-pack-quantized (K3); false = BF16 experts
  // 0-based, size num_hidden_layers. Attention from linear_attn_config's kda_layers /
  // full_attn_layers; the MLP by the HF rule (Kimi-Linear / DeepSeek remote code): MoE iff there
  // are experts, the layer is past the dense prefix and layer % moe_layer_freq == 0.
  std::vector<LayerKind> layer_kinds;

  // Input width of the routed experts: the latent width if there is one, else hidden_size.
  int64_t expert_in_size() const;
  int64_t count_layers(AttentionKind kind) const;
  int64_t count_layers(MlpKind kind) const;
};

// Throws base::Error naming the file and the field (e.g.
// "text_config.linear_attn_config.kda_layers") for invalid JSON, a missing or mistyped field,
// inconsistent values, or an unsupported model type, activation, router or quantization. Fields
// deltafin does not use are ignored.
ModelConfig parse_config_json(const std::string& json_text, const std::string& path_for_errors);
ModelConfig load_config(const std::string& model_dir);  // reads DIR/config.json

}  // namespace deltafin::format
