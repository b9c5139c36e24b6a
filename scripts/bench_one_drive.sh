#!/usr/bin/env bash
# One drive, spine streamed (issue #19's last bar; docs/DRIVES.md "On the device host, three
# rounds"), in one command, as root on a cgroup v2 host:
#   1. a k3-scale checkpoint on the disk under WORK (`synth --preset k3-scale --layers LAYERS
#      --experts EXPERTS --no-drafters`, skipped when it is there);
#   2. a memory cgroup of MEM_LIMIT (the engine's --memory-budget too), so most of the spine
#      streams from the disk; with READ_LIMIT_MBPS set, the cgroup's reads from that disk are
#      capped with io.max below the disk's slowest rate, so a drifting disk reads at one rate;
#   3. RUNS runs of `bench decode --device DEVICE --speculate off --tokens TOKENS --json`, page
#      cache dropped before each, the ceiling probed before and after the decode with CEILING_GB
#      per depth (long enough to outlast blk-throttle's burst allowance). DEVICE=cuda is the GPU's
#      disk tier: `--experts stream`, an expert cache of VRAM_SLOTS slots in VRAM and a RAM tier
#      of RAM_SLOTS (both small, so most of a token's experts are read from the disk);
#   4. OUT/summary.md: per run s/token, the I/O floor, s/token over it (bar 1.10) and the reads
#      while busy over the ceiling (bar 0.93), then min/median/max; OUT/run-N.json and .err.
# usage: scripts/bench_one_drive.sh --out DIR [--deltafin PATH] [--work DIR]
# env (defaults): LAYERS [5] EXPERTS [64] MEM_LIMIT [9G] READ_LIMIT_MBPS [unset] RUNS [3]
#   TOKENS [12] CEILING_GB [6] DEVICE [cpu] VRAM_SLOTS [16] RAM_SLOTS [32]
set -euo pipefail

deltafin=build/release/deltafin
out=
work=/root/work
while [[ $# -gt 0 ]]; do
  case $1 in
    --deltafin) deltafin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h|--help) sed -n 2,18p "$0"; exit 0 ;;
    *) echo "bench_one_drive: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $out ]] || { echo "bench_one_drive: --out DIR is required" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "bench_one_drive: needs root (cgroups, drop_caches)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $deltafin == /* ]] || deltafin=$PWD/$deltafin
layers=${LAYERS:-5} experts=${EXPERTS:-64} mem=${MEM_LIMIT:-9G}
runs=${RUNS:-3} tokens=${TOKENS:-12} ceiling_gb=${CEILING_GB:-6} device=${DEVICE:-cpu}
device_args=(--device "$device")
[[ $device == cuda* ]] &&
  device_args+=(--experts stream --vram-expert-slots "${VRAM_SLOTS:-16}"
    --expert-slots "${RAM_SLOTS:-32}")
mkdir -p "$out" "$work"
# shellcheck disable=SC2034  # capped() (memory_cgroup.sh) writes its runs there
raw=$out
model=$work/k3s-$layers-$experts
[[ -f $model/model.safetensors.index.json ]] ||
  "$deltafin" synth --out "$model" --preset k3-scale --layers "$layers" --experts "$experts" \
    --no-drafters >"$out/synth.log" 2>&1

# shellcheck source=lib/memory_cgroup.sh
source "$here/lib/memory_cgroup.sh"
make_memory_cgroup deltafin-one-drive "$mem"
[[ -n ${READ_LIMIT_MBPS:-} ]] && limit_read_rate "$model" "$READ_LIMIT_MBPS"
for r in $(seq 1 "$runs"); do
  capped "run-$r" "$deltafin" bench decode "${device_args[@]}" --model "$model" --tokens "$tokens" \
    --memory-budget "$mem" --speculate off --ceiling-reps 1 --ceiling-gb "$ceiling_gb" --json
done

python3 - "$out" "${READ_LIMIT_MBPS:-none}" "$mem" "$device" <<'PY'
import glob, json, os, sys
out, cap, mem, device = sys.argv[1:5]
rows = []
for f in sorted(glob.glob(os.path.join(out, "run-*.json"))):
    try:
        j = json.load(open(f))
    except (OSError, ValueError):
        continue
    busy = j["achieved_read_gbps"] / j["device_ceiling_gbps"] if j["device_ceiling_gbps"] else 0
    rows.append((os.path.basename(f), j["seconds_per_token"], j["io_floor_seconds_per_token"],
                 j["ratio"], j["achieved_read_gbps"], j["device_ceiling_gbps"], busy,
                 j["needed_bytes_per_token"] / 1e9))
def mmm(i):
    v = sorted(r[i] for r in rows)
    return f"{v[0]:.3f} / {v[len(v) // 2]:.3f} / {v[-1]:.3f}" if v else "-"
with open(os.path.join(out, "summary.md"), "w") as s:
    what = "spine streamed" if device == "cpu" else f"{device}, experts from the disk"
    s.write(f"# One drive, {what}: {mem} cgroup, reads capped at {cap} MB/s\n\n")
    s.write("| run | s/token | I/O floor | over the floor | reads while busy GB/s | ceiling GB/s | busy / ceiling | GB/token |\n")
    s.write("|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        s.write("| " + " | ".join([r[0]] + [f"{x:.3f}" for x in r[1:]]) + " |\n")
    s.write(f"\nmin / median / max: s/token {mmm(1)}; over the floor **{mmm(3)}** (bar 1.10); "
            f"reads while busy over the ceiling **{mmm(6)}** (bar 0.93)\n")
print(open(os.path.join(out, "summary.md")).read())
PY
