#!/usr/bin/env python3
"""Summarizes a --trace-timeline file: per decode step, where the disk sat idle and what the
forward pass was doing then, how many of the bytes read were wasted guesses, and how fast the
disk read while it had work.

    tools/timeline_report.py TIMELINE.json [--skip N]

A step runs from the start of one "decode step" span to the start of the next (so sampling and
the caller's work between steps count in the step that precedes them); the last step ends at
the end of its span. --skip drops the first N decode steps (the cache is cold there).

It ends with the lookahead's guesses, split into the last guess of a layer before its route and
the earlier ones it superseded (the lookahead guesses the first MoE layer twice: from the
embedding, and again after the dense layers): the share of each quarter of their ranks that the
route took, and the prefetch reads they started and how many of those the route used.
"""
import argparse
import json
import statistics
import sys


def union_length(intervals, lo, hi):
    """Total length of the union of (a, b) intervals clipped to [lo, hi]."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total, end = 0.0, lo
    for a, b in clipped:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def idle_intervals(busy, lo, hi):
    """The parts of [lo, hi] not covered by any busy interval."""
    gaps, end = [], lo
    for a, b in sorted(busy):
        if b <= end or a >= hi:
            if a >= hi:
                break
            continue
        if a > end:
            gaps.append((end, min(a, hi)))
        end = max(end, b)
    if end < hi:
        gaps.append((end, hi))
    return gaps


def innermost_phase(phases, t):
    """The shortest compute span containing time t (its name and layer), or 'between steps'."""
    best = None
    for p in phases:
        if p["ts"] <= t < p["ts"] + p["dur"] and (best is None or p["dur"] < best["dur"]):
            best = p
    if best is None:
        return "between steps"
    layer = best["args"].get("layer")
    return best["name"] if layer is None else f"{best['name']} {layer}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    ap.add_argument("--skip", type=int, default=0, help="decode steps to leave out at the start")
    ap.add_argument("--by-layer", action="store_true", help="idle time per phase and layer")
    a = ap.parse_args()

    events = [e for e in json.load(open(a.timeline))["traceEvents"] if e.get("ph") == "X"]
    reads = [e for e in events if e.get("cat") == "read"]
    compute = [e for e in events if e.get("cat") in ("compute", "io wait")]
    routes = [e for e in events if e["name"] == "route"]
    steps = sorted((e for e in compute if e["name"] == "decode step"), key=lambda e: e["ts"])
    if len(steps) <= a.skip:
        sys.exit(f"{a.timeline}: {len(steps)} decode steps, nothing left after --skip {a.skip}")

    # A prefetch read is used when the first route of its layer after it was issued asks for it.
    def used(r):
        layer, expert = r["args"]["layer"], r["args"]["expert"]
        later = [x for x in routes if x["args"]["layer"] == layer and x["ts"] >= r["ts"]]
        return bool(later) and expert in min(later, key=lambda x: x["ts"])["args"]["experts"]

    rows = []
    for i in range(a.skip, len(steps)):
        lo = steps[i]["ts"]
        hi = steps[i + 1]["ts"] if i + 1 < len(steps) else lo + steps[i]["dur"]
        mine = [r for r in reads if lo <= r["ts"] < hi]
        busy = [(r["ts"], r["ts"] + r["dur"]) for r in reads]
        busy_ms = union_length(busy, lo, hi) / 1e3
        idle = {}
        for g0, g1 in idle_intervals(busy, lo, hi):
            # Attribute each idle stretch in 0.1 ms slices to the innermost phase then running.
            t = g0
            while t < g1:
                step = min(100.0, g1 - t)
                name = innermost_phase(compute, t + step / 2)
                if not a.by_layer:
                    name = name.rstrip("0123456789 ")
                idle[name] = idle.get(name, 0.0) + step / 1e3
                t += step
        total_bytes = sum(r["args"]["bytes"] for r in mine)
        wasted = sum(r["args"]["bytes"] for r in mine if r["name"] == "prefetch" and not used(r))
        read_time = sum(r["dur"] for r in mine) / 1e3
        rows.append({
            "step": i, "ms": (hi - lo) / 1e3, "busy_ms": busy_ms,
            "idle_ms": (hi - lo) / 1e3 - busy_ms, "idle": idle,
            "mb": total_bytes / 1e6, "wasted_mb": wasted / 1e6,
            "gbps_busy": total_bytes / 1e6 / busy_ms if busy_ms else 0.0,
            "depth": read_time / busy_ms if busy_ms else 0.0,
            "demand_queued_ms": sum(r["args"]["queued_ms"] for r in mine if r["name"] == "demand"),
        })

    print(f"{'step':>4} {'ms':>7} {'busy':>7} {'idle':>6} {'MB':>7} {'wasted':>6} {'GB/s':>5} "
          f"{'depth':>5}  idle by phase (ms)")
    for r in rows:
        top = sorted(r["idle"].items(), key=lambda kv: -kv[1])[:4]
        print(f"{r['step']:>4} {r['ms']:7.1f} {r['busy_ms']:7.1f} {r['idle_ms']:6.1f} "
              f"{r['mb']:7.1f} {r['wasted_mb']:6.1f} {r['gbps_busy']:5.2f} {r['depth']:5.2f}  "
              + ", ".join(f"{k} {v:.1f}" for k, v in top))
    med = lambda key: statistics.median(r[key] for r in rows)
    print(f"median: {med('ms'):.1f} ms/step, disk idle {med('idle_ms'):.1f} ms, "
          f"{med('mb'):.1f} MB read of which {med('wasted_mb'):.1f} MB unused guesses, "
          f"{med('gbps_busy'):.2f} GB/s while busy at mean depth {med('depth'):.2f}, "
          f"demand reads queued {med('demand_queued_ms'):.1f} ms in total")
    phases = {}
    for r in rows:
        for k, v in r["idle"].items():
            phases.setdefault(k, []).append(v)
    print("disk idle per step by phase, median over steps (ms):")
    for k, v in sorted(phases.items(), key=lambda kv: -sum(kv[1])):
        v = v + [0.0] * (len(rows) - len(v))
        print(f"  {k:<28} {statistics.median(v):7.2f}   (mean {statistics.mean(v):.2f})")

    guess_report(events, steps[a.skip:])


def guess_report(events, steps):
    """Precision of each guess by rank quarter, and the reads each guess started, over `steps`."""
    marks = sorted((e for e in events if e["name"] in ("guess", "route")), key=lambda e: e["ts"])
    spans = [(s["ts"], s["ts"] + s["dur"]) for s in steps]
    in_step = lambda t: next((i for i, (a, b) in enumerate(spans) if a <= t <= b), None)
    # Per (step, layer): its guesses in order and its route.
    made = {}
    for e in marks:
        i = in_step(e["ts"])
        if i is None:
            continue
        entry = made.setdefault((i, e["args"]["layer"]), {"guesses": [], "route": None})
        if e["name"] == "guess":
            entry["guesses"].append(e)
        elif entry["route"] is None:
            entry["route"] = set(e["args"]["experts"])
    hits, totals, started, used = {}, {}, {}, {}
    for entry in made.values():
        if entry["route"] is None:
            continue
        for i, g in enumerate(entry["guesses"]):
            order = len(entry["guesses"]) - 1 - i  # 0: the guess in force when the route came
            ids = g["args"]["experts"]
            for rank, x in enumerate(ids):
                key = (order, rank * 4 // len(ids))
                totals[key] = totals.get(key, 0) + 1
                hits[key] = hits.get(key, 0) + (x in entry["route"])
    # A prefetch read belongs to the last guess of its layer queued before it, in the same step.
    for r in (e for e in events if e["name"] == "prefetch" and e.get("cat") == "read"):
        queued = r["ts"] - r["args"]["queued_ms"] * 1e3
        i = in_step(queued)
        entry = made.get((i, r["args"]["layer"])) if i is not None else None
        if not entry or entry["route"] is None:
            continue
        before = [g for g in entry["guesses"] if g["ts"] <= queued + 1]
        if not before:
            continue
        order = len(entry["guesses"]) - len(before)
        started[order] = started.get(order, 0) + 1
        used[order] = used.get(order, 0) + (r["args"]["expert"] in entry["route"])
    orders = sorted({o for o, _ in totals})
    if not orders:
        print("guesses: none in these steps")
        return
    print("guesses (last: the one in force at the route; 1 earlier: superseded): share of each "
          "rank quarter in the route; reads started")
    for o in orders:
        name = "last" if o == 0 else f"{o} earlier"
        quarters = ", ".join(f"q{q + 1} {hits[(o, q)] / totals[(o, q)]:.2f}"
                             for q in range(4) if (o, q) in totals)
        print(f"  {name:>9}: {quarters}; {started.get(o, 0)} reads started, "
              f"{used.get(o, 0)} used by the route")


if __name__ == "__main__":
    main()
