#!/usr/bin/env python3
"""Expert-cache policies replayed on a route trace (`deltafin generate --trace-routes FILE`).

For each capacity (in experts, or as a fraction of all experts of the traced layers) prints the
hit rate of LRU, LFU (frequency, LRU tie-break) and Belady's optimum (evict the expert needed
furthest in the future: the bound no policy beats), plus how much of each token's route repeats
the previous token's at the same layer (what previous-token reuse can save at most). Decode lines
only (rows == 1), in file order. numpy-free, standard library only.

    tools/route_cache_sim.py TRACE.jsonl [--capacities 16,32,64] [--fractions 0.05,0.1,0.25]
                             [--experts-per-layer N] [--json]
"""
import argparse
import collections
import json
import sys


def load(path):
    seq = []  # one entry per (token, layer): (layer, [experts])
    for line in open(path):
        rec = json.loads(line)
        if rec["rows"] == 1:
            seq.append((rec["layer"], rec["experts"]))
    return seq


def lru(accesses, cap):
    cache = collections.OrderedDict()
    hits = 0
    for key in accesses:
        if key in cache:
            hits += 1
            cache.move_to_end(key)
        else:
            if len(cache) >= cap:
                cache.popitem(last=False)
            cache[key] = True
    return hits


def lfu(accesses, cap):
    count = collections.Counter()
    last = {}
    cache = set()
    hits = 0
    for t, key in enumerate(accesses):
        count[key] += 1
        if key in cache:
            hits += 1
        else:
            if len(cache) >= cap:
                victim = min(cache, key=lambda k: (count[k], last[k]))
                cache.remove(victim)
            cache.add(key)
        last[key] = t
    return hits


def belady(accesses, cap):
    nxt = [0] * len(accesses)
    seen = {}
    for t in range(len(accesses) - 1, -1, -1):
        nxt[t] = seen.get(accesses[t], float("inf"))
        seen[accesses[t]] = t
    cache = {}  # key -> next use
    hits = 0
    for t, key in enumerate(accesses):
        if key in cache:
            hits += 1
        elif len(cache) >= cap:
            victim = max(cache, key=cache.get)
            del cache[victim]
        cache[key] = nxt[t]
    return hits


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--capacities", default="")
    ap.add_argument("--fractions", default="0.02,0.05,0.1,0.25,0.5")
    ap.add_argument("--experts-per-layer", type=int, default=0,
                    help="for --fractions (default: the largest id seen + 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    seq = load(args.trace)
    if not seq:
        sys.exit(f"{args.trace}: no decode lines (rows == 1)")
    layers = sorted({layer for layer, _ in seq})
    per_layer = args.experts_per_layer or 1 + max(e for _, ex in seq for e in ex)
    universe = per_layer * len(layers)
    accesses = [(layer, e) for layer, ex in seq for e in ex]
    caps = [int(c) for c in args.capacities.split(",") if c]
    caps += [max(1, int(float(f) * universe)) for f in args.fractions.split(",") if f]

    prev = {}
    repeat = total = 0
    for layer, ex in seq:
        if layer in prev:
            repeat += len(set(ex) & prev[layer])
            total += len(ex)
        prev[layer] = set(ex)
    tokens = len(seq) // len(layers)
    out = {"tokens": tokens, "layers": layers, "experts_per_layer": per_layer,
           "accesses": len(accesses),
           "previous_token_overlap": repeat / total if total else 0.0, "policies": []}
    for cap in sorted(set(caps)):
        row = {"capacity": cap, "fraction": cap / universe}
        for name, fn in (("lru", lru), ("lfu", lfu), ("belady", belady)):
            row[name] = fn(accesses, cap) / len(accesses)
        out["policies"].append(row)
    if args.json:
        print(json.dumps(out))
        return
    print(f"{tokens} tokens x {len(layers)} MoE layers, {per_layer} experts per layer; "
          f"previous-token overlap {out['previous_token_overlap']:.3f}")
    print("capacity  fraction   LRU     LFU     Belady")
    for r in out["policies"]:
        print(f"{r['capacity']:8d}  {r['fraction']:7.3f}  {r['lru']:.3f}   {r['lfu']:.3f}   {r['belady']:.3f}")


if __name__ == "__main__":
    main()
