#!/usr/bin/env bash
# Emulated drives for the several-drive benchmarks (../shared/spec/multidrive.md, part B):
# tmpfs-backed loop devices with O_DIRECT, ext4 on each, each throttled to its own read rate in a
# cgroup this script's benchmark runs in (cgroup v2 io.max, or cgroup v1 blkio on machines that
# only have that), then `deltafin bench-io --dirs` for
#   - 4 drives of equal rate (default 400 MB/s each), and
#   - drives of 200, 400 and 800 MB/s,
# least expected completion against round robin in the same run, interleaved, min/median/max.
# --ladder MBPS adds a decode ladder: the synth demo placed on 1, 2, 3 and 4 drives of MBPS each
# (its experts are 26 KB, so a low rate makes it I/O bound), `bench decode` on each rung, rungs
# interleaved: tokens/s as a share of the four-drive rate, and s/token over the I/O floor
# (needed bytes / the sum of the ceilings).
# Needs root, losetup, mkfs.ext4 and room in /dev/shm; says what is missing and exits 2 otherwise.
#
# usage: scripts/bench_drives.sh [--deltafin PATH] [--size-mb 600] [--reps 3] [--reads 96]
#                                [--equal-mbps 400] [--out DIR] [--keep] [--ladder MBPS]
#                                [--tokens 24] [--no-bench-io]
set -euo pipefail
deltafin=build/release/deltafin
size_mb=600
reps=3
reads=96
equal=400
out=
keep=0
ladder=0
bench_io=1
tokens=24
while [[ $# -gt 0 ]]; do
  case $1 in
    --deltafin) deltafin=$2; shift 2 ;;
    --size-mb) size_mb=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --reads) reads=$2; shift 2 ;;
    --equal-mbps) equal=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --ladder) ladder=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --no-bench-io) bench_io=0; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "bench_drives: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

missing=()
[[ $(id -u) == 0 ]] || missing+=("root (loop devices, mounts and cgroup limits need it)")
command -v losetup >/dev/null || missing+=("losetup (util-linux)")
command -v mkfs.ext4 >/dev/null || missing+=("mkfs.ext4 (e2fsprogs)")
[[ -x $deltafin ]] || missing+=("the deltafin binary at $deltafin (--deltafin PATH)")
cgmode=
if [[ $(stat -fc %T /sys/fs/cgroup 2>/dev/null) == cgroup2fs ]]; then
  if grep -qw io /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cgmode=v2
  else
    missing+=("the cgroup v2 io controller (not in /sys/fs/cgroup/cgroup.controllers)")
  fi
elif [[ -e /sys/fs/cgroup/blkio/blkio.throttle.read_bps_device ]]; then
  cgmode=v1
else
  missing+=("a cgroup read throttle: cgroup v2 with the io controller (io.max), or cgroup v1 blkio")
fi
need_kb=$(( (size_mb * 4 + 64 * 4) * 1024 ))
free_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
[[ -n $free_kb && $free_kb -ge $need_kb ]] ||
  missing+=("$((need_kb / 1024)) MB free in /dev/shm for 4 drive images (have $(( ${free_kb:-0} / 1024 )) MB; --size-mb)")
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "bench_drives: cannot build the drive emulation here; missing:" >&2
  for m in "${missing[@]}"; do echo "  - $m" >&2; done
  exit 2
fi

work=/dev/shm/deltafin-drives.$$
export DELTAFIN_DRIVE_CACHE=$work/drives.tsv  # the emulated drives are not worth remembering
mnt=$work/mnt
mkdir -p "$mnt"
loops=()
if [[ $cgmode == v2 ]]; then
  cg=/sys/fs/cgroup/deltafin-drives.$$
  mkdir "$cg"
  grep -qw io /sys/fs/cgroup/cgroup.subtree_control || echo +io >/sys/fs/cgroup/cgroup.subtree_control
else
  cg=/sys/fs/cgroup/blkio/deltafin-drives.$$
  mkdir "$cg"
fi
cleanup() {
  set +e
  for i in "${!loops[@]}"; do
    umount "$mnt/d$i" 2>/dev/null
    losetup -d "${loops[$i]}" 2>/dev/null
  done
  rmdir "$cg" 2>/dev/null
  [[ $keep == 1 ]] || rm -rf "$work"
}
trap cleanup EXIT

for i in 0 1 2 3; do
  truncate -s "$((size_mb + 64))M" "$work/d$i.img"
  loops[$i]=$(losetup --direct-io=on --show -f "$work/d$i.img")
  mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "${loops[$i]}"
  mkdir -p "$mnt/d$i"
  mount -o noatime "${loops[$i]}" "$mnt/d$i"
done

# limit I MBPS: the read rate of emulated drive I (0: unlimited).
limit() {
  local dev bps=$(( $2 * 1000000 ))
  dev=$(cat "/sys/block/$(basename "${loops[$1]}")/dev")
  if [[ $cgmode == v2 ]]; then
    [[ $2 == 0 ]] && echo "$dev rbps=max" >"$cg/io.max" || echo "$dev rbps=$bps" >"$cg/io.max"
  else
    echo "$dev $bps" >"$cg/blkio.throttle.read_bps_device"
  fi
}

# run LABEL DRIVE... : bench-io --dirs over the given drives, in the throttled cgroup. The test
# files are written outside the limit (writes are not throttled anyway) and the ceilings
# re-measured, since the same loop device carries another rate in another case.
run() {
  local label=$1 dirs=
  shift
  for i in "$@"; do dirs+="${dirs:+,}$mnt/d$i"; done
  local json=${out:-$work}/bench_drives.$label.json
  sh -c "echo \$\$ >'$cg/cgroup.procs'; exec '$deltafin' bench-io --dirs '$dirs' \
    --size-gb $(awk "BEGIN {print $size_mb / 1000}") --reps $reps --reads $reads --remeasure --json" \
    >"$json"
  /usr/bin/python3 - "$label" "$json" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
s = r["sum_ceiling_gbps"]
print(f"{label}: drives " + ", ".join(f"{d['device']} {d['ceiling_gbps']*1e3:.0f} MB/s" for d in r["drives"])
      + f"; sum of ceilings {s*1e3:.0f} MB/s")
for p in ("least_eta", "round_robin"):
    q = r[p]
    per = "; ".join(f"{d['device']} {d['achieved_gbps']*1e3:.0f} MB/s ({100*d['share_of_ceiling']:.0f}%), "
                    f"{d['reads']} reads" for d in q["per_drive"])
    print(f"  {p:11s} min/median/max {q['min_gbps']*1e3:.0f}/{q['median_gbps']*1e3:.0f}/"
          f"{q['max_gbps']*1e3:.0f} MB/s = {q['share_of_sum_of_ceilings']:.3f} of the sum  [{per}]")
print(f"  least_eta / round_robin (medians): {r['least_eta_over_round_robin']:.2f}")
PY
  echo "  (JSON: $json)"
}

echo "bench_drives: cgroup $cgmode, ${size_mb} MB per drive, $reps repetitions of $reads reads"
if [[ $bench_io == 1 ]]; then
  for i in 0 1 2 3; do limit "$i" "$equal"; done
  run "4x${equal}" 0 1 2 3
  limit 0 200
  limit 1 400
  limit 2 800
  run "200-400-800" 0 1 2
fi

[[ $ladder == 0 ]] && exit 0

# The decode ladder.
in_cg() { sh -c "echo \$\$ >'$cg/cgroup.procs'; exec \"\$@\"" sh "$@"; }
for i in 0 1 2 3; do limit "$i" "$ladder"; done
"$deltafin" synth --out "$work/demo" --preset demo >/dev/null 2>&1
# The ceilings at this rate, measured once inside the limits and cached for place and the engine.
in_cg "$deltafin" bench-io --dirs "$mnt/d0,$mnt/d1,$mnt/d2,$mnt/d3" --size-gb 0.1 --reads 8 \
  --reps 1 --remeasure --json >/dev/null 2>&1
for n in 1 2 3 4; do
  cp -r "$work/demo" "$work/demo$n"
  drives=
  for ((i = 0; i < n; ++i)); do drives+="${drives:+,}$mnt/d$i"; done
  in_cg "$deltafin" place --model "$work/demo$n" --drives "$drives" >/dev/null 2>"$work/place$n.err" ||
    { cat "$work/place$n.err" >&2; exit 1; }
done
for ((r = 0; r < reps; ++r)); do
  for n in 1 2 3 4; do
    in_cg "$deltafin" bench decode --model "$work/demo$n" --tokens $tokens --prompt-tokens 4 \
      --expert-slots 16 --ceiling-reps 1 --json 2>/dev/null | tail -1 >"${out:-$work}/bench_drives.ladder.$n.$r.json"
  done
done
/usr/bin/python3 - "${out:-$work}" "$reps" "$ladder" <<'PY'
import json, statistics, sys
d, reps, mbps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = {n: [json.load(open(f"{d}/bench_drives.ladder.{n}.{r}.json")) for r in range(reps)] for n in (1, 2, 3, 4)}
spt = {n: [x["seconds_per_token"] for x in runs[n]] for n in runs}
four = statistics.median(spt[4])
print(f"ladder: the demo on 1-4 drives of {mbps} MB/s, {reps} interleaved runs of {runs[1][0]['tokens']} tokens, 16 expert slots")
for n in (1, 2, 3, 4):
    s = sorted(spt[n])
    floors = [x["io_floor_sum_of_ceilings_seconds_per_token"] for x in runs[n]]
    ratio = [a / b for a, b in zip(spt[n], floors) if b > 0]
    shares = "; ".join(f"{x['device']} {x['bytes'] // 1000} kB {100 * x['share_of_ceiling']:.0f}%" for x in runs[n][0]["drives"] if x["bytes"])
    print(f"  {n} drive(s): s/token min/median/max {s[0]:.4f}/{statistics.median(s):.4f}/{s[-1]:.4f}, "
          f"share of the 4-drive rate {four / statistics.median(s):.2f}, "
          f"over the I/O floor {statistics.median(ratio) if ratio else 0:.2f}  [{shares}]")
PY
