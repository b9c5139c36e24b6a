#!/usr/bin/env python3
"""llama.cpp's logits and greedy ids on the oracle fixtures against their float64 reference, next to
deltafin's (and kimi-k3-in-c's where its binary is given): issue #20's exactness table.

    lcpp_exactness.py --deltafin BIN [--k3c BIN] [--runner lcpp_run.mjs] [--work DIR] [--json OUT]
                      [--threads N] [FIXTURE_DIR ...]        (default: the two tests/fixtures cases)

Each fixture is converted as shipped (BF16 matrices, MXFP4 experts; run with node-llama-cpp's default
F16 KV cache) and, to show where llama.cpp's error comes from, with the spine widened to F32, the
experts decoded to F32, both, and both with an F32 KV cache: exact re-encodings of the same values
(no value changes), so each step removes one of llama.cpp's roundings. Measures, as in
tools/compare_logits.py: max|logit - ref| / max|ref| over the 24 prompt positions of one forward pass,
the positions whose argmax agrees, the error at the last prompt position alone (the one logits vector
kimi-k3-in-c can dump), and how many of the 16 free-running greedy ids equal the reference's.
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


def run_k3c(k3c, model, prompt, n_new, work):
    dump, out = os.path.join(work, "k3c_logits.bin"), os.path.join(work, "k3c.json")
    p = subprocess.run([k3c, model, "--ids", ",".join(map(str, prompt)), "--gen", str(n_new), "--incremental",
                        "--dump-logits", dump, "--out", out], capture_output=True, text=True)
    if p.returncode:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]
        raise ValueError(f"exit {p.returncode}: {tail[0][:120]}")
    return np.fromfile(dump, dtype=np.float32), json.load(open(out))["generated_ids"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fixtures", nargs="*")
    ap.add_argument("--deltafin", required=True)
    ap.add_argument("--k3c")
    ap.add_argument("--runner", default=os.path.join(HERE, "lcpp_run.mjs"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--json")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
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
                last, ids = run_k3c(a.k3c, fx, prompt, n_new, work)
                rows.append(dict(fixture=name, engine="kimi-k3-in-c", **measure(ref, None, ids, last)))
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
