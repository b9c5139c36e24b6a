#!/usr/bin/env python3
# Makes tests/fixtures/kimi-linear-tiny: a tiny random Kimi-Linear checkpoint in the released layout, and
# its float64 reference outputs from Hugging Face transformers' native `kimi_linear`.
#
#   step 1 (numpy only):  python3 tools/kimi_linear_ref/make_fixture.py checkpoint
#   step 2 (torch + transformers 5.17, CPU is enough):
#                         python3 tools/kimi_linear_ref/make_fixture.py reference [--report-dir DIR]
# Step 1 scans weight seeds for routing and greedy choices far from ties (the widest router margin wins), using an
# independent numpy float64 forward (np_forward.py). Step 2 is hf_reference.py.
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import st_io  # noqa: E402
import tiny_model  # noqa: E402
from np_forward import KimiLinearNp  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "kimi-linear-tiny")
PROMPT_SEED = 7
N_GENERATE = 16
MIN_ROUTER_MARGIN = 1e-3  # k-th minus (k+1)-th biased router score, every token of every MoE layer
MIN_ARGMAX_GAP = 0.02  # top-1 minus top-2 logit at every position (prompt and continuation)


def evaluate(seed, prompt):
    """Runs the numpy reference on one weight seed; returns (tensors, stats)."""
    tensors = tiny_model.make_weights(seed)
    w = {name: st_io.stored_to_f64(dt, a) for name, dt, a in tensors}
    model = KimiLinearNp(tiny_model.config_json(), w)
    greedy = model.greedy(prompt, N_GENERATE)
    logits, margins = model.forward(prompt + greedy[:-1])
    top2 = np.sort(logits, -1)[:, -2:]
    biased = model.forward(prompt, biased_weights=True)[0]
    eps5 = model.forward(prompt, latent_eps=1e-5)[0]
    scale = np.abs(logits[:len(prompt)]).max()
    stats = {
        "seed": seed,
        "greedy_ids": greedy,
        "min_router_margin": float(margins.min()),
        "min_argmax_gap": float((top2[:, 1] - top2[:, 0]).min()),
        "max_abs_logit": float(scale),
        # how far the two known variants land from the unbiased/eps-1e-6 semantics (relative to max |logit|)
        "rel_diff_if_router_weights_biased": float(np.abs(biased - logits[:len(prompt)]).max() / scale),
        "rel_diff_if_kv_a_layernorm_eps_1e-5": float(np.abs(eps5 - logits[:len(prompt)]).max() / scale),
    }
    return tensors, stats


def write_checkpoint(out, tensors, stats, prompt):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(tiny_model.config_json(), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": tiny_model.BOS, "eos_token_id": tiny_model.EOS}, f, indent=2)
        f.write("\n")
    # Two shards like the release; tensors in lexicographic name order within each shard.
    split = tiny_model.N_LAYERS // 2
    shards = [[], []]
    for t in sorted(tensors, key=lambda t: t[0]):
        name = t[0]
        second = name in ("model.norm.weight", "lm_head.weight") or (
            name.startswith("model.layers.") and int(name.split(".")[2]) >= split)
        shards[int(second)].append(t)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += st_io.write_file(os.path.join(out, fname), shard, metadata={"format": "pt"})
        weight_map.update({t[0]: fname for t in shard})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "case_spec.json"), "w") as f:
        json.dump({"prompt_ids": prompt, "prompt_seed": PROMPT_SEED, "n_generate": N_GENERATE,
                   "numpy_reference": stats}, f, indent=1)
        f.write("\n")


def cmd_checkpoint(args):
    """Scans the seeds and keeps the one with the widest router margin among those meeting both bounds."""
    prompt = tiny_model.make_prompt(PROMPT_SEED)
    best = None
    for seed in range(args.first_seed, args.first_seed + args.tries):
        tensors, stats = evaluate(seed, prompt)
        ok = stats["min_router_margin"] >= MIN_ROUTER_MARGIN and stats["min_argmax_gap"] >= MIN_ARGMAX_GAP
        print(json.dumps({"ok": ok, **{k: v for k, v in stats.items() if k != "greedy_ids"}}), file=sys.stderr)
        if ok and (best is None or stats["min_router_margin"] > best[1]["min_router_margin"]):
            best = (tensors, stats)
    if best is None:
        sys.exit(f"no seed in [{args.first_seed}, {args.first_seed + args.tries}) met the margins")
    write_checkpoint(args.out, best[0], best[1], prompt)
    print(json.dumps(best[1], indent=1))


def cmd_reference(args):
    import hf_reference  # needs torch and transformers

    hf_reference.main(args.out, args.report_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("checkpoint", help="write config + checkpoint (numpy only)")
    c.add_argument("--out", default=DEFAULT_OUT)
    c.add_argument("--first-seed", type=int, default=1)
    c.add_argument("--tries", type=int, default=150)
    c.set_defaults(fn=cmd_checkpoint)
    r = sub.add_parser("reference", help="write reference.safetensors with transformers' kimi_linear")
    r.add_argument("--out", default=DEFAULT_OUT)
    r.add_argument("--report-dir", default=None, help="where to put the run report (default: --out)")
    r.set_defaults(fn=cmd_reference)
    args = ap.parse_args()
    args.out = os.path.abspath(args.out)
    args.fn(args)


if __name__ == "__main__":
    main()
