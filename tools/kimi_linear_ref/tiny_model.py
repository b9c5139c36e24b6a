# The tiny random Kimi-Linear model: its config.json (the field set of the released
# moonshotai/Kimi-Linear-48B-A3B-Instruct config) and seeded weights under the released tensor names.
import math

import numpy as np

from st_io import bf16_bits

HIDDEN = 64
VOCAB = 512
N_LAYERS = 6
FULL_ATTN_LAYERS = [3, 5]  # 1-based, as in the release: 0-based MLA layers {2, 4}, both followed by KDA layers
KDA_LAYERS = [1, 2, 4, 6]
KDA_HEADS, KDA_HEAD_DIM, CONV_KERNEL = 4, 16, 4
MLA_HEADS, KV_LORA, QK_NOPE, QK_ROPE, V_HEAD = 4, 32, 16, 8, 16
DENSE_INTER, MOE_INTER = 128, 32
N_EXPERTS, TOP_K, N_SHARED = 16, 4, 1
ROUTED_SCALING = 2.446
RMS_EPS = 1e-5
BOS, EOS, PAD = 500, 501, 511


def config_json():
    """Same keys as the released Kimi-Linear config.json (HF remote code), tiny values."""
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_kimi.KimiLinearConfig",
            "AutoModel": "modeling_kimi.KimiLinearModel",
            "AutoModelForCausalLM": "modeling_kimi.KimiLinearForCausalLM",
        },
        "bos_token_id": BOS,
        "dtype": "bfloat16",
        "eos_token_id": EOS,
        "first_k_dense_replace": 1,
        "head_dim": 72,  # present (and unused) in the release; kept to mirror its field set
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": DENSE_INTER,
        "kv_lora_rank": KV_LORA,
        "linear_attn_config": {
            "full_attn_layers": FULL_ATTN_LAYERS,
            "head_dim": KDA_HEAD_DIM,
            "kda_layers": KDA_LAYERS,
            "num_heads": KDA_HEADS,
            "short_conv_kernel_size": CONV_KERNEL,
        },
        "mla_use_nope": True,
        "model_max_length": 1048576,
        "model_type": "kimi_linear",
        "moe_intermediate_size": MOE_INTER,
        "moe_layer_freq": 1,
        "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid",
        "num_attention_heads": MLA_HEADS,
        "num_expert_group": 1,
        "num_experts": N_EXPERTS,
        "num_experts_per_token": TOP_K,
        "num_hidden_layers": N_LAYERS,
        "num_key_value_heads": MLA_HEADS,
        "num_nextn_predict_layers": 0,
        "num_shared_experts": N_SHARED,
        "pad_token_id": PAD,
        "q_lora_rank": None,
        "qk_nope_head_dim": QK_NOPE,
        "qk_rope_head_dim": QK_ROPE,
        "rms_norm_eps": RMS_EPS,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "routed_scaling_factor": ROUTED_SCALING,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "transformers_version": "4.57.0",  # the release's value, kept to mirror its field set
        "use_cache": True,
        "use_grouped_topk": True,
        "v_head_dim": V_HEAD,
        "vocab_size": VOCAB,
    }


def is_kda(layer):
    return (layer + 1) in KDA_LAYERS


class _Gen:
    """Collects (name, dtype, array) with arrays already in storage dtype."""

    def __init__(self, rng):
        self.rng, self.tensors = rng, []

    def add(self, name, dtype, values):
        values = np.asarray(values, dtype=np.float32)
        self.tensors.append((name, dtype, bf16_bits(values) if dtype == "BF16" else values))

    def linear(self, name, n_out, n_in, gain=1.0):  # [out, in], row-major
        self.add(name, "BF16", self.rng.standard_normal((n_out, n_in)) * (gain / math.sqrt(n_in)))

    def norm(self, name, n):
        self.add(name, "BF16", 1.0 + 0.1 * self.rng.standard_normal(n))


def make_weights(seed):
    """Seeded random weights named and shaped like the released checkpoint. Returns [(name, dtype, array)].
    Magnitudes keep activations O(1): projections ~ 1/sqrt(fan_in), norms ~ 1, router logits ~ N(0, 1.5^2)."""
    g = _Gen(np.random.default_rng(seed))
    rng = g.rng
    P = KDA_HEADS * KDA_HEAD_DIM
    g.add("model.embed_tokens.weight", "BF16", rng.standard_normal((VOCAB, HIDDEN)))  # [vocab, hidden]
    for layer in range(N_LAYERS):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        g.norm(p + "input_layernorm.weight", HIDDEN)
        if is_kda(layer):
            g.linear(a + "q_proj.weight", P, HIDDEN)
            g.linear(a + "k_proj.weight", P, HIDDEN)
            g.linear(a + "v_proj.weight", P, HIDDEN)
            for c in "qkv":  # depthwise causal conv, [P, 1, W]; w[:, 0, W-1] multiplies the current token
                g.add(a + f"{c}_conv1d.weight", "F32", rng.uniform(-0.5, 0.5, (P, 1, CONV_KERNEL)) + [0, 0, 0, 0.5])
            # per-head log decay rate, [1, 1, H, 1] like the HF remote code's parameter: A = exp(A_log) in [1, 16]
            g.add(a + "A_log", "F32", np.log(rng.uniform(1, 16, KDA_HEADS)).reshape(1, 1, KDA_HEADS, 1))
            g.linear(a + "f_a_proj.weight", KDA_HEAD_DIM, HIDDEN)
            g.linear(a + "f_b_proj.weight", P, KDA_HEAD_DIM)
            dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), P))  # mamba-style dt init
            g.add(a + "dt_bias", "F32", dt + np.log(-np.expm1(-dt)))  # inverse softplus
            g.linear(a + "b_proj.weight", KDA_HEADS, HIDDEN)
            g.linear(a + "g_a_proj.weight", KDA_HEAD_DIM, HIDDEN)
            g.linear(a + "g_b_proj.weight", P, KDA_HEAD_DIM)
            g.norm(a + "o_norm.weight", KDA_HEAD_DIM)
            g.linear(a + "o_proj.weight", HIDDEN, P, gain=0.5)
        else:
            g.linear(a + "q_proj.weight", MLA_HEADS * (QK_NOPE + QK_ROPE), HIDDEN)
            g.linear(a + "kv_a_proj_with_mqa.weight", KV_LORA + QK_ROPE, HIDDEN)
            g.norm(a + "kv_a_layernorm.weight", KV_LORA)
            g.linear(a + "kv_b_proj.weight", MLA_HEADS * (QK_NOPE + V_HEAD), KV_LORA)
            g.linear(a + "o_proj.weight", HIDDEN, MLA_HEADS * V_HEAD, gain=0.5)
        g.norm(p + "post_attention_layernorm.weight", HIDDEN)
        if layer == 0:  # first_k_dense_replace = 1
            g.linear(p + "mlp.gate_proj.weight", DENSE_INTER, HIDDEN)
            g.linear(p + "mlp.up_proj.weight", DENSE_INTER, HIDDEN)
            g.linear(p + "mlp.down_proj.weight", HIDDEN, DENSE_INTER, gain=0.5)
        else:
            m = p + "block_sparse_moe."
            g.linear(m + "gate.weight", N_EXPERTS, HIDDEN, gain=1.5)  # [E, hidden]
            g.add(m + "gate.e_score_correction_bias", "F32", 0.1 * rng.standard_normal(N_EXPERTS))
            for j in range(N_EXPERTS):
                g.linear(m + f"experts.{j}.w1.weight", MOE_INTER, HIDDEN)  # gate
                g.linear(m + f"experts.{j}.w2.weight", HIDDEN, MOE_INTER, gain=0.5)  # down
                g.linear(m + f"experts.{j}.w3.weight", MOE_INTER, HIDDEN)  # up
            s = m + "shared_experts."
            g.linear(s + "gate_proj.weight", MOE_INTER * N_SHARED, HIDDEN)
            g.linear(s + "up_proj.weight", MOE_INTER * N_SHARED, HIDDEN)
            g.linear(s + "down_proj.weight", HIDDEN, MOE_INTER * N_SHARED, gain=0.5)
    g.norm("model.norm.weight", HIDDEN)
    g.linear("lm_head.weight", VOCAB, HIDDEN, gain=2.0)  # [vocab, hidden]
    return g.tensors


def make_prompt(seed, length=24):
    """Prompt ids below the special-id range (500..511), no BOS."""
    return [int(t) for t in np.random.default_rng(seed).integers(0, BOS, length)]
