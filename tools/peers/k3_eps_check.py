#!/usr/bin/env python3
"""Float64 K3 forward (numpy port of shared/reference/k3_float64.py) with two of llama.cpp's choices made
switchable, to show what part of llama.cpp's error on k3-tiny-a they explain (issue #20):

  --l2-eps E   the KDA q/k L2 norm, x / sqrt(sum x^2 + E): the reference uses 1e-6, llama.cpp's
               build_gdn_l2_norm passes rms_norm_eps (1e-5)
  --mla-eps E  the MLA q_a/kv_a latent RMSNorms: the reference uses 1e-6, llama.cpp's build_norm uses
               rms_norm_eps (1e-5)

    k3_eps_check.py FIXTURE_DIR [--l2-eps 1e-5] [--mla-eps 1e-5] [--against LCPP_LOGITS.json]

Prints max|this - ref| / max|ref| over the prompt positions against the fixture's reference, and with
--against, against the prompt logits lcpp_run.mjs wrote (--prompt-logits): if llama.cpp's all-F32 run
sits much closer to this forward with its eps than to the reference, the eps choices are its error.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_to_gguf as conv  # noqa: E402


def load(d):
    ck = conv.Checkpoint(d)
    W = {}
    for name, (_, dt, _, _, _) in ck.tensors.items():
        k = name[len("language_model."):]
        if k.endswith("weight_scale"):
            continue
        if k.endswith("weight_packed"):
            p, _ = ck.read(name)
            s, _ = ck.read(name[: -len("packed")] + "scale")
            W[k[: -len("_packed")]] = conv.decode_mxfp4(p, s).astype(np.float64)
        else:
            a, dt = ck.read(name)
            W[k] = conv.as_f32(a, dt).astype(np.float64) if dt in ("BF16", "F32") else a
    return W


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def forward(W, cfg, ids, l2_eps, mla_eps):
    L, lac = cfg["num_hidden_layers"], cfg["linear_attn_config"]
    NH, DH, CW, LB = lac["num_heads"], lac["head_dim"], lac["short_conv_kernel_size"], lac["gate_lower_bound"]
    nh, nope, rd, vd = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kvl, BS, eps, K = cfg["kv_lora_rank"], cfg["attn_res_block_size"], cfg["rms_norm_eps"], cfg["num_experts_per_token"]

    def rms(x, w, e=eps):
        return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + e))

    def attnres(prefix, B, nw, pw):
        V = np.stack(B + [prefix], 1)
        kk = V / np.sqrt((V * V).mean(-1, keepdims=True) + 1e-5)
        return (softmax((kk * (nw * pw[0])).sum(-1))[..., None] * V).sum(1)

    def situ(g, u):
        return (4 * np.tanh(g / 4) * sigmoid(g)) * (25 * np.tanh(u / 25))

    def kda(h, a):
        T = h.shape[0]

        def conv1(x, w):
            xin = np.concatenate([np.zeros((CW - 1, x.shape[1])), x], 0)
            return silu(np.stack([(xin[t:t + CW].T * w[:, 0, :]).sum(-1) for t in range(T)]))

        q = conv1(h @ W[a + "q_proj.weight"].T, W[a + "q_conv1d.weight"]).reshape(T, NH, DH)
        k = conv1(h @ W[a + "k_proj.weight"].T, W[a + "k_conv1d.weight"]).reshape(T, NH, DH)
        v = conv1(h @ W[a + "v_proj.weight"].T, W[a + "v_conv1d.weight"]).reshape(T, NH, DH)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + l2_eps) * DH ** -0.5
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + l2_eps)
        g = ((h @ W[a + "f_a_proj.weight"].T) @ W[a + "f_b_proj.weight"].T).reshape(T, NH, DH) + W[a + "dt_bias"].reshape(NH, DH)
        g = LB * sigmoid(np.exp(W[a + "A_log"][:NH]).reshape(NH, 1) * g)
        beta = sigmoid(h @ W[a + "b_proj.weight"].T)
        S = np.zeros((NH, DH, DH))
        o = np.zeros((T, NH, DH))
        for t in range(T):
            S = np.exp(g[t])[:, :, None] * S
            u = np.einsum("hkv,hk->hv", S, k[t])
            S = S + beta[t][:, None, None] * k[t][:, :, None] * (v[t] - u)[:, None, :]
            o[t] = np.einsum("hkv,hk->hv", S, q[t])
        gg = (h @ W[a + "g_proj.weight"].T).reshape(T, NH, DH)
        o = rms(o, W[a + "o_norm.weight"]) * sigmoid(gg)
        return o.reshape(T, -1) @ W[a + "o_proj.weight"].T

    def mla(h, a):
        T = h.shape[0]
        q = (rms(h @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], mla_eps) @ W[a + "q_b_proj.weight"].T)
        q = q.reshape(T, nh, nope + rd).transpose(1, 0, 2)
        c = h @ W[a + "kv_a_proj_with_mqa.weight"].T
        kv = (rms(c[:, :kvl], W[a + "kv_a_layernorm.weight"], mla_eps) @ W[a + "kv_b_proj.weight"].T)
        kv = kv.reshape(T, nh, nope + vd).transpose(1, 0, 2)
        kk = np.concatenate([kv[..., :nope], np.broadcast_to(c[:, kvl:][None], (nh, T, rd))], -1)
        s = q @ kk.transpose(0, 2, 1) * (nope + rd) ** -0.5
        s = np.where(np.triu(np.ones((T, T), dtype=bool), 1), -np.inf, s)
        o = (softmax(s) @ kv[..., nope:]).transpose(1, 0, 2).reshape(T, -1)
        return (o * sigmoid(h @ W[a + "g_proj.weight"].T)) @ W[a + "o_proj.weight"].T

    def moe(h, m):
        sc = sigmoid(h @ W[m + "gate.weight"].T)
        ti = np.argsort(-(sc + W[m + "gate.e_score_correction_bias"][None]), axis=-1, kind="stable")[:, :K]
        tw = np.take_along_axis(sc, ti, 1)
        tw = tw / (tw.sum(-1, keepdims=True) + 1e-20) * cfg["routed_scaling_factor"]
        z = h @ W[m + "routed_expert_down_proj.weight"].T
        y = np.zeros_like(z)
        for t in range(h.shape[0]):
            for j in range(K):
                e = m + f"experts.{int(ti[t, j])}."
                y[t] += tw[t, j] * (W[e + "w2.weight"] @ situ(W[e + "w1.weight"] @ z[t], W[e + "w3.weight"] @ z[t]))
        out = rms(y, W[m + "routed_expert_norm.weight"]) @ W[m + "routed_expert_up_proj.weight"].T
        s = m + "shared_experts."
        return out + situ(h @ W[s + "gate_proj.weight"].T, h @ W[s + "up_proj.weight"].T) @ W[s + "down_proj.weight"].T

    h = W["model.embed_tokens.weight"][ids]
    B = []
    for li in range(L):
        p = f"model.layers.{li}."
        x = attnres(h, B, W[p + "self_attention_res_norm.weight"], W[p + "self_attention_res_proj.weight"]) if B else h
        if li % BS == 0:
            B.append(h)
            prefix = None
        else:
            prefix = h
        xn = rms(x, W[p + "input_layernorm.weight"])
        att = kda(xn, p + "self_attn.") if (li + 1) in lac["kda_layers"] else mla(xn, p + "self_attn.")
        prefix = att if prefix is None else prefix + att
        m_in = rms(attnres(prefix, B, W[p + "mlp_res_norm.weight"], W[p + "mlp_res_proj.weight"]),
                   W[p + "post_attention_layernorm.weight"])
        if li < cfg["first_k_dense_replace"]:
            mo = situ(m_in @ W[p + "mlp.gate_proj.weight"].T, m_in @ W[p + "mlp.up_proj.weight"].T) @ W[p + "mlp.down_proj.weight"].T
        else:
            mo = moe(m_in, p + "block_sparse_moe.")
        h = prefix + mo
    out = attnres(h, B, W["model.output_attn_res_norm.weight"], W["model.output_attn_res_proj.weight"])
    return rms(out, W["model.norm.weight"]) @ W["lm_head.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fixture")
    ap.add_argument("--l2-eps", type=float, default=1e-6)
    ap.add_argument("--mla-eps", type=float, default=1e-6)
    ap.add_argument("--against")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from compare_logits import read_safetensors
    ref = read_safetensors(os.path.join(a.fixture, "reference.safetensors"))
    cfg = json.load(open(os.path.join(a.fixture, "config.json")))["text_config"]
    mine = forward(load(a.fixture), cfg, ref["prompt_ids"].reshape(-1), a.l2_eps, a.mla_eps)
    R = ref["logits"].astype(np.float64)
    rel = lambda x, y: float(np.abs(x - y).max() / np.abs(y).max())  # noqa: E731
    line = f"l2 eps {a.l2_eps:g}, mla eps {a.mla_eps:g}: vs reference {rel(mine, R):.2e}"
    if a.against:
        lc = np.array(json.load(open(a.against))["prompt_logits"], dtype=np.float64)
        line += f"; llama.cpp vs this forward {rel(lc, mine):.2e} (llama.cpp vs reference {rel(lc, R):.2e})"
    print(line)


if __name__ == "__main__":
    main()
