#!/usr/bin/env python3
"""Summary of a scripts/bench_drives.sh run: RAW (its raw folder, or raw.tar.gz) -> OUT/summary.json
and OUT/summary.md. Standard library only; works on partial runs (a missing or failed file is
reported, not fatal), so it can also be run again here on a raw.tar.gz that came back:

    scripts/bench_drives_summary.py OUT/raw.tar.gz OUT
"""
import glob
import json
import os
import statistics
import sys
import tarfile
import tempfile


def load(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        # bench decode prints one JSON line; take the last line that parses.
        for line in reversed(text.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        return json.loads(text)
    except (OSError, ValueError):
        return None


def spread(values):
    v = sorted(values)
    if not v:
        return None
    return {"min": v[0], "median": statistics.median(v), "max": v[-1], "n": len(v)}


def bench_io(raw):
    out = {}
    for path in sorted(glob.glob(os.path.join(raw, "benchio.*.json"))):
        label = os.path.basename(path)[len("benchio."):-len(".json")]
        r = load(path)
        if r is None:
            out[label] = {"error": "no JSON (see benchio.%s.log)" % label}
            continue
        entry = {
            "ceilings_mbps": [round(d["ceiling_gbps"] * 1e3, 1) for d in r["drives"]],
            "sum_of_ceilings_mbps": round(r["sum_ceiling_gbps"] * 1e3, 1),
            "least_eta_over_round_robin": r.get("least_eta_over_round_robin"),
        }
        for p in ("least_eta", "round_robin"):
            q = r[p]
            entry[p] = {
                "min_mbps": round(q["min_gbps"] * 1e3, 1),
                "median_mbps": round(q["median_gbps"] * 1e3, 1),
                "max_mbps": round(q["max_gbps"] * 1e3, 1),
                "share_of_sum_of_ceilings": round(q["share_of_sum_of_ceilings"], 4),
                "per_drive": [
                    {"device": d["device"], "reads": d["reads"],
                     "achieved_mbps": round(d["achieved_gbps"] * 1e3, 1),
                     "share_of_ceiling": round(d["share_of_ceiling"], 3)}
                    for d in q["per_drive"]
                ],
            }
        out[label] = entry
    return out


# 1-4: the ladder (striped since the run's meta says rung_layout stripe; whole before); 4w: whole on
# 4 drives, 4r: whole with hot replicas on 4 drives.
CONFIGS = ["1", "2", "3", "4", "4w", "4r"]


def names(meta):
    layout = meta.get("rung_layout", "whole")
    n = {c: "%s, %s" % (c, layout) for c in ("1", "2", "3", "4")}
    n.update({"4w": "4, whole", "4r": "4, whole + hot replicas (trace)"})
    return n


def decode_runs(raw, config):
    runs, failed = [], []
    for path in sorted(glob.glob(os.path.join(raw, "decode.%s.*.json" % config))):
        r = load(path)
        if r is None or "seconds_per_token" not in r:
            failed.append(os.path.basename(path))
        else:
            runs.append(r)
    return runs, failed


def rung(runs, failed):
    spt = [r["seconds_per_token"] for r in runs]
    floors = [r.get("io_floor_sum_of_ceilings_seconds_per_token", 0) for r in runs]
    ratios = [s / f for s, f in zip(spt, floors) if f > 0]
    entry = {"runs": len(runs), "failed": failed}
    if not runs:
        return entry
    # The same floor over the rates the drives reached while busy instead of their ceilings: where
    # blk-throttle let bursts through (a drive above its ceiling), this is the floor the drives
    # actually offered, so s/token over it isolates balance and overlap from the emulator's bursts.
    achieved_ratios = []
    for r in runs:
        rate = sum(d["achieved_gbps"] for d in r.get("drives", []) if d["bytes"]) * 1e9
        if rate > 0 and r["needed_bytes_per_token"] > 0:
            achieved_ratios.append(r["seconds_per_token"] / (r["needed_bytes_per_token"] / rate))
    mid = sorted(runs, key=lambda r: r["seconds_per_token"])[(len(runs) - 1) // 2]
    entry.update({
        "seconds_per_token": spread(spt),
        "io_floor_sum_of_ceilings_seconds_per_token": spread([f for f in floors if f > 0]),
        "ratio_to_io_floor": spread(ratios),
        "ratio_to_floor_at_achieved_rates": spread(achieved_ratios),
        "needed_bytes_per_token": statistics.median(r["needed_bytes_per_token"] for r in runs),
        "disk_read_bytes_per_token": statistics.median(r["disk_read_bytes_per_token"] for r in runs),
        "cache_hit_rate": statistics.median(r["cache_hit_rate"] for r in runs),
        "disk_idle_seconds_per_token": statistics.median(r["disk_idle_seconds_per_token"] for r in runs),
        "io_wait_seconds_per_token": statistics.median(r["io_wait_seconds_per_token"] for r in runs),
        "compute_floor_seconds_per_token": statistics.median(
            r["compute_floor_seconds_per_token"] for r in runs),
        "load_seconds": statistics.median(r["load_seconds"] for r in runs),
        "rss_peak_bytes": max(r["rss_peak_bytes"] for r in runs),
        "tokens": runs[0]["tokens"],
        "expert_slots": runs[0]["expert_slots"],
        "drives_of_median_run": [
            {"device": d["device"], "bytes": d["bytes"],
             "achieved_mbps": round(d["achieved_gbps"] * 1e3, 1),
             "ceiling_mbps": round(d["ceiling_gbps"] * 1e3, 1),
             "share_of_ceiling": round(d["share_of_ceiling"], 3)}
            for d in mid.get("drives", []) if d["bytes"]
        ],
    })
    return entry


def ladder(raw):
    out = {}
    for c in CONFIGS:
        runs, failed = decode_runs(raw, c)
        out[c] = rung(runs, failed)
    four = out["4"].get("seconds_per_token")
    for c in CONFIGS:
        s = out[c].get("seconds_per_token")
        if four and s:
            out[c]["share_of_four_drive_rate"] = four["median"] / s["median"]
    # Replicas against none, both whole (runs of before striping had no 4w: their 4 was whole).
    whole = out["4w"].get("seconds_per_token") or (four if not out["4w"]["runs"] else None)
    r4 = out["4r"].get("seconds_per_token")
    if whole and r4:
        out["4r"]["speedup_over_no_replicas"] = whole["median"] / r4["median"]
    w4 = out["4w"].get("seconds_per_token")
    if four and w4:
        out["4"]["speedup_over_whole"] = w4["median"] / four["median"]
    if four and r4:
        out["4"]["speedup_over_whole_with_replicas"] = r4["median"] / four["median"]
    return out


def places(raw):
    out = {}
    for c in CONFIGS:
        p = load(os.path.join(raw, "place.%s.json" % c))
        if p:
            out[c] = {"layout": p.get("layout", "whole"), "experts": p.get("experts"),
                      "replicas": p.get("replicas"),
                      "files_per_drive": [d["files"] for d in p.get("drives", [])],
                      "bytes_per_drive": [d["bytes"] for d in p.get("drives", [])]}
    return out


def trace_stats(raw):
    path = os.path.join(raw, "routes.jsonl")
    if not os.path.exists(path):
        return None
    uses, lines = {}, 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            j = json.loads(line)
            lines += 1
            for e in j["experts"]:
                uses[(j["layer"], e)] = uses.get((j["layer"], e), 0) + 1
    counts = sorted(uses.values(), reverse=True)
    total = sum(counts)
    top = counts[: max(1, len(counts) // 4)]
    return {"route_lines": lines, "distinct_experts_used": len(uses), "uses": total,
            "share_of_uses_in_top_quarter": (sum(top) / total) if total else 0}


def median_of(entry, key):
    v = entry.get(key)
    return v["median"] if v else None


def fmt(x, digits=3):
    return "-" if x is None else ("%.*f" % (digits, x))


def markdown(s):
    m = s.get("meta", {})
    lines = ["# bench_drives.sh: results", ""]
    lines.append("cgroup %s; %s; %s." % (m.get("cgroup"), s.get("env", "").replace("\n", "; "),
                                        "rounds done: %s of %s" % (s.get("rounds_done"), m.get("reps"))))
    lines.append("")
    if s["bench_io"]:
        lines += ["## bench-io --dirs (MB = 1e6 bytes)", "",
                  "| drives (throttle) | ceilings measured | least-ETA min/median/max | share of sum "
                  "| round robin min/median/max | share | ETA / RR |",
                  "|---|---|---|---|---|---|---|"]
        for label, e in s["bench_io"].items():
            if "error" in e:
                lines.append("| %s | %s | | | | | |" % (label, e["error"]))
                continue
            a, b = e["least_eta"], e["round_robin"]
            lines.append("| %s | %s | %.0f / %.0f / %.0f | **%.3f** | %.0f / %.0f / %.0f | %.3f | %s |" % (
                label, " / ".join("%.0f" % c for c in e["ceilings_mbps"]), a["min_mbps"],
                a["median_mbps"], a["max_mbps"], a["share_of_sum_of_ceilings"], b["min_mbps"],
                b["median_mbps"], b["max_mbps"], b["share_of_sum_of_ceilings"],
                fmt(e["least_eta_over_round_robin"], 2)))
        for label, e in s["bench_io"].items():
            if "error" not in e:
                lines.append("")
                lines.append("- %s reads per drive, least-ETA: %s; round robin: %s" % (
                    label, " / ".join(str(d["reads"]) for d in e["least_eta"]["per_drive"]),
                    " / ".join(str(d["reads"]) for d in e["round_robin"]["per_drive"])))
        lines.append("")
    L = s.get("ladder")
    if L:
        lines += ["## Decode ladder: %s, %s MoE layers x %s experts, %s MB/s a drive" % (
            m.get("ladder"), m.get("moe_layers"), m.get("experts"), m.get("ladder_mbps")), "",
            "%s tokens a run (prompt %s), %s expert slots, page cache dropped before each run, "
            "configurations interleaved (order rotated each round)." % (
                m.get("tokens"), m.get("prompt_tokens"), m.get("slots")), "",
            "| drives | runs | s/token min/median/max | share of the 4-drive rate | I/O floor s/token "
            "| s/token over the floor (median; min-max) | over the floor at achieved rates "
            "| needed MB/token | cache hits | disk idle s/token |",
            "|---|---|---|---|---|---|---|---|---|---|"]
        rung_names = names(m)
        for c in CONFIGS:
            e = L[c]
            sp, fl, ra = e.get("seconds_per_token"), e.get("io_floor_sum_of_ceilings_seconds_per_token"), \
                e.get("ratio_to_io_floor")
            if not sp:
                lines.append("| %s | 0 | failed: %s | | | | | | | |" % (rung_names[c], ", ".join(e["failed"]) or "not run"))
                continue
            ach = e.get("ratio_to_floor_at_achieved_rates")
            lines.append("| %s | %d | %.3f / %.3f / %.3f | %s | %s | **%s** (%s-%s) | %s | %.0f | %.2f | %.3f |" % (
                rung_names[c], e["runs"], sp["min"], sp["median"], sp["max"],
                fmt(e.get("share_of_four_drive_rate"), 2), fmt(fl and fl["median"]),
                fmt(ra and ra["median"], 2), fmt(ra and ra["min"], 2), fmt(ra and ra["max"], 2),
                fmt(ach and ach["median"], 2),
                e["needed_bytes_per_token"] / 1e6, e["cache_hit_rate"], e["disk_idle_seconds_per_token"]))
        lines.append("")
        met = [rung_names[c] for c in CONFIGS if (median_of(L[c], "ratio_to_io_floor") or 9) <= 1.1]
        lines.append("- Target at most 1.1 x the floor (median): met by %s." % (
            "; ".join(met) if met else "none"))
        if L["4"].get("speedup_over_whole"):
            e4, w4 = L["4"], L["4w"]
            lines.append("- Stripe against whole at 4 drives: s/token whole over striped = **%.3f**; "
                         "over the floor %s striped against %s whole%s." % (
                             e4["speedup_over_whole"], fmt(median_of(e4, "ratio_to_io_floor"), 2),
                             fmt(median_of(w4, "ratio_to_io_floor"), 2),
                             "; whole + hot replicas over striped %.3f" % (
                                 e4["speedup_over_whole_with_replicas"])
                             if e4.get("speedup_over_whole_with_replicas") else ""))
        if L["4r"].get("speedup_over_no_replicas"):
            p = s.get("places", {}).get("4r", {})
            lines.append("- Hot replicas (%s extra copies from a trace of %s tokens with other ids): "
                         "4-drive whole s/token without over with = **%.3f**." % (
                             p.get("replicas"), m.get("trace_tokens"), L["4r"]["speedup_over_no_replicas"]))
        t = s.get("trace")
        if t:
            lines.append("- Trace: %d route lines, %d distinct experts used, top quarter of them "
                         "%.0f%% of the uses." % (t["route_lines"], t["distinct_experts_used"],
                                                  100 * t["share_of_uses_in_top_quarter"]))
        for c in CONFIGS:
            e = L[c]
            if e.get("drives_of_median_run"):
                lines.append("- %s, median run, per drive: %s" % (rung_names[c], "; ".join(
                    "%s %.0f MB at %.0f MB/s (%.0f%% of %.0f)" % (
                        d["device"], d["bytes"] / 1e6, d["achieved_mbps"], 100 * d["share_of_ceiling"],
                        d["ceiling_mbps"]) for d in e["drives_of_median_run"])))
        burst = [rung_names[c] for c in CONFIGS
                 if any(d["share_of_ceiling"] > 1.1 for d in L[c].get("drives_of_median_run", []))]
        if burst:
            lines.append("- **Check**: in %s a drive read above 110%% of its ceiling while busy: "
                         "blk-throttle let bursts through after idle gaps (spec B.4), which pulls "
                         "s/token under the floor; weigh those rungs' ratios accordingly." % ", ".join(burst))
        if L["1"].get("compute_floor_seconds_per_token") is not None:
            lines.append("- Compute floor (bench decode's GEMV roofline) %.3f s/token; load %.1f s a run; "
                         "peak RSS %.1f GB." % (L["1"]["compute_floor_seconds_per_token"],
                                                L["1"]["load_seconds"], L["1"]["rss_peak_bytes"] / 1e9))
        lines.append("")
    st = s.get("stages")
    if st:
        lines.append("Stages (seconds from the start): " + ", ".join(
            "%s %s" % (x["stage"], x["seconds"]) for x in st))
        lines.append("")
    return "\n".join(lines)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    raw, out = sys.argv[1], sys.argv[2]
    tmp = None
    if raw.endswith(".tar.gz"):
        tmp = tempfile.TemporaryDirectory()
        with tarfile.open(raw) as t:
            t.extractall(tmp.name)
        raw = tmp.name
    s = {"meta": load(os.path.join(raw, "meta.json")) or {}}
    try:
        with open(os.path.join(raw, "env.txt")) as f:
            env = f.read().splitlines()
        s["env"] = "\n".join(l for l in env if l.startswith(("Linux", "nproc", "MemTotal")))
    except OSError:
        s["env"] = ""
    s["bench_io"] = bench_io(raw)
    s["ceilings_at_ladder_rate_mbps"] = [
        round(d["ceiling_gbps"] * 1e3, 1)
        for d in (load(os.path.join(raw, "ceilings.json")) or {}).get("drives", [])]
    if glob.glob(os.path.join(raw, "decode.*.json")):
        s["ladder"] = ladder(raw)
    s["places"] = places(raw)
    s["trace"] = trace_stats(raw)
    trace_run = load(os.path.join(raw, "trace.json"))
    if trace_run:
        s["trace_run_seconds_per_token"] = trace_run.get("seconds_per_token")
    s["rounds_done"] = (load(os.path.join(raw, "rounds.json")) or {}).get("rounds_done")
    try:
        with open(os.path.join(raw, "stages.jsonl")) as f:
            s["stages"] = [json.loads(l) for l in f if l.strip()]
    except OSError:
        pass
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.json.tmp"), "w") as f:
        json.dump(s, f, indent=1)
    os.replace(os.path.join(out, "summary.json.tmp"), os.path.join(out, "summary.json"))
    md = markdown(s)
    with open(os.path.join(out, "summary.md.tmp"), "w") as f:
        f.write(md + "\n")
    os.replace(os.path.join(out, "summary.md.tmp"), os.path.join(out, "summary.md"))
    print(md)


if __name__ == "__main__":
    main()
