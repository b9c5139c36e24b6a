#!/usr/bin/env bash
# Emulated drives for the several-drive benchmarks (../shared/spec/multidrive.md, part B), in one
# command, as root:
#   1. four drives: sparse image files on a tmpfs this script mounts, each a loop device with
#      --direct-io=on, ext4 on each (mounted with discard, so deleted files give their RAM back),
#      each throttled to its own read rate in a cgroup the benchmarks run in (cgroup v2 io.max
#      rbps, or cgroup v1 blkio.throttle.read_bps_device where only v1 is there);
#   2. `bench-io --dirs`: 4 drives of EQUAL_MBPS, then 200/400/800 MB/s (MIXED_MBPS), least
#      expected completion against round robin in the same run, interleaved;
#   3. the decode ladder: a synth checkpoint (k3-scale by default; its spine stays on the tmpfs,
#      i.e. in RAM), one run recording routes (--trace-routes) with a prompt the benchmark does not
#      use, `place` striped on 1, 2, 3 and 4 drives of LADDER_MBPS each, and for comparison whole
#      on 4 drives and whole with hot replicas from that trace on 4 drives; then REPS rounds of
#      `bench decode --json` over the six placements, interleaved (order rotated each round), page
#      cache dropped before each run;
#   4. OUT/summary.json and OUT/summary.md (scripts/bench_drives_summary.py), OUT/raw.tar.gz (every
#      JSON, log, placement and the route trace) and OUT/run.log. The summary and the tarball are
#      rewritten after every stage, so a run stopped early still leaves what it had.
# The decode rounds stop early (and say so) when another round would end past BUDGET_S seconds
# from the start. Needs root, losetup, mkfs.ext4 (else mkfs.xfs or mkfs.btrfs); says what is
# missing and exits 2 otherwise, before anything is made.
#
# usage: scripts/bench_drives.sh --out DIR [--deltafin PATH] [--no-bench-io]
#                                [--ladder k3-scale|demo|none] [--keep] [--dry-estimate]
# Sizes, rates, tokens and repetitions come from the environment (defaults in brackets):
#   EQUAL_MBPS [400]  MIXED_MBPS [200,400,800]  IO_SIZE_MB [600]  IO_REPS [3]  IO_READS [96]
#   LADDER_MBPS [200; demo 50]  LAYERS [3]  EXPERTS [64]  (k3-scale: LAYERS counts the dense
#   layer 0, so LAYERS-1 MoE layers of EXPERTS experts of 17,547,264 bytes each)
#   TOKENS [8; demo 48]  PROMPT_TOKENS [1; demo 4]  REPS [3]  SLOTS [32; demo 16]
#   TRACE_TOKENS [2 x TOKENS]  TRACE_IDS [11,222,333,444,555,666,777,888]
#   REPLICA_EXTRA [0.5: replica room per drive, as a share of that drive's one-copy bytes]
#   MEM_BUDGET [32G; demo: from the machine]  BUDGET_S [450]  TMPFS_GB [80]
#   SPECULATE [off: one token a pass, so s/token is the read path's; bench decode's --speculate]
#   CGROUP2_ROOT [unset: /sys/fs/cgroup if it is cgroup2, else /sys/fs/cgroup/unified if its io
#   controller is free, else cgroup v1 blkio]
#   WORK_ROOT [/tmp: the tmpfs is mounted at WORK_ROOT/deltafin-drives.PID]
#   MODEL_ROOT [unset: the checkpoint and its six hard-linked folders live on that tmpfs; set it
#   to put them on a disk folder instead (page cache dropped before each run: each load rereads)]
set -euo pipefail

deltafin=build/release/deltafin
out=${OUT:-}
bench_io=1
ladder=k3-scale
keep=0
dry=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --deltafin) deltafin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-bench-io) bench_io=0; shift ;;
    --ladder) ladder=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --dry-estimate) dry=1; shift ;;
    -h|--help) sed -n 2,38p "$0"; exit 0 ;;
    *) echo "bench_drives: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $ladder in
  k3-scale|demo|none) ;;
  *) echo "bench_drives: --ladder must be k3-scale, demo or none, got '$ladder'" >&2; exit 2 ;;
esac
[[ -n $out ]] || { echo "bench_drives: --out DIR is required" >&2; exit 2; }
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $deltafin == /* ]] || deltafin=$PWD/$deltafin

EQUAL_MBPS=${EQUAL_MBPS:-400}
MIXED_MBPS=${MIXED_MBPS:-200,400,800}
IO_SIZE_MB=${IO_SIZE_MB:-600}
IO_REPS=${IO_REPS:-3}
IO_READS=${IO_READS:-96}
REPS=${REPS:-3}
REPLICA_EXTRA=${REPLICA_EXTRA:-0.5}
BUDGET_S=${BUDGET_S:-450}
TMPFS_GB=${TMPFS_GB:-80}
WORK_ROOT=${WORK_ROOT:-/tmp}
TRACE_IDS=${TRACE_IDS:-11,222,333,444,555,666,777,888}
SPECULATE=${SPECULATE:-off}
if [[ $ladder == demo ]]; then
  LADDER_MBPS=${LADDER_MBPS:-50}
  TOKENS=${TOKENS:-48}
  PROMPT_TOKENS=${PROMPT_TOKENS:-4}
  SLOTS=${SLOTS:-16}
  MEM_BUDGET=${MEM_BUDGET:-}
  LAYERS=${LAYERS:-13}
  EXPERTS=${EXPERTS:-64}
  top_k=8 expert_bytes=26112 moe_layers=$((LAYERS - 1))
else
  LADDER_MBPS=${LADDER_MBPS:-200}
  TOKENS=${TOKENS:-8}
  PROMPT_TOKENS=${PROMPT_TOKENS:-1}
  SLOTS=${SLOTS:-32}
  MEM_BUDGET=${MEM_BUDGET:-32G}
  LAYERS=${LAYERS:-3}
  EXPERTS=${EXPERTS:-64}
  top_k=16 expert_bytes=17547264 moe_layers=$((LAYERS - 1))
fi
((top_k > EXPERTS)) && top_k=$EXPERTS
TRACE_TOKENS=${TRACE_TOKENS:-$((2 * TOKENS))}
IFS=, read -r -a mixed <<<"$MIXED_MBPS"
n_drives=4
((${#mixed[@]} <= n_drives)) || { echo "bench_drives: MIXED_MBPS has more than 4 rates" >&2; exit 2; }

# Sizes. E: one copy of every routed expert (placed files and pieces are 4096-byte multiples on
# disk). Drive 0 holds the most: its share of the striped 1-, 2-, 3- and 4-drive placements, of the
# whole 4-drive one and of the replica placement (plus a block per piece of rounding).
placed=$(((expert_bytes + 4095) / 4096 * 4096))
E=$((moe_layers * EXPERTS * placed))
rep_budget=$(awk -v e="$E" -v x="$REPLICA_EXTRA" -v p="$placed" \
  'BEGIN {printf "%.0f", int(e / 4 * (1 + x) / p + 1) * p}')
if [[ $ladder == none ]]; then
  ladder_bytes=0
else
  ladder_bytes=$(awk -v e="$E" -v r="$rep_budget" -v p="$placed" \
    'BEGIN {printf "%.0f", e + e / 2 + e / 3 + e / 4 + e / 4 + r + 6 * p + 4 * e / p * 4096}')
fi
img_mb=$(awk -v l="$ladder_bytes" -v io="$IO_SIZE_MB" \
  'BEGIN {printf "%.0f", (l / 1e6 + io) * 1.15 + 512}')
if [[ $ladder == k3-scale ]]; then
  # embedding + lm_head 2 x 2.35 GB, layer 0 ~2.3 GB, ~1.3 GB of spine per MoE layer (SYNTH.md)
  model_bytes=$(awk -v m="$moe_layers" -v e="$E" 'BEGIN {printf "%.0f", 7.0e9 + m * 1.3e9 + e}')
  spine_bytes=$((model_bytes - E))
elif [[ $ladder == demo ]]; then
  model_bytes=40000000 spine_bytes=20000000
else
  model_bytes=0 spine_bytes=0
fi
# Expected peak RAM: the tmpfs (model + the drives' used bytes: four striped copies, one whole, one
# with replicas) plus one engine (its spine copy, the slots, the 2 GiB GEMV arena bench decode
# takes after the decode).
peak_ram=$(awk -v m="$model_bytes" -v e="$E" -v io="$IO_SIZE_MB" -v s="$spine_bytes" \
  -v slots="$SLOTS" -v p="$placed" -v lad="$ladder" \
  'BEGIN {tmpfs = m + (lad == "none" ? 0 : 6.5 * e); if (tmpfs < 4 * io * 1e6) tmpfs = 4 * io * 1e6
          engine = lad == "none" ? 0 : s + slots * p + 2.2e9
          printf "%.1f", (tmpfs + engine) / 1e9}')
# A time estimate from the rates (compute per token assumed 0.3 s at k3-scale, 0.02 s for the
# demo; per bench decode run 6 s of load, ceilings and GEMV measurement). Striped rungs are
# assumed at the floor, the two whole ones at the expected busiest-drive load of a route of k
# experts over 4 drives (1.46 x the mean for 16 of 64, docs/DRIVES.md).
estimate=$(awk -v eq="$EQUAL_MBPS" -v mixed="$MIXED_MBPS" -v reads="$IO_READS" \
  -v ioreps="$IO_REPS" -v bio="$bench_io" -v lad="$ladder" -v rate="$LADDER_MBPS" \
  -v m="$moe_layers" -v k="$top_k" -v p="$expert_bytes" -v tok="$TOKENS" \
  -v ptok="$PROMPT_TOKENS" -v ttok="$TRACE_TOKENS" -v reps="$REPS" -v model="$model_bytes" '
  BEGIN {
    t = 10
    if (bio) {
      n = split(mixed, r, ","); sum = 0; for (i = 1; i <= n; ++i) sum += r[i]
      t += 4 * 4 + 2 * ioreps * reads * 17.547 / (4 * eq) + n * 4 + 2 * ioreps * reads * 17.547 / sum
    }
    if (lad != "none") {
      c = lad == "demo" ? 0.02 : 0.3; over = lad == "demo" ? 2 : 6
      need = m * k * p * 0.8 / (rate * 1e6)          # s/token on one drive, a fifth from the cache
      synth = model / 1.0e9                            # runs during bench-io
      t += (bio ? (synth > t - 10 ? synth - (t - 10) : 0) : synth) + 5 * 4 + 5 + over
      t += ttok * (need / 4 + c) + ptok * need / 4
      per_round = 0
      split("1 2 3 4 4 4", nd, " ")
      split("1 1 1 1 1.46 1.46", imbalance, " ")
      for (i = 1; i <= 6; ++i) per_round += over + (tok + ptok) * (need * imbalance[i] / nd[i] + c)
      t += reps * per_round
    }
    printf "%.0f", t + 10
  }')

echo "bench_drives: ladder $ladder; $((E / 1000000)) MB of experts (${moe_layers} MoE layers x $EXPERTS);" \
  "drive images ${img_mb} MB each (sparse); expected peak RAM ~${peak_ram} GB; expected run ~${estimate} s" \
  "(decode rounds stop at BUDGET_S=${BUDGET_S} s)"
echo "bench_drives: bench-io $([[ $bench_io == 1 ]] && echo "4 x $EQUAL_MBPS and $MIXED_MBPS MB/s, $IO_REPS x $IO_READS reads" || echo off);" \
  "ladder at $LADDER_MBPS MB/s a drive, $REPS rounds of $TOKENS tokens (prompt $PROMPT_TOKENS), $SLOTS expert slots," \
  "trace $TRACE_TOKENS tokens, replica room $REPLICA_EXTRA of a drive's one-copy share"
[[ $dry == 1 ]] && exit 0

missing=()
[[ $(id -u) == 0 ]] || missing+=("root (loop devices, mounts and cgroup limits need it)")
command -v losetup >/dev/null || missing+=("losetup (util-linux)")
# ext4 as in the spec; xfs or btrfs where e2fsprogs is missing (both take O_DIRECT and discard).
if command -v mkfs.ext4 >/dev/null; then
  mkfs=(mkfs.ext4 -q -F -E "lazy_itable_init=0,lazy_journal_init=0")
elif command -v mke2fs >/dev/null; then
  mkfs=(mke2fs -t ext4 -q -F -E "lazy_itable_init=0,lazy_journal_init=0")
elif command -v mkfs.xfs >/dev/null; then
  mkfs=(mkfs.xfs -q -f)
elif command -v mkfs.btrfs >/dev/null; then
  mkfs=(mkfs.btrfs -q -f)
else
  missing+=("mkfs.ext4 (e2fsprogs), or mkfs.xfs or mkfs.btrfs")
fi
[[ -x $deltafin ]] || missing+=("the deltafin binary at $deltafin (--deltafin PATH)")
[[ -e /dev/loop-control || -e /dev/loop0 ]] || missing+=("loop devices (no /dev/loop-control)")
# cgroup v2 (io.max) at /sys/fs/cgroup, or at /sys/fs/cgroup/unified on a hybrid host whose io
# controller is not bound to v1; else v1 blkio.
cgmode=
if [[ -n ${CGROUP2_ROOT:-} ]]; then
  cgroot=$CGROUP2_ROOT
  cgmode=v2
  grep -qw io "$cgroot/cgroup.controllers" 2>/dev/null ||
    missing+=("the cgroup v2 io controller (not in $cgroot/cgroup.controllers)")
elif [[ $(stat -fc %T /sys/fs/cgroup 2>/dev/null) == cgroup2fs ]]; then
  cgroot=/sys/fs/cgroup
  if grep -qw io "$cgroot/cgroup.controllers" 2>/dev/null; then
    cgmode=v2
  else
    missing+=("the cgroup v2 io controller (not in $cgroot/cgroup.controllers)")
  fi
elif grep -qw io /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then
  cgroot=/sys/fs/cgroup/unified
  cgmode=v2
elif [[ -e /sys/fs/cgroup/blkio/blkio.throttle.read_bps_device ]]; then
  cgmode=v1
else
  missing+=("a cgroup read throttle: cgroup v2 with the io controller (io.max), or cgroup v1 blkio")
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "bench_drives: cannot build the drive emulation here; missing:" >&2
  for m in "${missing[@]}"; do echo "  - $m" >&2; done
  exit 2
fi
python=$(command -v python3 || true)

mkdir -p "$out"
out=$(cd "$out" && pwd)
exec > >(tee -a "$out/run.log") 2>&1
raw=$(mktemp -d "${TMPDIR:-/tmp}/bench_drives_raw.XXXXXX")
work=$WORK_ROOT/deltafin-drives.$$
mnt=$work/mnt
models=$work
[[ -n ${MODEL_ROOT:-} ]] && models=$MODEL_ROOT/deltafin-drives-models.$$
loops=()
cg=
synth_pid=
cleanup() {
  set +e
  [[ -n $synth_pid ]] && kill "$synth_pid" 2>/dev/null && wait "$synth_pid" 2>/dev/null
  if [[ $keep == 1 ]]; then
    echo "bench_drives: --keep: left $work mounted, loops ${loops[*]}, cgroup $cg"
  else
    for i in "${!loops[@]}"; do
      umount "$mnt/d$i" 2>/dev/null
      losetup -d "${loops[$i]}" 2>/dev/null
    done
    [[ -n $cg ]] && rmdir "$cg" 2>/dev/null
    [[ $models != "$work" ]] && rm -rf "$models"
    mountpoint -q "$work" && umount "$work"
    rmdir "$work" 2>/dev/null
  fi
  checkpoint final
  rm -rf "$raw"
  echo "bench_drives: done after ${SECONDS} s; results in $out"
}
# checkpoint STAGE: summary and tarball of what is there so far (best effort, never fatal).
checkpoint() {
  echo "{\"stage\":\"$1\",\"seconds\":$SECONDS}" >>"$raw/stages.jsonl"
  if [[ -n $python ]]; then
    "$python" "$script_dir/bench_drives_summary.py" "$raw" "$out" >"$raw/summary.stdout" \
      2>"$raw/summary.stderr" || echo "bench_drives: summary failed (see summary.stderr in raw.tar.gz)"
  fi
  tar czf "$out/raw.tar.gz.tmp" -C "$raw" . 2>/dev/null && mv "$out/raw.tar.gz.tmp" "$out/raw.tar.gz"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$work"
mount -t tmpfs -o "size=${TMPFS_GB}g,mode=755" deltafin-drives "$work"
export DELTAFIN_DRIVE_CACHE=$work/drives.tsv  # the emulated drives are not worth remembering
mkdir -p "$mnt" "$models"

{
  date -u +%FT%TZ
  uname -a
  echo "nproc $(nproc)"
  grep -E 'MemTotal|MemAvailable' /proc/meminfo
  echo "cgroup $cgmode"
  "$deltafin" --version 2>&1 || true
} >"$raw/env.txt" 2>&1
cat >"$raw/meta.json" <<EOF
{"ladder":"$ladder","cgroup":"$cgmode","equal_mbps":$EQUAL_MBPS,"mixed_mbps":[$MIXED_MBPS],
 "io_size_mb":$IO_SIZE_MB,"io_reps":$IO_REPS,"io_reads":$IO_READS,"ladder_mbps":$LADDER_MBPS,
 "layers":$LAYERS,"experts":$EXPERTS,"moe_layers":$moe_layers,"top_k":$top_k,
 "expert_bytes":$expert_bytes,"one_copy_bytes":$E,"replica_budget_per_drive":$rep_budget,
 "replica_extra":$REPLICA_EXTRA,"tokens":$TOKENS,"prompt_tokens":$PROMPT_TOKENS,"reps":$REPS,
 "slots":$SLOTS,"memory_budget":"$MEM_BUDGET","trace_tokens":$TRACE_TOKENS,
 "trace_ids":"$TRACE_IDS","speculate":"$SPECULATE","budget_s":$BUDGET_S,"estimate_s":$estimate,"nproc":$(nproc),
 "rung_layout":"stripe"}
EOF

echo "bench_drives: cgroup $cgmode; tmpfs at $work; ${mkfs[0]} on each drive"
for ((i = 0; i < n_drives; ++i)); do
  truncate -s "${img_mb}M" "$work/d$i.img"
  loops[i]=$(losetup --direct-io=on --show -f "$work/d$i.img")
  "${mkfs[@]}" "${loops[$i]}" >/dev/null
  mkdir -p "$mnt/d$i"
  mount -o noatime,discard "${loops[$i]}" "$mnt/d$i" 2>/dev/null ||
    mount -o noatime "${loops[$i]}" "$mnt/d$i"
  echo "  drive $i: ${loops[$i]} ($(cat "/sys/block/$(basename "${loops[$i]}")/dev")," \
    "dio $(cat "/sys/block/$(basename "${loops[$i]}")/loop/dio" 2>/dev/null || echo ?)) on $mnt/d$i"
done
if [[ $cgmode == v2 ]]; then
  grep -qw io "$cgroot/cgroup.subtree_control" || echo +io >"$cgroot/cgroup.subtree_control" || {
    echo "bench_drives: cannot enable the io controller in $cgroot/cgroup.subtree_control" >&2
    exit 1
  }
  cg=$cgroot/deltafin-drives.$$
  mkdir "$cg"
else
  cg=/sys/fs/cgroup/blkio/deltafin-drives.$$
  mkdir "$cg"
fi

# limit I MBPS: the read rate of emulated drive I (0: unlimited).
limit() {
  local dev bps=$(($2 * 1000000))
  dev=$(cat "/sys/block/$(basename "${loops[$1]}")/dev")
  local file=$cg/blkio.throttle.read_bps_device line="$dev $bps"
  if [[ $cgmode == v2 ]]; then
    file=$cg/io.max line="$dev rbps=$bps"
    [[ $2 == 0 ]] && line="$dev rbps=max"
  fi
  echo "$line" >"$file" || { echo "bench_drives: cannot write '$line' to $file" >&2; exit 1; }
}
# Writing each drive's limit now fails here, in the first seconds, where the throttle is missing.
for ((i = 0; i < n_drives; ++i)); do limit "$i" 0; done
show_limits() {
  if [[ $cgmode == v2 ]]; then cat "$cg/io.max"; else cat "$cg/blkio.throttle.read_bps_device"; fi
}
# in_cg CMD...: CMD in the throttled cgroup (its threads and io_uring workers inherit it). An exec
# that fails (126: seen once here as a transient "Permission denied") is tried once more.
in_cg() {
  local rc=0
  sh -c "echo \$\$ >'$cg/cgroup.procs'; exec \"\$@\"" sh "$@" || rc=$?
  if [[ $rc == 126 ]]; then
    echo "bench_drives: exec of $1 failed (126); trying once more" >&2
    sleep 1
    rc=0
    sh -c "echo \$\$ >'$cg/cgroup.procs'; exec \"\$@\"" sh "$@" || rc=$?
  fi
  return "$rc"
}
dirs_of() {
  local d=
  for ((i = 0; i < $1; ++i)); do d+="${d:+,}$mnt/d$i"; done
  echo "$d"
}
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }

# The checkpoint is written while bench-io runs (synth in the background).
if [[ $ladder == k3-scale ]]; then
  synth_args=(--preset k3-scale --layers "$LAYERS" --experts "$EXPERTS" --no-drafters)
elif [[ $ladder == demo ]]; then
  synth_args=(--preset demo --layers "$LAYERS" --experts "$EXPERTS" --no-drafters)
fi
if [[ $ladder != none ]]; then
  "$deltafin" synth --out "$models/model" "${synth_args[@]}" >"$raw/synth.json" 2>"$raw/synth.log" &
  synth_pid=$!
  echo "bench_drives: synth ${synth_args[*]} started (pid $synth_pid) into $models/model"
fi

# bench_io LABEL RATE...: bench-io --dirs over drives 0.. with those rates, in the cgroup.
bench_io() {
  local label=$1 n=0
  shift
  for r in "$@"; do limit "$n" "$r"; n=$((n + 1)); done
  echo "bench_drives: bench-io $label: $(show_limits | tr '\n' ';')"
  if in_cg "$deltafin" bench-io --dirs "$(dirs_of "$n")" \
    --size-gb "$(awk -v s="$IO_SIZE_MB" 'BEGIN {print s / 1000}')" --reps "$IO_REPS" \
    --reads "$IO_READS" --remeasure --json >"$raw/benchio.$label.json" 2>"$raw/benchio.$label.log"; then
    grep -o '"least_eta_over_round_robin":[0-9.e+-]*' "$raw/benchio.$label.json" || true
  else
    echo "bench_drives: bench-io $label FAILED (rc $?); its log:"
    tail -5 "$raw/benchio.$label.log"
  fi
}
if [[ $bench_io == 1 ]]; then
  bench_io "4x$EQUAL_MBPS" "$EQUAL_MBPS" "$EQUAL_MBPS" "$EQUAL_MBPS" "$EQUAL_MBPS"
  checkpoint bench-io-equal
  bench_io "$(echo "$MIXED_MBPS" | tr , -)" "${mixed[@]}"
  for ((i = 0; i < n_drives; ++i)); do limit "$i" 0; done
  checkpoint bench-io-mixed
fi
[[ $ladder == none ]] && exit 0

# ---- the decode ladder ----
echo "bench_drives: waiting for synth (${SECONDS} s in)"
if ! wait "$synth_pid"; then
  synth_pid=
  echo "bench_drives: synth FAILED; its log:"
  tail -5 "$raw/synth.log"
  exit 1
fi
synth_pid=
echo "bench_drives: synth done at ${SECONDS} s: $(cat "$raw/synth.json")"
for ((i = 0; i < n_drives; ++i)); do limit "$i" "$LADDER_MBPS"; done
# The ceilings at this rate, measured inside the limits and cached for the engine's floor.
if ! in_cg "$deltafin" bench-io --dirs "$(dirs_of $n_drives)" --size-gb 0.2 --reads 8 --reps 1 \
  --remeasure --json >"$raw/ceilings.json" 2>"$raw/ceilings.log"; then
  echo "bench_drives: measuring the ceilings at $LADDER_MBPS MB/s FAILED; its log:"
  tail -5 "$raw/ceilings.log"
  exit 1
fi
echo "bench_drives: ceilings at $LADDER_MBPS MB/s: $(grep -o '"ceiling_gbps":[0-9.e+-]*' "$raw/ceilings.json" | cut -d: -f2 | tr '\n' ' ')GB/s"
if awk -v r="$LADDER_MBPS" '/"ceiling_gbps"/ {split($0, a, ":"); if (a[2] * 1000 > 1.5 * r) bad = 1}
    END {exit !bad}' < <(grep -o '"ceiling_gbps":[0-9.e+-]*' "$raw/ceilings.json"); then
  echo "bench_drives: WARNING: a ceiling is above 1.5 x $LADDER_MBPS MB/s: the read limit does not hold;" \
    "the ladder below measures unthrottled drives"
fi
gbps=$(awk -v r="$LADDER_MBPS" 'BEGIN {print r / 1000}')

# One model folder per placement: hard links to the synth's files (placement.json is written by
# rename, so the shared files are never changed); the folder name names the drive subfolders.
# 1-4: striped; 4w: whole on 4 drives; 4r: whole with hot replicas on 4 drives.
configs=(1 2 3 4 4w 4r)
for c in "${configs[@]}"; do
  cp -al "$models/model" "$models/k$c"
done
# place CONFIG N [place args...]: the experts of folder kCONFIG on drives 0..N-1, outside the
# cgroup (read-backs at full speed) with the rates given, so that place neither measures nor
# touches the cached ceilings.
place() {
  local c=$1 n=$2 g=
  shift 2
  for ((i = 0; i < n; ++i)); do g+="${g:+,}$gbps"; done
  if ! "$deltafin" place --model "$models/k$c" --drives "$(dirs_of "$n")" --gbps "$g" "$@" \
    >"$raw/place.$c.json" 2>"$raw/place.$c.log"; then
    echo "bench_drives: place $c FAILED; its log:"
    tail -5 "$raw/place.$c.log"
    exit 1
  fi
  echo "bench_drives: placed k$c on $n drive(s) at ${SECONDS} s: $(grep -o '"layout":"[a-z]*","experts":[0-9]*,"replicas":[0-9]*' "$raw/place.$c.json")"
}
# decode CONFIG NAME [args...]: one bench decode run in the cgroup, page cache dropped first.
decode() {
  local c=$1 name=$2 rc=0
  shift 2
  drop_caches
  in_cg "$deltafin" bench decode --device cpu --model "$models/k$c" --expert-slots "$SLOTS" \
    ${MEM_BUDGET:+--memory-budget "$MEM_BUDGET"} --speculate "$SPECULATE" --ceiling-reps 1 \
    --ceiling-gb 0.1 --json "$@" \
    >"$raw/$name.json" 2>"$raw/$name.log" || rc=$?
  local spt floor
  spt=$(grep -o '"seconds_per_token":[0-9.e+-]*' "$raw/$name.json" | cut -d: -f2)
  floor=$(grep -o '"io_floor_sum_of_ceilings_seconds_per_token":[0-9.e+-]*' "$raw/$name.json" | cut -d: -f2)
  if [[ $rc != 0 || -z $spt ]]; then
    echo "  $name: FAILED (rc $rc); its log:"
    tail -3 "$raw/$name.log"
  else
    echo "  $name: $spt s/token, floor $floor s ($(awk -v s="$spt" -v f="$floor" \
      'BEGIN {if (f > 0) printf "%.2f", s / f; else printf "?"}') x) at ${SECONDS} s"
  fi
}

place 4 4 --layout stripe
echo "bench_drives: recording routes: $TRACE_TOKENS tokens on 4 drives (ids $TRACE_IDS)"
decode 4 trace --tokens "$TRACE_TOKENS" --ids "$TRACE_IDS" --trace-routes "$raw/routes.jsonl"
[[ -s $raw/routes.jsonl ]] || { echo "bench_drives: no routes recorded" >&2; exit 1; }
place 1 1 --layout stripe
place 2 2 --layout stripe
place 3 3 --layout stripe
place 4w 4 --layout whole
place 4r 4 --layout whole --from-trace "$raw/routes.jsonl" --budget-per-drive "$rep_budget"
checkpoint placed

rounds=0
round_s=0
for ((r = 0; r < REPS; ++r)); do
  if ((r > 0 && SECONDS + round_s > BUDGET_S)); then
    echo "bench_drives: stopping after $r round(s): another (~${round_s} s) would end past BUDGET_S=$BUDGET_S"
    break
  fi
  start=$SECONDS
  echo "bench_drives: round $((r + 1)) of $REPS"
  for ((j = 0; j < ${#configs[@]}; ++j)); do
    c=${configs[$(((j + r) % ${#configs[@]}))]}
    decode "$c" "decode.$c.$r" --tokens "$TOKENS" --prompt-tokens "$PROMPT_TOKENS"
  done
  rounds=$((r + 1))
  round_s=$((SECONDS - start))
  checkpoint "round$rounds"
done
echo "{\"rounds_done\":$rounds}" >"$raw/rounds.json"
checkpoint finished
[[ -f $out/summary.md ]] && cat "$out/summary.md"
