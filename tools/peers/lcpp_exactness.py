#!/usr/bin/env python3
"""llama.cpp's logits and greedy ids on the oracle fixtures against their float64 reference, next to
deltafin's (and kimi-k3-in-c's where its binary is given): issue #20's exactness table.

    lcpp_exactness.py --deltafin BIN [--k3c BIN | --peers-dir DIR] [--runner lcpp_run.mjs] [--work DIR] [--json OUT]
                      [--threads N] [FIXTURE_DIR ...]        (default: the two tests/fixtures cases)

Each fixture is converted as shipped (BF16 matrices, MXFP4 experts; run with node-llama-cpp's default
F16 KV cache) and, to show where llama.cpp's error comes from, with the spine widened to F32, the
experts decoded to F32, both, and both with an F32 KV cache: exact re-encodings of the same values
(no value changes), so each step removes one of llama.cpp's roundings. Measures, as in
tools/compare_logits.py: max|logit - ref| / max|ref| over the 24 prompt positions of one forward pass,
the positions whose argmax agrees, the error at the last prompt position alone, and how many of the 16
free-running greedy ids equal the reference's. kimi-k3-in-c dumps one logits vector per run, so its
prompt positions come from one run per prompt prefix, on a copy of the fixture it can open (k3c_model_dir).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from compare_logits import read_safetensors  # noqa: E402
import k3_to_gguf as conv  # noqa: E402

# (label, converter flags, runner flags); all but the first are exact re-encodings of the same values
VARIANTS = [("as shipped", [], []),
            ("spine F32", ["--spine-f32"], []),
            ("experts F32", ["--experts-f32"], []),
            ("spine+experts F32", ["--spine-f32", "--experts-f32"], []),
            ("spine+experts F32, F32 KV cache", ["--spine-f32", "--experts-f32"], ["--kv-f32"])]


def measure(ref, logits, ids, last=None):
    R = ref["logits"].astype(np.float64)
    scale = np.abs(R).max()
    row = {}
    if logits is not None:
        L = np.asarray(logits, dtype=np.float64)
        per = np.abs(L - R).max(1) / scale
        row.update(prompt_rel=float(per.max()), argmax=int((L.argmax(1) == R.argmax(1)).sum()), positions=len(R))
        last = L[-1]
    if last is not None:
        row["last_rel"] = float(np.abs(np.asarray(last, dtype=np.float64) - R[-1]).max() / scale)
    want = ref["greedy_ids"].reshape(-1).tolist()
    n = 0
    while n < min(len(ids), len(want)) and ids[n] == want[n]:
        n += 1
    row.update(greedy_equal_prefix=n, greedy_n=len(want), ids=ids)
    return row


def run_lcpp(runner, gguf, prompt, n_new, threads, flags):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = ["node", runner, "--model", gguf, "--ids", ",".join(map(str, prompt)), "--tokens", str(n_new - 1),
               "--logits-out", f.name, "--prompt-logits"] + (["--threads", str(threads)] if threads else []) + flags
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        j = json.load(open(f.name))
    return j["prompt_logits"], j["ids"]


def run_deltafin(df, model, prompt, n_new, work):
    out = os.path.join(work, "df_logits.st")
    ids = ",".join(map(str, prompt))
    subprocess.run([df, "logits", "--model", model, "--ids", ids, "--out", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    g = subprocess.run([df, "generate", "--model", model, "--ids", ids, "--max-new", str(n_new), "--ignore-eos"],
                       check=True, capture_output=True, text=True).stdout
    return read_safetensors(out)["logits"], json.loads(g.strip().splitlines()[-1])


def k3c_model_dir(fx, work):
    """The fixture as a folder kimi-k3-in-c can open, same values. Two things stop it on the folder
    as shipped (kimi-k3-in-c ff11dce): it opens every *.safetensors in the folder
    (src/io/k3_st.c:373-377), so the fixture's reference.safetensors is read as a shard and its I32
    prompt_ids abort the scan ("unsupported dtype 'I32'", k3_st.c:51-58 and 280); and it requires
    self_attn.A_log to hold linear_attn_config.head_dim values (src/model/k3_bind.c:211; 128 on the
    released model, 96 heads + 32 zeros), while k3-tiny-a stores [32] (4 heads + 28 zeros). So this
    links the config and index, and rewrites the shards with each A_log cut to head_dim values: the
    dropped ones are exact zeros that neither the reference code (a [num_heads] parameter) nor
    kimi-k3-in-c (it keeps the first num_heads) reads. Every other tensor is copied byte for byte."""
    import struct
    out = os.path.join(work, os.path.basename(os.path.normpath(fx)) + ".k3c")
    os.makedirs(out, exist_ok=True)
    tc = json.load(open(os.path.join(fx, "config.json")))
    tc = tc.get("text_config", tc)
    la = tc["linear_attn_config"]
    want, heads = la["head_dim"], la["num_heads"]
    index = os.path.join(fx, "model.safetensors.index.json")
    for f in ("config.json", "generation_config.json", "model.safetensors.index.json"):
        if os.path.exists(os.path.join(fx, f)) and not os.path.exists(os.path.join(out, f)):
            os.symlink(os.path.abspath(os.path.join(fx, f)), os.path.join(out, f))
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        raw = open(os.path.join(fx, shard), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        hdr, base = json.loads(raw[8:8 + n]), 8 + n
        meta = hdr.pop("__metadata__", None)
        new, blobs, off = {}, [], 0
        for name, t in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            b = raw[base + t["data_offsets"][0]:base + t["data_offsets"][1]]
            if name.endswith("self_attn.A_log") and t["dtype"] == "F32" and len(b) // 4 != want:
                a = np.frombuffer(b, dtype=np.float32)
                if a.size < want or np.any(a[heads:] != 0):
                    raise ValueError(f"{name}: {a.size} values, cannot give kimi-k3-in-c {want} exactly")
                b, t = a[:want].tobytes(), dict(t, shape=[want])
            new[name] = dict(dtype=t["dtype"], shape=t["shape"], data_offsets=[off, off + len(b)])
            blobs.append(b)
            off += len(b)
        if meta is not None:
            new["__metadata__"] = meta
        h = json.dumps(new, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(out, shard), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return out


def run_k3c(k3c, fx, prompt, n_new, work):
    """kimi-k3-in-c dumps the logits of the first step only (--dump-logits: the last prompt position),
    so position t's logits come from a run on prompt[:t+1] (one causal forward, the same values as
    position t of the whole prompt); the greedy ids from one run of n_new steps with --incremental.
    --cache-gb 0.5: its default expert cache (64 GB, src/cli/k3_run.c:581) makes it refuse to start on
    a smaller machine."""
    model = k3c_model_dir(fx, work)

    def run(ids, gen, dump=None):
        out = os.path.join(work, "k3c.json")
        cmd = [k3c, model, "--ids", ",".join(map(str, ids)), "--gen", str(gen), "--incremental",
               "--cache-gb", "0.5", "--out", out] + (["--dump-logits", dump] if dump else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]
            raise ValueError(f"exit {p.returncode}: {tail[0][:120]}")
        return json.load(open(out))["generated_ids"]

    dump = os.path.join(work, "k3c_logits.bin")
    logits = []
    for t in range(len(prompt)):
        run(prompt[:t + 1], 1, dump)
        logits.append(np.fromfile(dump, dtype=np.float32))
    return np.stack(logits), run(prompt, n_new)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fixtures", nargs="*")
    ap.add_argument("--deltafin", required=True)
    ap.add_argument("--k3c", help="kimi-k3-in-c's bin/k3 (K3 fixtures only)")
    ap.add_argument("--peers-dir", help="bench_peers.sh's PEERS_DIR: --k3c defaults to PEERS_DIR/kimi-k3-in-c/bin/k3")
    ap.add_argument("--runner", default=os.path.join(HERE, "lcpp_run.mjs"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--json")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.peers_dir and not a.k3c:
        a.k3c = os.path.join(a.peers_dir, "kimi-k3-in-c", "bin", "k3")
    root = os.path.dirname(os.path.dirname(HERE))
    fixtures = a.fixtures or [os.path.join(root, "tests/fixtures", f) for f in ("k3-tiny-a", "kimi-linear-tiny")]
    work = a.work or tempfile.mkdtemp(prefix="lcpp_exact_")
    os.makedirs(work, exist_ok=True)
    rows = []
    for fx in fixtures:
        name = os.path.basename(os.path.normpath(fx))
        ref = read_safetensors(os.path.join(fx, "reference.safetensors"))
        prompt = ref["prompt_ids"].reshape(-1).tolist()
        n_new = ref["greedy_ids"].size
        logits, ids = run_deltafin(a.deltafin, fx, prompt, n_new, work)
        rows.append(dict(fixture=name, engine="deltafin", **measure(ref, logits, ids)))
        if a.k3c and json.load(open(os.path.join(fx, "config.json"))).get("model_type") == "kimi_k3":
            try:
                logits, ids = run_k3c(a.k3c, fx, prompt, n_new, work)
                rows.append(dict(fixture=name, engine="kimi-k3-in-c", **measure(ref, logits, ids)))
            except (OSError, KeyError, ValueError) as e:
                rows.append(dict(fixture=name, engine="kimi-k3-in-c", error=str(e)))
        cfg = json.load(open(os.path.join(fx, "config.json")))
        mxfp4 = "weight_packed" in open(os.path.join(fx, "model.safetensors.index.json")).read()
        done = set()
        for label, flags, run_flags in VARIANTS:
            if not mxfp4:  # BF16 experts: --spine-f32 widens them too
                flags = [f for f in flags if f != "--experts-f32"]
                label = label.replace("spine+experts F32", "spine F32").replace("experts F32", "as shipped")
            if (label, tuple(flags), tuple(run_flags)) in done:
                continue
            done.add((label, tuple(flags), tuple(run_flags)))
            gguf = os.path.join(work, f"{name}.{'_'.join(flags) or 'shipped'}.gguf")
            if not os.path.exists(gguf):
                outs, kv = conv.build(conv.Checkpoint(fx), cfg, "--spine-f32" in flags, "--experts-f32" in flags)
                conv.write(gguf, outs, kv)
            logits, ids = run_lcpp(a.runner, gguf, prompt, n_new, a.threads, run_flags)
            rows.append(dict(fixture=name, engine=f"llama.cpp, {label}", **measure(ref, logits, ids)))
    print("| fixture | engine | prompt logits max rel err | argmax agrees | last position rel err | greedy ids equal |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['fixture']} | {r['engine']} | failed: {r['error'][:140]} | | | |")
            continue
        p = f"{r['prompt_rel']:.2e}" if "prompt_rel" in r else "n/a"
        am = f"{r['argmax']}/{r['positions']}" if "argmax" in r else "n/a"
        print(f"| {r['fixture']} | {r['engine']} | {p} | {am} | {r['last_rel']:.2e} | "
              f"{r['greedy_equal_prefix']}/{r['greedy_n']} |")
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
