#!/usr/bin/env python3
"""Checks k3_to_gguf.py bit for bit: converts a checkpoint, reads the GGUF back with its own reader and
compares every tensor with the checkpoint (numpy only).

    test_k3_to_gguf.py MODEL_DIR [MODEL_DIR ...]

- MXFP4 experts: each ggml block is unpacked to its 32 four-bit codes and its E8M0 byte, the source's
  compressed-tensors rows likewise, and the two must be equal; then the values ggml's dequantizer
  computes (kvalues_mxfp4 = 2 x E2M1, scale 2^(e-128)) must equal E2M1 x 2^(e-127) exactly.
- BF16 tensors must be the same bits; widened ones must equal the BF16 -> F32 image; k_b/v_b must put
  kv_b back together; the residual scores must be the exact product of the two BF16 vectors.
- Every checkpoint tensor is used once (the converter refuses otherwise) and the metadata llama.cpp's
  loader requires is present.
Exits 1 on the first mismatch.
"""
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_to_gguf as conv  # noqa: E402

# ggml's kvalues_mxfp4 (ggml-common.h): twice E2M1, paired with a halved E8M0 scale
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float64)


def read_gguf(path):
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, raw, pos)
        pos += struct.calcsize("<" + fmt)
        return v if len(v) > 1 else v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = bytes(raw[pos:pos + n]).decode()
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert bytes(raw[:4]) == b"GGUF"
    pos = 4
    version, n_t, n_kv = take("I"), take("Q"), take("Q")
    assert version == 3
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    base = pos + (-pos) % kv.get("general.alignment", 32)
    tensors = {}
    for name, ne, t, off in infos:
        shape = tuple(reversed(ne))
        if t == conv.GGML_MXFP4:
            rows = int(np.prod(shape[:-1]))
            n = rows * shape[-1] // 32 * 17
            tensors[name] = (t, raw[base + off:base + off + n].reshape(shape[:-1] + (shape[-1] // 32, 17)))
        else:
            dt = {conv.GGML_F32: np.float32, conv.GGML_BF16: np.uint16}[t]
            n = int(np.prod(shape)) * np.dtype(dt).itemsize
            tensors[name] = (t, raw[base + off:base + off + n].view(dt).reshape(shape))
    return kv, tensors


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    k3 = cfg.get("model_type") == "kimi_k3"
    tc = cfg["text_config"] if k3 else cfg
    ck = conv.Checkpoint(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.gguf")
        outs, kvs = conv.build(ck, cfg, spine_f32=False)
        conv.write(out, outs, kvs)
        kv, T = read_gguf(out)
        arch = kv["general.architecture"]
        for key in ("block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
                    "expert_count", "expert_used_count", "kda.head_dim", "ssm.conv_kernel",
                    "attention.kv_lora_rank", "attention.key_length_mla", "expert_gating_func"):
            if f"{arch}.{key}" not in kv:
                fail(f"{model_dir}: metadata {arch}.{key} missing")
        if len(kv["tokenizer.ggml.tokens"]) != tc["vocab_size"]:
            fail("placeholder vocabulary size")
        pre = "language_model." if k3 else ""
        src = lambda n: ck.read(pre + n)  # noqa: E731
        n_checked = {"mxfp4": 0, "same": 0, "widened": 0, "derived": 0}

        # every plain tensor: map back from the GGUF name through the converter's own plan
        plan = {o.name: o for o in outs}
        for name, (t, data) in T.items():
            if name.endswith("_exps.weight"):
                continue
            got = np.asarray(data)
            want = np.frombuffer(b"".join(plan[name].produce()), dtype=got.dtype).reshape(got.shape)
            if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
                fail(f"{name}: bytes differ from the plan")
        # and independently of the plan, the ones whose source is one tensor
        simple = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
                  "output_norm.weight": "model.norm.weight"}
        for i in range(tc["num_hidden_layers"]):
            L = f"model.layers.{i}."
            simple[f"blk.{i}.attn_norm.weight"] = L + "input_layernorm.weight"
            simple[f"blk.{i}.ffn_norm.weight"] = L + "post_attention_layernorm.weight"
            simple[f"blk.{i}.attn_output.weight"] = L + "self_attn.o_proj.weight"
        for g, h in simple.items():
            a, dt = src(h)
            t, b = T[g]
            if t == conv.GGML_BF16:
                ok = dt == "BF16" and np.array_equal(a, b)
                n_checked["same"] += 1
            else:
                ok = np.array_equal(conv.as_f32(a, dt).view(np.uint32), np.asarray(b).view(np.uint32))
                n_checked["widened"] += 1
            if not ok:
                fail(f"{g} != {h}")
        for i in range(tc["num_hidden_layers"]):
            L, B = f"model.layers.{i}.", f"blk.{i}."
            if f"{B}attn_k_b.weight" in T:
                kvb, dt = src(L + "self_attn.kv_b_proj.weight")
                nope, vd = tc["qk_nope_head_dim"], tc["v_head_dim"]
                kb, vb = np.asarray(T[B + "attn_k_b.weight"][1]), np.asarray(T[B + "attn_v_b.weight"][1])
                back = np.concatenate([kb.transpose(0, 2, 1), vb], axis=1).reshape(kvb.shape)
                if not np.array_equal(back, kvb):
                    fail(f"{B}attn_k_b/v_b do not rebuild kv_b_proj")
                n_checked["derived"] += 1
            if k3:
                for hf, gg in (("self_attention_res", "attn_res_score"), ("mlp_res", "ffn_res_score")):
                    nw, pw = (conv.as_f32(*src(L + hf + s)).astype(np.float64).reshape(-1)
                              for s in ("_norm.weight", "_proj.weight"))
                    if not np.array_equal(np.asarray(T[B + gg + ".weight"][1], dtype=np.float64), nw * pw):
                        fail(f"{B}{gg}: not the exact product")
                    n_checked["derived"] += 1
            if f"{B}ffn_gate_exps.weight" not in T:
                continue
            for w, gg in (("w1", "ffn_gate_exps"), ("w3", "ffn_up_exps"), ("w2", "ffn_down_exps")):
                t, blocks = T[B + gg + ".weight"]
                for e in range(tc["num_experts"]):
                    E = L + f"block_sparse_moe.experts.{e}.{w}."
                    if t != conv.GGML_MXFP4:
                        a, dt = src(E + "weight")
                        if not np.array_equal(a, blocks[e]):
                            fail(f"{B}{gg}[{e}] != {E}weight")
                        n_checked["same"] += 1
                        continue
                    packed, _ = src(E + "weight_packed")
                    scale, _ = src(E + "weight_scale")
                    rows, half = packed.shape
                    src_codes = np.stack((packed & 15, packed >> 4), -1).reshape(rows, half * 2)
                    blk = np.asarray(blocks[e])  # [rows, nb, 17]
                    qs = blk[:, :, 1:]
                    g_codes = np.concatenate((qs & 15, qs >> 4), axis=-1).reshape(rows, half * 2)
                    if not np.array_equal(g_codes, src_codes) or not np.array_equal(blk[:, :, 0], scale):
                        fail(f"{B}{gg}[{e}]: codes or scales differ from {E}weight_packed/scale")
                    ggml_vals = KVALUES_MXFP4[g_codes] * np.exp2(np.repeat(blk[:, :, 0].astype(np.float64) - 128, 32, 1))
                    ref_vals = conv.E2M1[src_codes] * np.exp2(np.repeat(scale.astype(np.float64) - 127, 32, 1))
                    if not np.array_equal(ggml_vals, ref_vals):
                        fail(f"{B}{gg}[{e}]: values differ")
                    n_checked["mxfp4"] += 1
        print(f"ok {model_dir}: {len(T)} GGUF tensors, {n_checked['mxfp4']} MXFP4 expert matrices "
              f"(codes, scales, values), {n_checked['same']} copied and {n_checked['widened']} widened "
              f"tensors, {n_checked['derived']} derived (kv_b split, residual scores)")


if __name__ == "__main__":
    for d in sys.argv[1:] or ["tests/fixtures/k3-tiny-a", "tests/fixtures/kimi-linear-tiny"]:
        check(d)
