#!/usr/bin/env python3
"""Writes the GGUF that llama.cpp's Kimi-K3 (or Kimi-Linear) loader expects from an HF-layout checkpoint
folder, so that llama.cpp can run the same weights as deltafin (issue #20). numpy only, streamed.

    k3_to_gguf.py MODEL_DIR OUT.gguf [--spine-f32] [--experts-f32]

The metadata keys, tensor names, shapes and per-tensor transforms are those of llama.cpp's own
converter (conversion/kimi_k3.py and kimi_linear.py, the gguf-py constants) and of its loader
(src/models/kimi-k3.cpp, kimi-linear.cpp), re-implemented here; what changes a value is listed:
  - routed MXFP4 experts (compressed-tensors "mxfp4-pack-quantized": packed [rows, cols/2] with the even
    column in the low nibble, E8M0 scales [rows, cols/32]) become one ggml MXFP4 tensor per layer and
    projection, [n_expert, rows, cols/32 blocks of 17 bytes]; a block is the scale byte, then 16 bytes
    where byte j holds element j (low nibble) and j+16 (high). Only bits move: codes and scales are kept.
  - BF16 matrices are copied as they are. Tensors llama.cpp keeps in F32 (1-D ones, norms, the router
    gate, conv1d, biases) are widened BF16 -> F32, which is exact. --spine-f32 widens every BF16 tensor
    (exact too): llama.cpp's CPU matmul rounds the activations to BF16 against a BF16 weight, so this
    separates that rounding from the rest of its error. --experts-f32 likewise writes the MXFP4 experts
    decoded to F32 (every E2M1 x 2^(e-127) value is exact in F32), which takes llama.cpp's CPU MXFP4
    kernel (8-bit Q8_0 activations) out of the comparison; both are diagnostics, not the shipped layout.
  - <x>_res_norm * <x>_res_proj (K3 attention residuals) are fused into one F32 score vector, as
    llama.cpp does; a product of two BF16 values is exact in F32.
  - A_log becomes -exp(A_log) (K3: the first n_head entries), computed in float64 and rounded once.
  - MLA kv_b_proj is split per head into k_b (transposed) and v_b; dt_bias is renamed ssm_dt.bias.
No real tokenizer is written: callers feed ids. node-llama-cpp tokenizes a test string while loading,
which llama.cpp's "none" vocabulary aborts on, so a placeholder SentencePiece vocabulary of the model's
size is written instead (256 byte tokens, the config's bos/eos/pad as control tokens, "[T<id>]" for the
rest): it maps ids to meaningless text and changes no number of the forward pass.
A tensor is read from its shard only while it is written, so a checkpoint far larger than RAM converts.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

ALIGN = 32
GGML_F32, GGML_BF16, GGML_MXFP4 = 0, 30, 39
FTYPE_MOSTLY_BF16, FTYPE_MOSTLY_MXFP4_MOE = 32, 38
GATING_SIGMOID = 2
ST_DTYPES = {"F32": (np.float32, 4), "BF16": (np.uint16, 2), "U8": (np.uint8, 1), "I32": (np.int32, 4)}
MXFP4_BLOCK = 32  # values per block; 1 scale byte + 16 code bytes


class Checkpoint:
    """Safetensors shards of one folder: name -> (path, dtype, shape, absolute offset, bytes)."""

    def __init__(self, folder):
        self.tensors = {}
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.exists(index):  # the index names the shards (a folder may hold other safetensors)
            shards = sorted(set(json.load(open(index))["weight_map"].values()))
        else:
            shards = sorted(f for f in os.listdir(folder) if f.startswith("model") and f.endswith(".safetensors"))
        if not shards:
            sys.exit(f"{folder}: no *.safetensors shards")
        for shard in shards:
            path = os.path.join(folder, shard)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                begin, end = info["data_offsets"]
                self.tensors[name] = (path, info["dtype"], tuple(info["shape"]), 8 + n + begin, end - begin)

    def read_chunks(self, name, chunk_bytes=64 << 20):
        """The stored bytes of one tensor, in pieces: a 2 GB embedding never sits in memory whole."""
        path, _, _, offset, size = self.tensors[name]
        with open(path, "rb") as f:
            f.seek(offset)
            left = size
            while left:
                piece = f.read(min(chunk_bytes, left))
                if not piece:
                    sys.exit(f"{path}: {name} truncated")
                left -= len(piece)
                yield piece

    def read(self, name):
        path, dtype, shape, offset, size = self.tensors[name]
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read(size)
        if len(raw) != size:
            sys.exit(f"{path}: {name} truncated ({len(raw)} of {size} bytes)")
        return np.frombuffer(raw, dtype=ST_DTYPES[dtype][0]).reshape(shape), dtype


def bf16_to_f32(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


def as_f32(a, dtype):
    if dtype == "F32":
        return a
    if dtype == "BF16":
        return bf16_to_f32(a)
    raise ValueError(f"expected F32 or BF16, got {dtype}")


E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def decode_mxfp4(packed, scale):
    """compressed-tensors MXFP4 -> float32 values [rows, cols] (exact)."""
    rows, half = packed.shape
    codes = np.stack((packed & 0x0F, packed >> 4), axis=-1).reshape(rows, half * 2)
    exp = np.repeat(scale.astype(np.float64) - 127, MXFP4_BLOCK, axis=1)
    return (E2M1[codes] * np.exp2(exp)).astype(np.float32)


def repack_mxfp4(packed, scale):
    """compressed-tensors MXFP4 rows -> ggml block_mxfp4 rows: [rows, cols/32, 17] uint8."""
    rows, half = packed.shape
    n_blocks = half * 2 // MXFP4_BLOCK
    if half * 2 % MXFP4_BLOCK or scale.shape != (rows, n_blocks):
        raise ValueError(f"MXFP4 packed {packed.shape} and scale {scale.shape} do not pair")
    p = packed.reshape(rows, n_blocks, 16)
    codes = np.stack((p & 0x0F, p >> 4), axis=-1).reshape(rows, n_blocks, 32)  # element order
    out = np.empty((rows, n_blocks, 17), dtype=np.uint8)
    out[:, :, 0] = scale
    out[:, :, 1:] = codes[:, :, :16] | (codes[:, :, 16:] << 4)
    return out


class Out:
    """One GGUF tensor: name, numpy-order shape, ggml type, and a producer yielding its bytes."""

    def __init__(self, name, shape, gtype, produce):
        self.name, self.shape, self.gtype, self.produce = name, tuple(shape), gtype, produce

    def nbytes(self):
        n = 1
        for d in self.shape[:-1]:
            n *= d
        last = self.shape[-1]
        if self.gtype == GGML_MXFP4:
            return n * last // MXFP4_BLOCK * 17
        return n * last * (4 if self.gtype == GGML_F32 else 2)


class Plan:
    def __init__(self, ck, cfg, spine_f32):
        self.ck, self.cfg, self.spine_f32 = ck, cfg, spine_f32
        self.outs, self.used = [], set()
        names = list(ck.tensors)
        self.prefix = "language_model." if any(n.startswith("language_model.") for n in names) else ""

    def src(self, rel):
        return self.prefix + rel

    def has(self, rel):
        return self.src(rel) in self.ck.tensors

    def copy(self, rel, out_name, force_f32=False):
        """A BF16/F32 tensor as it is (or widened to F32), numpy shape kept (ggml ne reversed)."""
        name = self.src(rel)
        _, dtype, shape, _, _ = self.ck.tensors[name]
        self.used.add(name)
        widen = dtype == "F32" or force_f32 or self.spine_f32
        if dtype not in ("F32", "BF16"):
            raise ValueError(f"{name}: dtype {dtype}, expected BF16 or F32")

        def produce():
            if widen and dtype != "F32":
                a, dt = self.ck.read(name)
                yield as_f32(a, dt).tobytes()
            else:  # the same bytes
                yield from self.ck.read_chunks(name)

        self.outs.append(Out(out_name, shape, GGML_F32 if widen else GGML_BF16, produce))

    def derived(self, rels, out_name, shape, fn, gtype=GGML_F32):
        names = [self.src(r) for r in rels]
        self.used.update(names)

        def produce():
            arrays = [as_f32(*self.ck.read(n)) if self.ck.tensors[n][1] != "U8" else self.ck.read(n)[0]
                      for n in names]
            yield np.ascontiguousarray(fn(*arrays)).tobytes()

        self.outs.append(Out(out_name, shape, gtype, produce))

    def stacked(self, rels, out_name, per_expert_shape, gtype, fn):
        """One [n_expert, ...] tensor whose expert slices are produced one at a time."""
        groups = [[self.src(r) for r in rel] for rel in rels]
        for g in groups:
            self.used.update(g)

        def produce():
            for g in groups:
                yield np.ascontiguousarray(fn(*[self.ck.read(n)[0] for n in g])).tobytes()

        self.outs.append(Out(out_name, (len(rels),) + tuple(per_expert_shape), gtype, produce))


def build(ck, cfg, spine_f32, experts_f32=False):
    k3 = cfg.get("model_type") == "kimi_k3"
    tc = cfg["text_config"] if k3 else cfg
    pl = Plan(ck, tc, spine_f32)
    la = tc["linear_attn_config"]
    n_layer, n_embd, n_head = tc["num_hidden_layers"], tc["hidden_size"], tc["num_attention_heads"]
    full = set(la["full_attn_layers"])  # 1-based
    nope, v_dim, kv_lora = tc["qk_nope_head_dim"], tc["v_head_dim"], tc["kv_lora_rank"]
    n_expert = tc["num_experts"]
    quant = tc.get("quantization_config") or cfg.get("quantization_config") or {}
    mxfp4 = quant.get("format") == "mxfp4-pack-quantized"

    pl.copy("model.embed_tokens.weight", "token_embd.weight")
    for i in range(n_layer):
        L, b = f"model.layers.{i}.", f"blk.{i}."
        pl.copy(L + "input_layernorm.weight", b + "attn_norm.weight", True)
        pl.copy(L + "post_attention_layernorm.weight", b + "ffn_norm.weight", True)
        if k3:
            for hf, gg in (("self_attention_res", "attn_res_score"), ("mlp_res", "ffn_res_score")):
                pl.derived([L + hf + "_norm.weight", L + hf + "_proj.weight"], b + gg + ".weight",
                           (n_embd,), lambda nw, pw: nw.reshape(-1) * pw.reshape(-1))
        A = L + "self_attn."
        if (i + 1) not in full:  # KDA
            for x in "qkv":
                pl.copy(A + f"{x}_proj.weight", b + f"attn_{x}.weight")
                _, _, cs, _, _ = ck.tensors[pl.src(A + f"{x}_conv1d.weight")]
                d_inner, d_conv = cs[0], cs[-1]
                pl.derived([A + f"{x}_conv1d.weight"], b + f"ssm_conv1d_{x}.weight", (1, d_inner, 1, d_conv),
                           lambda w: w.reshape(-1))
            pl.copy(A + "f_a_proj.weight", b + "ssm_f_a.weight")
            pl.copy(A + "f_b_proj.weight", b + "ssm_f_b.weight")
            pl.copy(A + "b_proj.weight", b + "ssm_beta.weight")
            _, _, ashape, _, _ = ck.tensors[pl.src(A + "A_log")]
            a_shape = (n_head,) if k3 else ashape
            pl.derived([A + "A_log"], b + "ssm_a", a_shape,
                       lambda a: (-np.exp(a.reshape(-1)[:n_head].astype(np.float64))).astype(np.float32))
            pl.copy(A + "dt_bias", b + "ssm_dt.bias", True)
            if k3:
                pl.copy(A + "g_proj.weight", b + "ssm_g.weight")
            else:
                pl.copy(A + "g_a_proj.weight", b + "ssm_g_a.weight")
                pl.copy(A + "g_b_proj.weight", b + "ssm_g_b.weight")
            pl.copy(A + "o_norm.weight", b + "ssm_norm.weight", True)
        else:  # MLA
            if pl.has(A + "q_a_proj.weight"):
                pl.copy(A + "q_a_proj.weight", b + "attn_q_a.weight")
                pl.copy(A + "q_a_layernorm.weight", b + "attn_q_a_norm.weight", True)
                pl.copy(A + "q_b_proj.weight", b + "attn_q_b.weight")
            else:
                pl.copy(A + "q_proj.weight", b + "attn_q.weight")
            pl.copy(A + "kv_a_proj_with_mqa.weight", b + "attn_kv_a_mqa.weight")
            pl.copy(A + "kv_a_layernorm.weight", b + "attn_kv_a_norm.weight", True)
            add_kv_b(pl, A + "kv_b_proj.weight", b, n_head, nope, v_dim, kv_lora)
            if k3 and pl.has(A + "g_proj.weight"):
                pl.copy(A + "g_proj.weight", b + "attn_gate.weight")
        pl.copy(A + "o_proj.weight", b + "attn_output.weight")

        if i < tc["first_k_dense_replace"]:
            for p in ("gate", "up", "down"):
                pl.copy(L + f"mlp.{p}_proj.weight", b + f"ffn_{p}.weight")
            continue
        M = L + "block_sparse_moe."
        pl.copy(M + "gate.weight", b + "ffn_gate_inp.weight", True)
        pl.copy(M + "gate.e_score_correction_bias", b + "exp_probs_b.bias", True)
        for p in ("gate", "up", "down"):
            pl.copy(M + f"shared_experts.{p}_proj.weight", b + f"ffn_{p}_shexp.weight")
        if pl.has(M + "routed_expert_down_proj.weight"):
            pl.copy(M + "routed_expert_down_proj.weight", b + "ffn_routed_down.weight")
            pl.copy(M + "routed_expert_up_proj.weight", b + "ffn_routed_up.weight")
            if pl.has(M + "routed_expert_norm.weight"):
                pl.copy(M + "routed_expert_norm.weight", b + "ffn_routed_norm.weight", True)
        for w, gg in (("w1", "ffn_gate_exps"), ("w3", "ffn_up_exps"), ("w2", "ffn_down_exps")):
            E = [M + f"experts.{e}.{w}." for e in range(n_expert)]
            if mxfp4:
                _, _, ps, _, _ = ck.tensors[pl.src(E[0] + "weight_packed")]
                rows, cols = ps[0], ps[1] * 2
                pl.stacked([(e + "weight_packed", e + "weight_scale") for e in E], b + gg + ".weight",
                           (rows, cols), GGML_F32 if experts_f32 else GGML_MXFP4,
                           decode_mxfp4 if experts_f32 else repack_mxfp4)
            else:
                _, dt, ws, _, _ = ck.tensors[pl.src(E[0] + "weight")]
                widen = spine_f32 or dt == "F32"
                pl.stacked([(e + "weight",) for e in E], b + gg + ".weight", ws,
                           GGML_F32 if widen else GGML_BF16,
                           (lambda a: bf16_to_f32(a)) if widen and dt == "BF16" else (lambda a: a))
    pl.copy("model.norm.weight", "output_norm.weight", True)
    if k3:
        pl.derived(["model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight"],
                   "output_res_score.weight", (n_embd,), lambda nw, pw: nw.reshape(-1) * pw.reshape(-1))
    pl.copy("lm_head.weight", "output.weight")

    left = [n for n in ck.tensors if n not in pl.used and not n.startswith(("vision_tower.", "mm_projector."))]
    if left:
        sys.exit(f"{len(left)} checkpoint tensors have no GGUF counterpart, e.g. {left[0]!r}")
    ids = {k: tc.get(f"{k}_token_id", cfg.get(f"{k}_token_id")) for k in ("bos", "eos", "pad")}
    return pl.outs, metadata(tc, k3, mxfp4, n_layer, full, ids)


def add_kv_b(pl, rel, b, n_head, nope, v_dim, kv_lora):
    """kv_b [n_head*(nope+v), kv_lora] -> k_b [n_head, kv_lora, nope] (transposed) and v_b [n_head, v, kv_lora]."""
    name = pl.src(rel)
    _, dtype, shape, _, _ = pl.ck.tensors[name]
    if shape != (n_head * (nope + v_dim), kv_lora):
        raise ValueError(f"{name}: shape {shape}, expected {(n_head * (nope + v_dim), kv_lora)}")
    pl.used.add(name)
    widen = pl.spine_f32 or dtype == "F32"
    gtype = GGML_F32 if widen else GGML_BF16

    def part(which):
        def produce():
            a, dt = pl.ck.read(name)
            if widen:
                a = as_f32(a, dt)
            kv = a.reshape(n_head, nope + v_dim, kv_lora)
            yield np.ascontiguousarray(kv[:, :nope, :].transpose(0, 2, 1) if which == "k" else kv[:, nope:, :]).tobytes()
        return produce

    pl.outs.append(Out(b + "attn_k_b.weight", (n_head, kv_lora, nope), gtype, part("k")))
    pl.outs.append(Out(b + "attn_v_b.weight", (n_head, v_dim, kv_lora), gtype, part("v")))


def metadata(tc, k3, mxfp4, n_layer, full, cfg_ids):
    arch = "kimi-k3" if k3 else "kimi-linear"
    la = tc["linear_attn_config"]
    u32, f32, s, b, au32 = "u32", "f32", "str", "bool", "arr_u32"
    kv = [("general.architecture", s, arch),
          ("general.name", s, "deltafin k3_to_gguf"),
          ("general.file_type", u32, FTYPE_MOSTLY_MXFP4_MOE if mxfp4 else FTYPE_MOSTLY_BF16),
          ("general.quantization_version", u32, 2)]
    a = lambda k, t, v: kv.append((f"{arch}.{k}", t, v))
    a("block_count", u32, n_layer)
    ctx = tc.get("max_position_embeddings", tc.get("model_max_length"))
    a("context_length", u32, ctx)
    a("embedding_length", u32, tc["hidden_size"])
    a("feed_forward_length", u32, tc["intermediate_size"])
    a("attention.head_count", u32, tc["num_attention_heads"])
    # MLA is served as MQA over the latent (one kv head); 0 marks a KDA (recurrent) layer
    a("attention.head_count_kv", au32, [1 if (i + 1) in full else 0 for i in range(n_layer)])
    a("attention.layer_norm_rms_epsilon", f32, tc["rms_norm_eps"])
    a("expert_count", u32, tc["num_experts"])
    a("expert_used_count", u32, tc["num_experts_per_token"])
    if tc.get("topk_group") is not None:
        a("expert_group_used_count", u32, tc["topk_group"])
    if tc["moe_router_activation_func"] != "sigmoid":
        raise ValueError(f"router activation {tc['moe_router_activation_func']!r}, expected sigmoid")
    a("expert_gating_func", u32, GATING_SIGMOID)
    if not k3 and tc.get("rope_theta") is not None:
        a("rope.freq_base", f32, tc["rope_theta"])
    a("vocab_size", u32, tc["vocab_size"])
    a("ssm.conv_kernel", u32, la["short_conv_kernel_size"])
    a("kda.head_dim", u32, la["head_dim"])
    if k3 and la.get("gate_lower_bound") is not None:
        a("kda.gate_lower_bound", f32, la["gate_lower_bound"])
    if tc.get("q_lora_rank") is not None:
        a("attention.q_lora_rank", u32, tc["q_lora_rank"])
    kv_lora, rope = tc["kv_lora_rank"], tc["qk_rope_head_dim"]
    a("attention.kv_lora_rank", u32, kv_lora)
    a("rope.dimension_count", u32, rope)
    a("attention.key_length", u32, kv_lora + rope)
    if k3:
        a("attention.value_length", u32, kv_lora)
    a("attention.key_length_mla", u32, tc["qk_nope_head_dim"] + rope)
    a("attention.value_length_mla", u32, tc["v_head_dim"])
    a("expert_feed_forward_length", u32, tc["moe_intermediate_size"])
    a("expert_shared_count", u32, tc["num_shared_experts"])
    a("leading_dense_block_count", u32, tc["first_k_dense_replace"])
    a("expert_weights_scale", f32, tc["routed_scaling_factor"])
    if k3:
        a("expert_weights_norm", b, bool(tc["moe_renormalize"]))
        if tc.get("routed_expert_hidden_size") is not None:
            a("expert_latent_length", u32, tc["routed_expert_hidden_size"])
        if tc["hidden_act"] != "situ":
            raise ValueError(f"hidden_act {tc['hidden_act']!r}, expected situ")
        a("activation.situ_beta", f32, tc["activation_situ_beta"])
        a("activation.situ_linear_beta", f32, tc["activation_situ_linear_beta"])
        a("attn_res.block_size", u32, tc["attn_res_block_size"])
    kv += placeholder_vocab(tc, cfg_ids)
    return kv


def placeholder_vocab(tc, cfg_ids):
    """An SPM vocabulary of vocab_size entries that tokenizes any text (byte fallback) and nothing else."""
    n = tc["vocab_size"]
    special = {k: v for k, v in cfg_ids.items() if v is not None and 0 <= v < n}
    byte_ids = [i for i in range(n) if i not in special.values()][:256]
    if len(byte_ids) < 256:
        raise ValueError(f"vocab_size {n} leaves no room for 256 byte tokens")
    tokens, types = [f"[T{i}]" for i in range(n)], [1] * n  # NORMAL
    for b, i in enumerate(byte_ids):
        tokens[i], types[i] = f"<0x{b:02X}>", 6  # BYTE
    for k, i in special.items():
        tokens[i], types[i] = f"<|{k}_{i}|>", 3  # CONTROL
    kv = [("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.tokens", "arr_str", tokens),
          ("tokenizer.ggml.token_type", "arr_i32", types),
          ("tokenizer.ggml.add_bos_token", "bool", False), ("tokenizer.ggml.add_eos_token", "bool", False)]
    names = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id"}
    kv += [(f"tokenizer.ggml.{names[k]}", "u32", i) for k, i in special.items()]
    kv.append(("tokenizer.ggml.unknown_token_id", "u32", byte_ids[0]))
    return kv


def gguf_string(x):
    e = x.encode()
    return struct.pack("<Q", len(e)) + e


def gguf_value(t, v):
    if t == "u32":
        return struct.pack("<II", 4, v)
    if t == "f32":
        return struct.pack("<If", 6, v)
    if t == "bool":
        return struct.pack("<IB", 7, 1 if v else 0)
    if t == "str":
        return struct.pack("<I", 8) + gguf_string(v)
    if t == "arr_u32":
        return struct.pack("<IIQ", 9, 4, len(v)) + struct.pack(f"<{len(v)}I", *v)
    if t == "arr_i32":
        return struct.pack("<IIQ", 9, 5, len(v)) + struct.pack(f"<{len(v)}i", *v)
    if t == "arr_str":
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(gguf_string(x) for x in v)
    raise ValueError(t)


def pad(n):
    return (-n) % ALIGN


def write(path, outs, kv):
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(outs), len(kv)))
    for k, t, v in kv:
        head += gguf_string(k) + gguf_value(t, v)
    offset = 0
    for o in outs:
        ne = list(reversed(o.shape))
        head += gguf_string(o.name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        head += struct.pack("<IQ", o.gtype, offset)
        offset += o.nbytes() + pad(o.nbytes())
    head += b"\0" * pad(len(head))
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(head)
        for o in outs:
            n = 0
            for chunk in o.produce():
                f.write(chunk)
                n += len(chunk)
            if n != o.nbytes():
                raise RuntimeError(f"{o.name}: wrote {n} bytes, expected {o.nbytes()}")
            f.write(b"\0" * pad(n))
    os.replace(tmp, path)
    return len(head) + offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--spine-f32", action="store_true",
                    help="widen every BF16 tensor to F32 (exact) instead of keeping BF16")
    ap.add_argument("--experts-f32", action="store_true",
                    help="write the MXFP4 experts decoded to F32 (exact values; a diagnostic)")
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.model_dir, "config.json")))
    ck = Checkpoint(args.model_dir)
    outs, kv = build(ck, cfg, args.spine_f32, args.experts_f32)
    size = write(args.out, outs, kv)
    print(f"{args.out}: {len(outs)} tensors, {len(kv)} keys, {size / 2**20:.1f} MiB "
          f"({kv[0][2]}, file type {kv[2][2]})")


if __name__ == "__main__":
    main()
