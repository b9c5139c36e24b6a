#!/usr/bin/env bash
# Speculation's figures on a streamed spine (docs/PERFORMANCE.md, "Speculation"), one command:
# synthesizes a k3-scale checkpoint (5 layers, 32 experts unless LAYERS/EXPERTS say otherwise),
# then, inside a memory cgroup of MEM_LIMIT (most of the spine stays on disk) with the page cache
# dropped before every run, the PARTS (default "verify fail repeat"):
#   verify: bench verify --widths VERIFY_WIDTHS: a verify pass's cost against a 1-row pass and its
#           own I/O floor, full acceptance (the model's own continuation as the drafts);
#   fail:   bench decode --speculate off vs auto on FAIL_IDS (drafts proposed and failing: the
#           controller's back-off), interleaved over ROUNDS rounds (off first in odd rounds);
#   repeat: on REPEAT_IDS (a prompt whose greedy continuation repeats), through
#           tools/peers/bench_peers.sh: deltafin off and auto (tokens per pass, speed-up) and, with
#           PEERS set, kimi-k3-in-c --spec 8 --incremental on its packed trunk at the same memory,
#           interleaved over ROUNDS rounds, ids compared.
# FAIL_IDS and REPEAT_IDS come from scripts/find_spec_prompts.sh on the same checkpoint. With
# PLANT (cycle lengths, e.g. 4,64) the checkpoint is made with `synth --plant-cycles PLANT
# --no-drafters` (docs/SYNTH.md; its own folder) and, unless given, they are the planted prompts that script
# prints (REPEAT_IDS: the short cycle, or the long one with PLANT_REPEAT=long; FAIL_IDS: drafts
# proposed and failing at every step for up to L - 1 ids, so FAIL_TOKENS stays below L).
# Results: OUT/summary.json (every figure the docs need), OUT/log.txt, OUT/raw.tar.gz (every
# run's output). Needs root (cgroup v2 or v1's memory controller, drop_caches).
# usage: scripts/bench_speculation.sh DELTAFIN WORKDIR OUTDIR
#   env: LAYERS (5), EXPERTS (32), MEM_LIMIT (9G), ROUNDS (2), FIRST_ROUND (1: a later call with
#        the same OUT adds its rounds to the summary), PARTS, PEERS (unset: no k3c),
#        PLANT (unset: plain random weights), PLANT_REPEAT (short), READ_LIMIT_MBPS (unset: the
#        disk's own rate; set: every run reads at that steady rate, scripts/lib/memory_cgroup.sh),
#        CEILING_GB (0.5: bench decode's ceiling probe per depth; under READ_LIMIT_MBPS make it
#        several GB, so that blk-throttle's burst after an idle gap does not inflate it),
#        VERIFY_WIDTHS (1,4), VERIFY_TOKENS (9), REPS (2), FAIL_TOKENS (12), REPEAT_TOKENS (16),
#        S_PER_TOKEN (2.2) and OVERHEAD_S (25, load + ceiling + prompt per run) for the estimate
set -euo pipefail
deltafin=$(realpath "$1")
work=$2
out=$3
here=$(dirname "$(realpath "$0")")
layers=${LAYERS:-5}
experts=${EXPERTS:-32}
mem=${MEM_LIMIT:-9G}
rounds=${ROUNDS:-2}
first_round=${FIRST_ROUND:-1}  # a later call can add rounds to the same OUT
last_round=$((first_round + rounds - 1))
parts=${PARTS:-"verify fail repeat"}
widths=${VERIFY_WIDTHS:-1,4}
vtokens=${VERIFY_TOKENS:-9}
reps=${REPS:-2}
ftokens=${FAIL_TOKENS:-12}
rtokens=${REPEAT_TOKENS:-16}
spt=${S_PER_TOKEN:-2.2}
ovh=${OVERHEAD_S:-25}
plant=${PLANT:-}
raw=$out/raw
mkdir -p "$work" "$raw"
exec 2> >(tee -a "$out/log.txt" >&2)
for p in $parts; do
  case $p in
    fail) [[ -n ${FAIL_IDS:-}$plant ]] || { echo "PARTS has fail: set FAIL_IDS or PLANT" >&2; exit 2; } ;;
    repeat) [[ -n ${REPEAT_IDS:-}$plant ]] || { echo "PARTS has repeat: set REPEAT_IDS or PLANT" >&2; exit 2; } ;;
    verify) ;;
    *) echo "unknown part $p" >&2; exit 2 ;;
  esac
done

# The estimate: a plain pass per token, verify's passes (each width runs its tokens REPS times),
# k3c at about 1.5x deltafin's plain step. Printed first so a run that cannot fit is not started.
python3 - "$parts" "$spt" "$ovh" "$rounds" "$widths" "$vtokens" "$reps" "$ftokens" "$rtokens" \
  "${PEERS:+1}" <<'EOF' >&2
import sys
parts, spt, ovh, rounds = sys.argv[1].split(), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
widths, vt, reps, ft, rt = sys.argv[5].split(","), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
peers = sys.argv[10] == "1"
t = {}
if "verify" in parts:  # a plain run for the drafts, then every width's passes
    t["verify"] = ovh + vt * spt + reps * sum(vt / int(w) * spt * (1 + 0.3 * (int(w) > 1)) for w in widths)
if "fail" in parts:
    t["fail"] = rounds * 2 * (ovh + ft * spt)
if "repeat" in parts:
    t["repeat"] = rounds * ((ovh + rt * spt) + (ovh + rt * spt / 2) + (peers and ovh + rt * spt * 1.5 or 0))
print("bench_speculation: estimate " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in t.items())
      + f"; total {sum(t.values()) / 60:.1f} min at {spt} s/token, {ovh} s per run")
EOF

model=$work/k3s-$layers-$experts
plant_flags=()
if [[ -n $plant ]]; then
  # No drafter folders: the figures are the n-gram drafter's, and with a Qwen3 folder present
  # auto would draft raw ids with it instead (and the memory plan would make room for it).
  model=$model-plant-${plant//,/-}
  plant_flags=(--plant-cycles "$plant" --no-drafters)
fi
[[ -f $model/model.safetensors.index.json ]] ||
  "$deltafin" synth --out "$model" --preset k3-scale --layers "$layers" --experts "$experts" \
    "${plant_flags[@]}" >"$raw/synth.log" 2>&1
du -sh "$model" >"$out/model_size.txt"
if [[ -n $plant ]]; then
  CHECK=0 "$here/find_spec_prompts.sh" "$deltafin" "$model" "$raw/prompts" >"$raw/prompts.txt"
  pick() { sed -n "s/^$1=\([0-9,]*\).*/\1/p" "$raw/prompts.txt"; }
  [[ ${PLANT_REPEAT:-short} == long ]] && : "${REPEAT_IDS:=$(pick REPEAT_LONG_IDS)}"
  : "${REPEAT_IDS:=$(pick REPEAT_IDS)}" "${FAIL_IDS:=$(pick FAIL_IDS)}"
  cat "$raw/prompts.txt" >&2
fi

# shellcheck source=lib/memory_cgroup.sh
source "$here/lib/memory_cgroup.sh"
make_memory_cgroup deltafin-spec "$mem"
[[ -n ${READ_LIMIT_MBPS:-} ]] && limit_read_rate "$model" "$READ_LIMIT_MBPS"

for p in $parts; do
  case $p in
    verify)
      capped verify "$deltafin" bench verify --device cpu --model "$model" --widths "$widths" \
        --tokens "$vtokens" --reps "$reps" --memory-budget "$mem" --json ;;
    fail)
      for r in $(seq "$first_round" "$last_round"); do
        # The order alternates by round, so that a disk whose rate drifts one way over the runs
        # does not always favour the same mode.
        modes="off auto"
        ((r % 2 == 0)) && modes="auto off"
        for mode in $modes; do
          capped "fail_${mode}_r$r" "$deltafin" bench decode --device cpu --model "$model" \
            --ids "$FAIL_IDS" --tokens "$ftokens" --memory-budget "$mem" --speculate "$mode" \
            --ceiling-reps 1 --ceiling-gb "${CEILING_GB:-0.5}" --json
        done
      done ;;
    repeat)
      # bench_peers makes its own cgroup of the same size and drops the cache before each run.
      engines="df_off df_spec"
      [[ -n ${PEERS:-} ]] && engines="$engines k3c_spec"
      echo "[$(date +%T)] repeat: bench_peers.sh ENGINES=\"$engines\"" >&2
      SPEC_IDS=$REPEAT_IDS ENGINES=$engines MEM_LIMIT=$mem \
        "$here/../tools/peers/bench_peers.sh" "${PEERS:-/nonexistent}" "$model" "$deltafin" \
        "$raw/repeat" "$rounds" "$rtokens" >"$raw/repeat.log" 2>&1 ||
        echo "  bench_peers exited $? (see $raw/repeat.log)" >&2
      cat "$raw/repeat.log" >&2 ;;
  esac
done

# One summary of everything: the verify JSON whole, per decode run its key figures, the peers'
# summary, and the off/auto ratios per round.
python3 - "$raw" "$last_round" "$out/summary.json" "${FAIL_IDS:-}" "${REPEAT_IDS:-}" "$plant" <<'EOF' >&2
import json, os, statistics, sys
raw, rounds, dest = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = {"fail_ids": sys.argv[4], "repeat_ids": sys.argv[5], "plant_cycles": sys.argv[6]}
def load(p):
    try:
        return json.loads(open(p).read().strip().splitlines()[-1])
    except Exception as ex:
        return {"error": f"{os.path.basename(p)}: {ex}"}
if os.path.exists(os.path.join(raw, "verify.json")):
    s["verify"] = load(os.path.join(raw, "verify.json"))
keys = ("seconds_per_token", "seconds_per_token_mean", "seconds_per_token_min",
        "seconds_per_token_max", "io_floor_seconds_per_token", "ratio", "passes",
        "tokens_per_pass", "drafted", "accepted", "verify_passes", "pass_rows", "pass_accepted",
        "pass_decisions", "device_ceiling_gbps", "disk_read_bytes_per_token", "rss_peak_bytes",
        "rss_within_budget", "load_seconds", "prompt_seconds", "ids")
fail = {}
for r in range(1, rounds + 1):
    for mode in ("off", "auto"):
        p = os.path.join(raw, f"fail_{mode}_r{r}.json")
        if os.path.exists(p):
            j = load(p)
            fail.setdefault(mode, []).append({k: j.get(k) for k in keys} | {"round": r})
if fail:
    spread = lambda v: dict(min=min(v), median=statistics.median(v), max=max(v))
    for mode, runs in fail.items():
        s[f"fail_{mode}"] = runs
        v = [x["seconds_per_token_mean"] for x in runs if x["seconds_per_token_mean"]]
        if v:
            s[f"fail_{mode}_s_per_token"] = spread(v)
    if "off" in fail and "auto" in fail:
        per = [o["seconds_per_token_mean"] / a["seconds_per_token_mean"]
               for o, a in zip(fail["off"], fail["auto"])
               if o["seconds_per_token_mean"] and a["seconds_per_token_mean"]]
        s["fail_auto_speed_vs_off_per_round"] = [round(x, 3) for x in per]
        s["fail_ids_equal"] = all(o["ids"] == a["ids"] for o, a in zip(fail["off"], fail["auto"]))
p = os.path.join(raw, "repeat", "summary.json")
if os.path.exists(p):
    s["repeat"] = json.load(open(p))
json.dump(s, open(dest, "w"), indent=1)
print("bench_speculation: summary in", dest)
for k in ("fail_off_s_per_token", "fail_auto_s_per_token", "fail_auto_speed_vs_off_per_round",
          "fail_ids_equal"):
    if k in s:
        print(" ", k, s[k])
EOF
tar -czf "$out/raw.tar.gz" -C "$out" raw && rm -rf "$raw"
echo "bench_speculation: figures in $out (summary.json, log.txt, raw.tar.gz)" >&2
