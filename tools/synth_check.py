#!/usr/bin/python3
"""Checks a `deltafin synth` model folder against the K3 release layout, independently of the C++ code.

numpy only. Reads config.json, the index and every shard header; checks names, shapes and dtypes
against a roster derived here from config.json, the index against the shards, each shard's header
form (metadata first, lexicographic order, 8-byte padding, data tiled exactly), the expert layout
(six tensors back to back, one contiguous run per layer in one shard, 17,547,264 bytes at K3 size),
A_log padding, MXFP4 scale statistics, and the tokenizer files. With --forward (small models) it
runs a float64 forward pass (spec/kimi-k3.md §3, after shared/reference/k3_float64.py) on a few
prompts and checks that activations stay sane and greedy output varies.

    /usr/bin/python3 tools/synth_check.py DIR [--forward] [--quiet]

Exit status 0 when every check passes; prints one JSON summary line.
"""
import base64
import json
import os
import re
import struct
import sys

import numpy as np

DTYPE_SIZE = {"BF16": 2, "F32": 4, "U8": 1}
NP_DTYPE = {"BF16": np.uint16, "F32": np.float32, "U8": np.uint8}
F32_SUFFIXES = ("self_attn.A_log", "self_attn.dt_bias", "_conv1d.weight", "self_attn.o_norm.weight",
                "gate.e_score_correction_bias")
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)
NAMED = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
         6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]", 18: "<|media_begin|>",
         19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>", 65: "<osagent_mode>",
         254: "[UNK]", 255: "[PAD]"}
TEXT_FIELDS = ["hidden_act", "linear_attn_config", "mla_use_nope", "mla_use_output_gate", "moe_renormalize",
               "latent_moe_use_norm", "moe_router_activation_func", "quantization_config",
               "attn_res_block_size", "routed_expert_hidden_size", "num_shared_experts",
               "first_k_dense_replace", "topk_method", "routed_scaling_factor", "rms_norm_eps"]


class CheckError(Exception):
    pass


def need(cond, *msg):
    if not cond:
        raise CheckError(" ".join(str(m) for m in msg))


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        raw = f.read(n)
    return n, raw, json.loads(raw.decode("utf-8"))


def expected_roster(cfg):
    """name -> (dtype, shape) from config.json alone (spec/kimi-k3.md §2)."""
    t = cfg["text_config"]
    H, V, L = t["hidden_size"], t["vocab_size"], t["num_hidden_layers"]
    la = t["linear_attn_config"]
    NH, D, K = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
    P = NH * D
    mh, ql, kvl = t["num_attention_heads"], t["q_lora_rank"], t["kv_lora_rank"]
    nope, rope, vd = t["qk_nope_head_dim"], t["qk_rope_head_dim"], t["v_head_dim"]
    E, I, LAT = t["num_experts"], t["moe_intermediate_size"], t["routed_expert_hidden_size"]
    S = t["num_shared_experts"] * I
    full = set(la["full_attn_layers"])
    need(sorted(full | set(la["kda_layers"])) == list(range(1, L + 1)) and not (full & set(la["kda_layers"])),
         "kda_layers and full_attn_layers must partition 1..num_hidden_layers")
    r = {}

    def add(name, dtype, *shape):
        r["language_model." + name] = (dtype, list(shape))

    add("model.embed_tokens.weight", "BF16", V, H)
    add("model.norm.weight", "BF16", H)
    add("model.output_attn_res_norm.weight", "BF16", H)
    add("model.output_attn_res_proj.weight", "BF16", 1, H)
    add("lm_head.weight", "BF16", V, H)
    for l in range(L):
        p = f"model.layers.{l}."
        for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            add(p + n + ".weight", "BF16", H)
        add(p + "self_attention_res_proj.weight", "BF16", 1, H)
        add(p + "mlp_res_proj.weight", "BF16", 1, H)
        a = p + "self_attn."
        if (l + 1) in full:
            add(a + "q_a_proj.weight", "BF16", ql, H)
            add(a + "q_a_layernorm.weight", "BF16", ql)
            add(a + "q_b_proj.weight", "BF16", mh * (nope + rope), ql)
            add(a + "kv_a_proj_with_mqa.weight", "BF16", kvl + rope, H)
            add(a + "kv_a_layernorm.weight", "BF16", kvl)
            add(a + "kv_b_proj.weight", "BF16", mh * (nope + vd), kvl)
            add(a + "g_proj.weight", "BF16", mh * vd, H)
            add(a + "o_proj.weight", "BF16", H, mh * vd)
        else:
            for n in ("q_proj", "k_proj", "v_proj", "g_proj"):
                add(a + n + ".weight", "BF16", P, H)
            add(a + "f_a_proj.weight", "BF16", D, H)
            add(a + "f_b_proj.weight", "BF16", P, D)
            add(a + "b_proj.weight", "BF16", NH, H)
            add(a + "o_proj.weight", "BF16", H, P)
            for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
                add(a + n + ".weight", "F32", P, 1, K)
            add(a + "A_log", "F32", D)
            add(a + "dt_bias", "F32", P)
            add(a + "o_norm.weight", "F32", D)
        if l < t["first_k_dense_replace"]:
            add(p + "mlp.gate_proj.weight", "BF16", t["intermediate_size"], H)
            add(p + "mlp.up_proj.weight", "BF16", t["intermediate_size"], H)
            add(p + "mlp.down_proj.weight", "BF16", H, t["intermediate_size"])
        else:
            m = p + "block_sparse_moe."
            add(m + "gate.weight", "BF16", E, H)
            add(m + "gate.e_score_correction_bias", "F32", E)
            add(m + "routed_expert_down_proj.weight", "BF16", LAT, H)
            add(m + "routed_expert_up_proj.weight", "BF16", H, LAT)
            add(m + "routed_expert_norm.weight", "BF16", LAT)
            add(m + "shared_experts.gate_proj.weight", "BF16", S, H)
            add(m + "shared_experts.up_proj.weight", "BF16", S, H)
            add(m + "shared_experts.down_proj.weight", "BF16", H, S)
            for e in range(E):
                x = m + f"experts.{e}."
                for w, (rows, cols) in (("w1", (I, LAT)), ("w2", (LAT, I)), ("w3", (I, LAT))):
                    add(x + w + ".weight_packed", "U8", rows, cols // 2)
                    add(x + w + ".weight_scale", "U8", rows, cols // 32)
    return r


def check_layout(folder):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    t = cfg["text_config"]
    for f in TEXT_FIELDS:
        need(f in t, "text_config lacks", f)
    need(t["hidden_act"] == "situ" and t["mla_use_nope"] and t["mla_use_output_gate"], "K3 flags")
    la = t["linear_attn_config"]
    need(la.get("use_full_rank_gate") is True and la.get("gate_lower_bound") == -5.0, "KDA gate flags")
    q = t["quantization_config"]
    need(q["quant_method"] == "compressed-tensors" and q["format"] == "mxfp4-pack-quantized", "quant config")
    need(q["config_groups"]["group_0"]["weights"]["group_size"] == 32, "MXFP4 group size")
    need(t["moe_intermediate_size"] % 32 == 0 and t["routed_expert_hidden_size"] % 32 == 0,
         "expert widths are multiples of 32")
    need(t["num_experts_per_token"] <= t["num_experts"], "top-k above the expert count")

    roster = expected_roster(cfg)
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    wm = index["weight_map"]
    need(set(wm) == set(roster), "index names differ from the roster:",
         sorted(set(wm) ^ set(roster))[:5])
    need(list(wm) == sorted(wm), "index weight_map is not sorted")
    shards = sorted(set(wm.values()))
    m = re.fullmatch(r"model-(\d{5})-of-(\d{6})\.safetensors", shards[-1])
    need(m is not None, "shard name", shards[-1])
    n_shards = int(m.group(2))
    need(shards == [f"model-{i:05d}-of-{n_shards:06d}.safetensors" for i in range(1, n_shards + 1)],
         "shard names are not model-0000k-of-00000N")

    total = 0
    offsets = {}  # name -> (shard, absolute offset, nbytes)
    for sh in shards:
        path = os.path.join(folder, sh)
        n, raw, header = read_header(path)
        need(n % 8 == 0 and raw.rstrip(b" ").endswith(b"}"), sh, "header not space-padded to 8")
        keys = list(header)
        need(keys[0] == "__metadata__" and header["__metadata__"] == {"format": "pt"}, sh, "metadata")
        names = keys[1:]
        need(names == sorted(names), sh, "tensors are not in lexicographic order")
        pos = 0
        for name in names:
            e = header[name]
            need(wm.get(name) == sh, name, "is in", sh, "but the index says", wm.get(name))
            dt, shape = roster[name]
            need(e["dtype"] == dt and e["shape"] == shape, name, e["dtype"], e["shape"], "expected", dt, shape)
            nb = int(np.prod(shape)) * DTYPE_SIZE[dt]
            need(e["data_offsets"] == [pos, pos + nb], name, "data_offsets", e["data_offsets"])
            offsets[name] = (sh, 8 + n + pos, nb)
            pos += nb
        need(os.path.getsize(path) == 8 + n + pos, sh, "file size is not header + data")
        total += pos
    need(index["metadata"]["total_size"] == total, "total_size", index["metadata"]["total_size"], "!=", total)
    for name, (dt, _) in roster.items():
        if name.endswith(F32_SUFFIXES):
            need(dt == "F32", name)

    # Experts: six tensors back to back, each layer one run in one shard.
    E = t["num_experts"]
    order = ("w1.weight_packed", "w1.weight_scale", "w2.weight_packed", "w2.weight_scale",
             "w3.weight_packed", "w3.weight_scale")
    expert_bytes, runs = None, []
    for l in range(t["first_k_dense_replace"], t["num_hidden_layers"]):
        m = f"language_model.model.layers.{l}.block_sparse_moe.experts."
        starts = []
        for e in range(E):
            parts = [offsets[f"{m}{e}.{o}"] for o in order]
            for a, b in zip(parts, parts[1:]):
                need(a[0] == b[0] and a[1] + a[2] == b[1], f"layer {l} expert {e} is not contiguous")
            size = parts[-1][1] + parts[-1][2] - parts[0][1]
            need(expert_bytes in (None, size), "expert sizes differ")
            expert_bytes = size
            starts.append((parts[0][1], parts[0][0]))
        starts.sort()
        need(len({s for _, s in starts}) == 1, f"layer {l} experts span shards")
        for (a, _), (b, _) in zip(starts, starts[1:]):
            need(b - a == expert_bytes, f"layer {l} expert run has a gap")
        runs.append(starts[0][0])
    return cfg, offsets, {"shards": n_shards, "tensors": len(roster), "total_size": total,
                          "expert_bytes": expert_bytes,
                          "expert_runs_4096_aligned": sum(1 for r in runs if r % 4096 == 0),
                          "expert_runs": len(runs)}


class Weights:
    """Lazy float64 view of tensors (bf16/f32 decoded; MXFP4 dequantized on request)."""

    def __init__(self, folder, offsets, cfg):
        self.folder, self.offsets, self.cfg = folder, offsets, cfg
        self.roster = expected_roster(cfg)
        self.cache = {}

    def raw(self, name):
        sh, off, nb = self.offsets[name]
        dt, shape = self.roster[name]
        with open(os.path.join(self.folder, sh), "rb") as f:
            f.seek(off)
            a = np.frombuffer(f.read(nb), dtype=NP_DTYPE[dt]).reshape(shape)
        return dt, a

    def __getitem__(self, short):
        if short not in self.cache:
            name = "language_model." + short
            if name + "_packed" in self.roster:  # an expert matrix, e.g. ...experts.3.w1.weight
                _, p = self.raw(name + "_packed")
                _, s = self.raw(name + "_scale")
                self.cache[short] = mxfp4(p, s)
            else:
                dt, a = self.raw(name)
                self.cache[short] = ((a.astype(np.uint32) << 16).view(np.float32) if dt == "BF16" else a).astype(np.float64)
        return self.cache[short]


def mxfp4(packed, scale):
    rows, half = packed.shape
    codes = np.empty((rows, half * 2), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    return E2M1[codes] * np.repeat(np.ldexp(1.0, scale.astype(np.int64) - 127), 32, axis=1)


def check_values(folder, offsets, cfg):
    t = cfg["text_config"]
    W = Weights(folder, offsets, cfg)
    NH = t["linear_attn_config"]["num_heads"]
    stats = {}
    for l in range(t["num_hidden_layers"]):
        if (l + 1) in t["linear_attn_config"]["kda_layers"]:
            a = W[f"model.layers.{l}.self_attn.A_log"]
            need(np.all(a[NH:] == 0), f"layer {l} A_log is not zero past the head count")
            need(np.all((a[:NH] >= 0) & (a[:NH] < 3)), f"layer {l} A_log out of range")
    # MXFP4 decoded rms ~ 1/sqrt(fan_in) on a sample of experts.
    l, LAT, I = 1, t["routed_expert_hidden_size"], t["moe_intermediate_size"]
    if t["num_hidden_layers"] > 1:
        for e in range(min(3, t["num_experts"])):
            for w, fan_in in (("w1", LAT), ("w2", I), ("w3", LAT)):
                name = f"language_model.model.layers.{l}.block_sparse_moe.experts.{e}.{w}.weight_scale"
                _, s = W.raw(name)
                need(s.min() >= 110 and s.max() <= 127, name, "scale bytes", s.min(), s.max())
                rows = min(64, s.shape[0])
                _, p = W.raw(name.replace("_scale", "_packed"))
                r = np.sqrt((mxfp4(p[:rows], s[:rows]) ** 2).mean()) * np.sqrt(fan_in)
                need(0.3 < r < 3, name, "decoded rms x sqrt(fan_in) =", r)
                stats.setdefault("mxfp4_rms_x_sqrt_fan_in", []).append(round(float(r), 3))
    return W, stats


def check_tokenizer(folder, cfg):
    lines = open(os.path.join(folder, "tiktoken.model"), "rb").read().splitlines()
    ranks = {}
    for i, line in enumerate(lines):
        b64, r = line.split()
        need(int(r) == i, "tiktoken.model ranks are not 0..n-1")
        tok = base64.b64decode(b64)
        need(tok not in ranks, "duplicate token", tok)
        ranks[tok] = i
    base = len(lines)
    t = cfg["text_config"]
    need(t["vocab_size"] == base + 256, "vocab_size", t["vocab_size"], "!= ranks + 256 =", base + 256)
    for c in (cfg, t):
        need((c["bos_token_id"], c["eos_token_id"], c["pad_token_id"]) == (base, base + 2, base + 255),
             "bos/eos/pad ids are not base+0/+2/+255")
    need(cfg["media_placeholder_token_id"] == base + 21, "media placeholder id")
    tc = json.load(open(os.path.join(folder, "tokenizer_config.json")))
    got = {int(k) - base: v["content"] for k, v in tc["added_tokens_decoder"].items()}
    need(got == NAMED, "tokenizer_config.json names", got)
    gen = json.load(open(os.path.join(folder, "generation_config.json")))
    need(gen["eos_token_id"] == base + 2, "generation eos")
    return ranks


# K3's pre-tokenizer regex restricted to ASCII text (spec/kimi-k3.md §5).
ASCII_PAT = re.compile(r"""[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
                       r"""[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[0-9]{1,3}|"""
                       r""" ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def encode(ranks, text):
    ids = []
    for piece in ASCII_PAT.findall(text):
        parts = [bytes([b]) for b in piece.encode()]
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], 1 << 60))
            if parts[best] + parts[best + 1] not in ranks:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        ids += [ranks[p] for p in parts]
    return ids


def forward(W, cfg, ids):
    """float64 K3 forward over ids; returns logits [T, V] and the rms of h after each layer."""
    t = cfg["text_config"]
    L, eps, BS, K_TOP = t["num_hidden_layers"], t["rms_norm_eps"], t["attn_res_block_size"], t["num_experts_per_token"]
    la = t["linear_attn_config"]
    NH, DH, CW, LB = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"], la["gate_lower_bound"]
    nh, nope, rd, vd, kvl = (t["num_attention_heads"], t["qk_nope_head_dim"], t["qk_rope_head_dim"],
                             t["v_head_dim"], t["kv_lora_rank"])
    sig = lambda x: 1 / (1 + np.exp(-x))

    def rms(x, w, e=eps):
        return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + e))

    def softmax(s):
        s = s - s.max(-1, keepdims=True)
        p = np.exp(s)
        return p / p.sum(-1, keepdims=True)

    def attnres(prefix, B, nw, pw):
        V = np.stack(B + [prefix], 1)
        kk = V / np.sqrt((V * V).mean(-1, keepdims=True) + 1e-5)
        return (softmax((kk * (nw * pw[0])).sum(-1))[..., None] * V).sum(1)

    def situ(g, u):
        return (4 * np.tanh(g / 4) * sig(g)) * (25 * np.tanh(u / 25))

    def kda(h, a):
        T = h.shape[0]

        def conv(x, w):
            xin = np.concatenate([np.zeros((CW - 1, x.shape[1])), x], 0)
            y = np.stack([(xin[i:i + CW].T * w[:, 0, :]).sum(-1) for i in range(T)])
            return y * sig(y)
        q = conv(h @ W[a + "q_proj.weight"].T, W[a + "q_conv1d.weight"]).reshape(T, NH, DH)
        k = conv(h @ W[a + "k_proj.weight"].T, W[a + "k_conv1d.weight"]).reshape(T, NH, DH)
        v = conv(h @ W[a + "v_proj.weight"].T, W[a + "v_conv1d.weight"]).reshape(T, NH, DH)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * DH ** -0.5
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        g = ((h @ W[a + "f_a_proj.weight"].T) @ W[a + "f_b_proj.weight"].T).reshape(T, NH, DH)
        g = LB * sig(np.exp(W[a + "A_log"][:NH])[:, None] * (g + W[a + "dt_bias"].reshape(NH, DH)))
        beta = sig(h @ W[a + "b_proj.weight"].T)
        S = np.zeros((NH, DH, DH))
        o = np.zeros((T, NH, DH))
        for i in range(T):
            S = np.exp(g[i])[:, :, None] * S
            u = np.einsum("hkv,hk->hv", S, k[i])
            S = S + beta[i][:, None, None] * k[i][:, :, None] * (v[i] - u)[:, None, :]
            o[i] = np.einsum("hkv,hk->hv", S, q[i])
        gg = (h @ W[a + "g_proj.weight"].T).reshape(T, NH, DH)
        o = rms(o, W[a + "o_norm.weight"]) * sig(gg)
        return o.reshape(T, -1) @ W[a + "o_proj.weight"].T

    def mla(h, a):
        T = h.shape[0]
        q = (rms(h @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], 1e-6) @ W[a + "q_b_proj.weight"].T)
        q = q.reshape(T, nh, nope + rd).transpose(1, 0, 2)
        c = h @ W[a + "kv_a_proj_with_mqa.weight"].T
        kv = (rms(c[:, :kvl], W[a + "kv_a_layernorm.weight"], 1e-6) @ W[a + "kv_b_proj.weight"].T)
        kv = kv.reshape(T, nh, nope + vd).transpose(1, 0, 2)
        kk = np.concatenate([kv[..., :nope], np.broadcast_to(c[:, kvl:][None], (nh, T, rd))], -1)
        s = q @ kk.transpose(0, 2, 1) * (nope + rd) ** -0.5
        s = np.where(np.triu(np.ones((T, T), dtype=bool), 1), -np.inf, s)
        o = (softmax(s) @ kv[..., nope:]).transpose(1, 0, 2).reshape(T, -1)
        return (o * sig(h @ W[a + "g_proj.weight"].T)) @ W[a + "o_proj.weight"].T

    def moe(h, m):
        sc = sig(h @ W[m + "gate.weight"].T)
        ch = sc + W[m + "gate.e_score_correction_bias"][None]
        ti = np.argsort(-ch, axis=-1, kind="stable")[:, :K_TOP]
        tw = np.take_along_axis(sc, ti, 1)
        tw = tw / (tw.sum(-1, keepdims=True) + 1e-20) * t["routed_scaling_factor"]
        z = h @ W[m + "routed_expert_down_proj.weight"].T
        y = np.zeros_like(z)
        for i in range(h.shape[0]):
            for j in range(K_TOP):
                e = m + f"experts.{int(ti[i, j])}."
                y[i] += tw[i, j] * (W[e + "w2.weight"] @ situ(W[e + "w1.weight"] @ z[i], W[e + "w3.weight"] @ z[i]))
        out = rms(y, W[m + "routed_expert_norm.weight"]) @ W[m + "routed_expert_up_proj.weight"].T
        s = m + "shared_experts."
        return out + situ(h @ W[s + "gate_proj.weight"].T, h @ W[s + "up_proj.weight"].T) @ W[s + "down_proj.weight"].T

    h = W["model.embed_tokens.weight"][ids]
    B, trace = [], []
    for l in range(L):
        p = f"model.layers.{l}."
        x = attnres(h, B, W[p + "self_attention_res_norm.weight"], W[p + "self_attention_res_proj.weight"]) if B else h
        if l % BS == 0:
            B.append(h)
            prefix = None
        else:
            prefix = h
        xn = rms(x, W[p + "input_layernorm.weight"])
        att = kda(xn, p + "self_attn.") if (l + 1) in la["kda_layers"] else mla(xn, p + "self_attn.")
        prefix = att if prefix is None else prefix + att
        m_in = rms(attnres(prefix, B, W[p + "mlp_res_norm.weight"], W[p + "mlp_res_proj.weight"]),
                   W[p + "post_attention_layernorm.weight"])
        if l < t["first_k_dense_replace"]:
            mo = situ(m_in @ W[p + "mlp.gate_proj.weight"].T, m_in @ W[p + "mlp.up_proj.weight"].T) @ W[p + "mlp.down_proj.weight"].T
        else:
            mo = moe(m_in, p + "block_sparse_moe.")
        h = prefix + mo
        trace.append(float(np.sqrt((h * h).mean())))
    out = attnres(h, B, W["model.output_attn_res_norm.weight"], W["model.output_attn_res_proj.weight"])
    return rms(out, W["model.norm.weight"]) @ W["lm_head.weight"].T, trace


PROMPTS = ["The harbor town woke slowly", "A language model reads text", "Where are you going?"]


def check_forward(W, cfg, ranks, n_new=10):
    inv = {v: k for k, v in ranks.items()}
    out = []
    for text in PROMPTS:
        ids = encode(ranks, text)
        need(b"".join(inv[i] for i in ids).decode() == text, "tokenizer round trip failed for", text)
        need(len(ids) < len(text.encode()), "no merges apply to", text)
        seq = list(ids)
        for _ in range(n_new):
            logits, trace = forward(W, cfg, seq)
            need(np.all(np.isfinite(logits)), "non-finite logits")
            seq.append(int(np.argmax(logits[-1])))
        gen = seq[len(ids):]
        need(all(0.05 < r < 1000 for r in trace), "hidden-state rms out of range:", trace)
        need(logits[-1].std() > 0.1, "logits have collapsed")
        need(len(set(gen)) >= 4, "greedy output repeats:", gen)
        need(all(i < len(ranks) for i in gen), "greedy output has reserved ids:", gen)
        out.append({"prompt_ids": ids, "greedy_ids": gen, "h_rms_per_layer": [round(r, 3) for r in trace],
                    "last_logits_std": round(float(logits[-1].std()), 3)})
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = args[0]
    try:
        cfg, offsets, summary = check_layout(folder)
        ranks = check_tokenizer(folder, cfg)
        W, stats = check_values(folder, offsets, cfg)
        summary.update(stats)
        if "--forward" in sys.argv:
            summary["forward"] = check_forward(W, cfg, ranks)
    except CheckError as e:
        print(f"synth_check: {folder}: FAILED: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
