#!/usr/bin/env python3
"""scripts/bench_gpu.sh's summary: reads OUT/cuda-R.json, OUT/cpu-R.json and OUT/cuda-host-R.json
(bench decode --json of round R; cuda-host: the experts from host RAM through a small cache), writes OUT/summary.json and OUT/summary.md (also printed): min/median/max over the
rounds of each backend's decode s/token and prefill tokens/s, the GPU's floor, ratio, bytes and
operations per token and measured costs, and the speed-ups GPU over CPU (per round, paired).
Standard library only.

usage: bench_gpu_summary.py OUT
"""
import json
import os
import re
import statistics
import sys


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def runs(out, backend):
    found = {}
    for name in os.listdir(out):
        m = re.fullmatch(backend + r"-(\d+)\.json", name)
        if m:
            with open(os.path.join(out, name)) as f:
                found[int(m.group(1))] = json.load(f)
    return found


def prefill_tps(r):
    return r["prompt_tokens"] / r["prompt_seconds"] if r.get("prompt_seconds") else None


def backend_summary(rs):
    rs = list(rs.values())
    s = {
        "decode_seconds_per_token": spread([r["seconds_per_token"] for r in rs]),
        "decode_seconds_per_token_all_passes": {
            "min": min(r["seconds_per_token_min"] for r in rs),
            "max": max(r["seconds_per_token_max"] for r in rs)} if rs else None,
        "prefill_tokens_per_second": spread([prefill_tps(r) for r in rs]),
        "prompt_seconds": spread([r["prompt_seconds"] for r in rs]),
        "load_seconds": spread([r["load_seconds"] for r in rs]),
    }
    gpu = [r["gpu"] for r in rs if r.get("gpu")]
    if gpu:
        d = [g["decode"] for g in gpu]
        s["gpu"] = {
            "ratio": spread([x["ratio"] for x in d]),
            "floor_seconds_per_token": spread([x["floor_seconds_per_token"] for x in d]),
            "read_floor_seconds_per_token": spread([x["read_floor_seconds_per_token"] for x in d]),
            "op_overhead_seconds_per_token": spread([x["op_overhead_seconds_per_token"] for x in d]),
            "device_seconds_per_token": spread([x["device_seconds_per_token"] for x in d]),
            "device_share_of_wall": spread([x["device_share_of_wall"] for x in d]),
            "bytes_per_token": {k: spread([x["bytes"][k] for x in d]) for k in d[0]["bytes"]},
            "experts_per_token": spread([x["experts"] for x in d]),
            "launches_per_token": spread([x["launches"] for x in d]),
            "copies_per_token": spread([x["copies"] for x in d]),
            "syncs_per_token": spread([x["syncs"] for x in d]),
            "read_gbps": spread([g["read_gbps"] for g in gpu]),
            "launch_seconds": spread([g["launch_seconds"] for g in gpu]),
            "copy_seconds": spread([g["copy_seconds"] for g in gpu]),
            "sync_seconds": spread([g["sync_seconds"] for g in gpu]),
            "pinned_h2d_gbps": spread([g.get("pinned_h2d_gbps") for g in gpu]),
            "h2d_bytes_per_token": spread([r.get("vram_h2d_bytes_per_token") for r in rs]),
            "h2d_gbps_over_wall": spread([r.get("vram_h2d_gbps_over_wall") for r in rs]),
            "h2d_share_of_pinned": spread([r.get("vram_h2d_share_of_pinned") for r in rs]),
            "expert_misses_per_token": spread([r.get("vram_expert_misses_per_token") for r in rs]),
            "expert_ram_hits_per_token": spread([r.get("vram_expert_ram_hits_per_token") for r in rs]),
            "expert_disk_reads_per_token": spread([r.get("vram_expert_disk_reads_per_token") for r in rs]),
            "expert_h2d_busy_gbps": spread([r.get("vram_expert_h2d_gbps") for r in rs]),
            "expert_h2d_busy_share_of_pinned": spread(
                [r.get("vram_expert_h2d_share_of_pinned") for r in rs]),
            "prompt_ratio": spread([g["prompt"]["ratio"] for g in gpu]),
            "prompt_floor_seconds": spread([g["prompt"]["floor_seconds"] for g in gpu]),
            "prompt_bytes": spread([g["prompt"]["bytes"]["total"] for g in gpu]),
            "prompt_device_share_of_wall": spread([g["prompt"]["device_share_of_wall"] for g in gpu]),
        }
    else:
        s["compute_floor_seconds_per_token"] = spread(
            [r["compute_floor_seconds_per_token"] for r in rs])
    return s


def fmt(s, scale=1.0, digits=4):
    if not s:
        return "-"
    return " / ".join("%.*f" % (digits, s[k] * scale) for k in ("min", "median", "max"))


def main():
    out = sys.argv[1]
    gpu, cpu, host = runs(out, "cuda"), runs(out, "cpu"), runs(out, "cuda-host")
    config = {}
    if os.path.exists(os.path.join(out, "config.json")):
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
    paired = sorted(set(gpu) & set(cpu))
    summary = {"config": config, "rounds": {"cuda": len(gpu), "cpu": len(cpu), "paired": len(paired)},
               "cuda": backend_summary(gpu) if gpu else None,
               "cpu": backend_summary(cpu) if cpu else None,
               "cuda_host": backend_summary(host) if host else None}
    if paired:
        dec = [cpu[r]["seconds_per_token"] / gpu[r]["seconds_per_token"] for r in paired]
        pre = [prefill_tps(gpu[r]) / prefill_tps(cpu[r]) for r in paired
               if prefill_tps(gpu[r]) and prefill_tps(cpu[r])]
        summary["speedup_gpu_over_cpu"] = {"decode": spread(dec), "prefill": spread(pre)}
        summary["ids_equal"] = [gpu[r]["ids"] == cpu[r]["ids"] for r in paired]
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)

    md = ["# GPU backend against the CPU path (scripts/bench_gpu.sh)", "",
          "Config: %s. Rounds: %d GPU, %d CPU (min / median / max over rounds)." %
          (json.dumps(config), len(gpu), len(cpu)), ""]
    md += ["| figure | GPU | CPU |", "|---|---|---|"]
    g, c = summary["cuda"] or {}, summary["cpu"] or {}
    md.append("| decode ms/token | %s | %s |" % (fmt(g.get("decode_seconds_per_token"), 1e3, 2),
                                                 fmt(c.get("decode_seconds_per_token"), 1e3, 1)))
    md.append("| prefill tokens/s (%s-token prompt) | %s | %s |" % (
        config.get("prompt_tokens", "?"), fmt(g.get("prefill_tokens_per_second"), 1, 1),
        fmt(c.get("prefill_tokens_per_second"), 1, 2)))
    gg = g.get("gpu")
    if gg:
        md += ["", "| GPU figure | min / median / max |", "|---|---|",
               "| ratio s/token / floor (bar 1.2) | %s |" % fmt(gg["ratio"], 1, 3),
               "| floor ms/token = read floor + operations | %s |" % fmt(gg["floor_seconds_per_token"], 1e3, 3),
               "| read floor ms/token (bytes / read rate) | %s |" % fmt(gg["read_floor_seconds_per_token"], 1e3, 3),
               "| operations ms/token (launches, copies, waits at their costs) | %s |" % fmt(gg["op_overhead_seconds_per_token"], 1e3, 3),
               "| device time ms/token (events around each pass) | %s |" % fmt(gg["device_seconds_per_token"], 1e3, 3),
               "| device time / wall time | %s |" % fmt(gg["device_share_of_wall"], 1, 3),
               "| GB touched per token | %s |" % fmt(gg["bytes_per_token"]["total"], 1e-9, 3)]
        for k in ("spine", "experts", "lm_head", "kda_state", "attention_cache", "embedding"):
            md.append("| - %s GB | %s |" % (k, fmt(gg["bytes_per_token"][k], 1e-9, 4)))
        md += ["| experts per token | %s |" % fmt(gg["experts_per_token"], 1, 1),
               "| launches / copies / host waits per token | %s; %s; %s |" % (
                   fmt(gg["launches_per_token"], 1, 0), fmt(gg["copies_per_token"], 1, 0),
                   fmt(gg["syncs_per_token"], 1, 0)),
               "| device read GB/s (pure read, same run) | %s |" % fmt(gg["read_gbps"], 1, 0),
               "| us per launch / copy / host wait | %s; %s; %s |" % (
                   fmt(gg["launch_seconds"], 1e6, 2), fmt(gg["copy_seconds"], 1e6, 2),
                   fmt(gg["sync_seconds"], 1e6, 2)),
               "| prefill: ratio prompt s / floor | %s |" % fmt(gg["prompt_ratio"], 1, 3),
               "| prefill: GB touched | %s |" % fmt(gg["prompt_bytes"], 1e-9, 1),
               "| prefill: device time / wall time | %s |" % fmt(gg["prompt_device_share_of_wall"], 1, 3)]
    h = (summary["cuda_host"] or {}).get("gpu")
    if h:
        hp = sorted(set(host) & set(cpu))
        md += ["", "Experts from host RAM (the GPU with --vram-expert-slots %s; %d rounds):" % (
            host[min(host)].get("vram_expert_slots", "?"), len(host)), "",
               "| figure | min / median / max |", "|---|---|",
               "| decode ms/token | %s |" % fmt(summary["cuda_host"]["decode_seconds_per_token"], 1e3, 2),
               "| expert misses per token (VRAM cache) | %s |" % fmt(h["expert_misses_per_token"], 1, 1),
               "| - from the RAM tier / from disk | %s; %s |" % (
                   fmt(h["expert_ram_hits_per_token"], 1, 1), fmt(h["expert_disk_reads_per_token"], 1, 1)),
               "| expert copies GB/s while busy (CUDA events) | %s |" % fmt(h["expert_h2d_busy_gbps"], 1, 1),
               "| - over the pinned copy rate (bar 0.85) | %s |" % fmt(h["expert_h2d_busy_share_of_pinned"], 1, 3),
               "| GB copied in per token (streamed spine + misses) | %s |" % fmt(h["h2d_bytes_per_token"], 1e-9, 3),
               "| host-to-device GB/s over the wall time | %s |" % fmt(h["h2d_gbps_over_wall"], 1, 1),
               "| pinned copy GB/s (expert-sized, same run) | %s |" % fmt(h["pinned_h2d_gbps"], 1, 1),
               "| - over the pinned copy rate (wall) | %s |" % fmt(h["h2d_share_of_pinned"], 1, 3),
               "| speed-up over the CPU (paired rounds) | %s |" % fmt(spread(
                   [cpu[r]["seconds_per_token"] / host[r]["seconds_per_token"] for r in hp]), 1, 2)]
    if "speedup_gpu_over_cpu" in summary:
        sp = summary["speedup_gpu_over_cpu"]
        md += ["", "Speed-up GPU over CPU (per round, paired): decode %s, prefill %s. Greedy ids equal "
               "per round: %s (CPU and GPU logits differ by fp32 rounding, so a near tie may flip)." %
               (fmt(sp["decode"], 1, 1), fmt(sp["prefill"], 1, 1), summary["ids_equal"])]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
