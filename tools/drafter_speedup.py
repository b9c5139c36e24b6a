#!/usr/bin/env python3
"""The model drafters' figures from scripts/bench_drafters.sh's raw folder (issue #17).

Reads off.json, dspark.json, qwen.json (bench decode --json), qwen_steps.err (generate --stats on
the Qwen3 folder) and verify.json (bench verify --json), and prints one JSON object: the K3 pass,
each drafter's proposal (time, memory it reads), each verify width's pass time, and the speed-up
each drafter would give at a per-draft acceptance of 50% and 80%.

The speed-up of a width w (w - 1 drafts) at acceptance a, each draft accepted with probability a
given the ones before it: a pass yields E = 1 + a + ... + a^(w-1) = (1 - a^w) / (1 - a) ids, and
costs the proposal plus a w-row verify pass, against one 1-row pass per id without drafting:
speed-up = E * t(1) / (t_draft(w) + t(w)). The best measured width is reported.
usage: drafter_speedup.py RAW_DIR
"""
import json
import os
import re
import statistics
import sys


def load(raw, name):
    with open(os.path.join(raw, name)) as f:
        return json.loads(f.read().strip().splitlines()[-1])


def spread(values):
    v = sorted(values)
    return [v[0], statistics.median(v), v[-1]] if v else []


def main():
    raw = sys.argv[1]
    off, dspark, qwen, verify = (load(raw, n) for n in
                                 ("off.json", "dspark.json", "qwen.json", "verify.json"))
    steps = open(os.path.join(raw, "qwen_steps.err")).read()
    m = re.search(r"decode: (\d+) tokens in ([\d.e+-]+) ms \(([\d.e+-]+) ms/token\)", steps)
    qwen_ms_per_id = float(m.group(3)) if m else None
    widths = {w["width"]: w["pass_seconds"][1] for w in verify["widths"]}
    t1 = widths[1]

    def proposals(run):
        # The first proposal also pages the drafter's weights in: reported apart.
        ms = [d for d, who in zip(run["pass_draft_ms"], run["pass_drafters"]) if who]
        return {"first_ms": ms[0] if ms else None, "ms": spread(ms[1:] or ms),
                "memory_bytes": run["drafter_bytes"], "loaded": run["drafters_loaded"],
                "seconds_per_token": run["seconds_per_token"],
                "disk_read_bytes_per_token": run["disk_read_bytes_per_token"]}

    out = {
        "k3_pass_seconds": [off["seconds_per_token_min"], off["seconds_per_token"],
                            off["seconds_per_token_max"]],
        "k3_disk_read_bytes_per_token": off["disk_read_bytes_per_token"],
        "k3_io_floor_seconds_per_token": off["io_floor_seconds_per_token"],
        "verify_pass_seconds_median": widths,
        "dspark": proposals(dspark),
        "qwen": proposals(qwen),
        "qwen_ms_per_id": qwen_ms_per_id,
    }
    out["dspark"]["vs_k3_pass"] = out["dspark"]["ms"][1] / 1000 / off["seconds_per_token"]
    out["qwen"]["vs_k3_pass"] = out["qwen"]["ms"][1] / 1000 / off["seconds_per_token"]

    def draft_seconds(name, w):
        if name == "dspark":  # the 7-row block whatever the width
            return out["dspark"]["ms"][1] / 1000
        # Qwen: a full proposal generates w - 1 + 2 ids after the new history ids (about 2 more
        # rows); the in-situ figure may have stopped early on random weights, so take the larger.
        full = (w - 1 + 4) * (qwen_ms_per_id or 0) / 1000
        return max(full, out["qwen"]["ms"][1] / 1000)

    speedups = {}
    for name in ("dspark", "qwen"):
        for a in (0.5, 0.8):
            best = None
            for w, tw in sorted(widths.items()):
                if w == 1:
                    continue
                e = (1 - a ** w) / (1 - a)
                s = e * t1 / (draft_seconds(name, w) + tw)
                if best is None or s > best["speedup"]:
                    best = {"width": w, "ids_per_pass": e, "speedup": s}
            speedups[f"{name}_{int(a * 100)}"] = best
    out["speedup_at_acceptance"] = speedups
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
