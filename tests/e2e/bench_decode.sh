#!/usr/bin/env bash
# `deltafin bench decode --json` on the synth demo with experts streamed: one JSON object with the
# fields issue #4 names, internally consistent (ratio = s/token / I/O floor, the ceiling used is the
# highest of the two measurements and the decode's own read rate, RSS within the budget), and the
# same ids as `generate`, with experts read whole and in 4 KiB pieces (the latter with the layers on
# one thread).
set -euo pipefail
deltafin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$deltafin" synth --out "$work/demo" --preset demo >/dev/null 2>"$work/synth.err" ||
  { cat "$work/synth.err" >&2; exit 1; }
expected=$("$deltafin" generate --model "$work/demo" --ids 100,137,174 --max-new 6 --ignore-eos 2>/dev/null)
for piece in 0 4K; do
threads=auto
[[ $piece == 4K ]] && threads=1
"$deltafin" bench decode --model "$work/demo" --tokens 5 --prompt-tokens 3 --json \
  --experts stream --expert-slots 8 --read-depth 2 --read-piece $piece --layer-threads $threads \
  >"$work/out.json" 2>"$work/err" ||
  { tail -5 "$work/err" >&2; echo "bench_decode: FAIL: bench decode exited non-zero" >&2; exit 1; }

/usr/bin/python3 - "$work/out.json" "$expected" "$piece" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
piece = {"0": 0, "4K": 4096}[sys.argv[3]]
bad = []
for key in ["tokens", "seconds_per_token", "disk_read_bytes_per_token", "achieved_read_gbps",
            "device_ceiling_gbps", "device_ceiling_before_gbps", "device_ceiling_after_gbps",
            "io_floor_seconds_per_token", "ratio", "rss_peak_bytes", "compute_floor_seconds_per_token",
            "roofline_ratio", "budget_bytes", "disk_idle_seconds_per_token", "layer_threads",
            "threads", "ids", "prompt_seconds", "prompt_tokens_per_second", "gpu",
            "gpu_expert_math"]:
    if key not in r: bad.append("missing " + key)
if not bad:
    if r["tokens"] != 5: bad.append("tokens %s, expected 5" % r["tokens"])
    if r["experts"] != "stream": bad.append("experts %s, expected stream" % r["experts"])
    if r["read_depth"] != 2: bad.append("read_depth %s, expected 2" % r["read_depth"])
    if r["read_piece_bytes"] != piece:
        bad.append("read_piece_bytes %s, expected %s" % (r["read_piece_bytes"], piece))
    if not r["seconds_per_token_min"] <= r["seconds_per_token"] <= r["seconds_per_token_max"]:
        bad.append("median outside [min, max]")
    if r["device_ceiling_gbps"] != max(r["device_ceiling_before_gbps"], r["device_ceiling_after_gbps"],
                                       r["achieved_read_gbps"]):
        bad.append("ceiling is not the highest of the measurements and the decode's read rate")
    if r["device_ceiling_gbps"] <= 0: bad.append("no ceiling measured")
    floor, spt = r["io_floor_seconds_per_token"], r["seconds_per_token"]
    if floor > 0 and abs(r["ratio"] - spt / floor) > 1e-3 * r["ratio"]:
        bad.append("ratio %g != %g / %g" % (r["ratio"], spt, floor))
    if r["disk_read_bytes_per_token"] <= 0: bad.append("no bytes read with 8 expert slots")
    # The CPU backend: no GPU figures; the prompt's rate is its tokens over its time.
    if r["gpu"] is not None: bad.append("a gpu object on the CPU backend")
    if r["gpu_expert_math"] is not None: bad.append("a GPU expert math on the CPU backend")
    if abs(r["prompt_tokens_per_second"] * r["prompt_seconds"] - r["prompt_tokens"]) > 1e-3 * r["prompt_tokens"]:
        bad.append("prompt_tokens_per_second %g != %d / %g" % (r["prompt_tokens_per_second"],
                                                              r["prompt_tokens"], r["prompt_seconds"]))
    # Idle is a token's wall time less the disk's busy time. The lm_head and the layers before the
    # first route run with no read in flight, so a disk counted busy for the whole token is a bug.
    if not r["disk_idle_seconds_per_token"] > 0:
        bad.append("disk idle %g, expected > 0" % r["disk_idle_seconds_per_token"])
    if not r["rss_within_budget"] or r["rss_peak_bytes"] > r["budget_bytes"]: bad.append("RSS over budget")
    if piece and r["layer_threads"] != 1:
        bad.append("layer_threads %s with --layer-threads 1" % r["layer_threads"])
    if not 1 <= r["layer_threads"] <= r["threads"]:
        bad.append("layer_threads %s outside 1..%s" % (r["layer_threads"], r["threads"]))
    want = json.loads(sys.argv[2])
    if r["ids"] != want: bad.append("ids %s differ from generate's %s" % (r["ids"], want))
if bad:
    print("bench_decode: FAIL: " + "; ".join(bad), file=sys.stderr)
    sys.exit(1)
print("bench_decode: ok, pieces %s (%.4f s/token, ratio %.2f)" % (sys.argv[3], r["seconds_per_token"], r["ratio"]))
PY
done

# A read depth out of range is refused before anything loads, naming the flag.
# The whole process, the GEMV measurement after the decode included, stays within a small budget:
# its 2 GiB arena used to take the process past it (killed under a memory cgroup of that size).
/usr/bin/python3 - "$deltafin" "$work/demo" <<'PY'
import resource, subprocess, sys
budget = 600 << 20
p = subprocess.run([sys.argv[1], "bench", "decode", "--model", sys.argv[2], "--tokens", "2",
                    "--json", "--experts", "stream", "--memory-budget", str(budget)],
                   capture_output=True, text=True)
if p.returncode != 0:
    sys.exit("bench_decode: FAIL: under a 600 MiB budget: " + p.stderr[-500:])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
if peak > budget:
    sys.exit("bench_decode: FAIL: peak RSS %d MiB over the 600 MiB budget" % (peak >> 20))
if "arena cut to the budget" not in p.stderr:
    sys.exit("bench_decode: FAIL: the GEMV arena was not cut to the budget")
print("bench_decode: ok, peak RSS %d MiB within a 600 MiB budget" % (peak >> 20))
PY
if "$deltafin" bench decode --model "$work/demo" --tokens 1 --layer-threads 0 >/dev/null 2>"$work/err"; then
  echo "bench_decode: FAIL: --layer-threads 0 was accepted" >&2; exit 1
fi
grep -q -- "--layer-threads must be auto, all or 1..4096" "$work/err" ||
  { echo "bench_decode: FAIL: --layer-threads 0 refused without naming the flag: $(cat "$work/err")" >&2; exit 1; }
if "$deltafin" bench decode --model "$work/demo" --tokens 1 --read-depth 257 >/dev/null 2>"$work/err"; then
  echo "bench_decode: FAIL: --read-depth 257 was accepted" >&2; exit 1
fi
grep -q -- "--read-depth must be" "$work/err" ||
  { echo "bench_decode: FAIL: unexpected refusal: $(cat "$work/err")" >&2; exit 1; }
echo "bench_decode: --read-depth 257 refused"
if "$deltafin" bench decode --model "$work/demo" --tokens 1 --read-piece 5000 >/dev/null 2>"$work/err"; then
  echo "bench_decode: FAIL: --read-piece 5000 was accepted" >&2; exit 1
fi
grep -q -- "--read-piece must be" "$work/err" ||
  { echo "bench_decode: FAIL: unexpected refusal: $(cat "$work/err")" >&2; exit 1; }
echo "bench_decode: --read-piece 5000 refused"
