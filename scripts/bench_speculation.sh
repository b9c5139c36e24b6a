#!/usr/bin/env bash
# Speculation's figures on a streamed spine (docs/PERFORMANCE.md, "Speculation"): synthesizes a
# k3-scale checkpoint (4 MoE layers unless LAYERS says otherwise), then, inside a memory cgroup of
# MEM_LIMIT (most of the spine stays on disk) with the page cache dropped before every run:
#   bench verify: the cost of a verify pass of width 1, 2, 4, 8 against a 1-row pass and its own
#                 I/O floor, full acceptance (the model's own continuation as the drafts);
#   bench decode: speculation off against auto on the bench's prompt, where drafts fail,
#                 interleaved over ROUNDS rounds.
# Needs root (cgroup v2 or v1's memory controller, drop_caches).
# usage: scripts/bench_speculation.sh DELTAFIN WORKDIR OUTDIR
#   env: LAYERS (5), EXPERTS (32), MEM_LIMIT (4G), ROUNDS (2), TOKENS (9), REPS (2)
set -euo pipefail
deltafin=$1
work=$2
out=$3
layers=${LAYERS:-5}
experts=${EXPERTS:-32}
mem=${MEM_LIMIT:-4G}
rounds=${ROUNDS:-2}
tokens=${TOKENS:-9}
reps=${REPS:-2}
mkdir -p "$work" "$out"
model=$work/k3s-$layers-$experts
[[ -f $model/config.json ]] ||
  "$deltafin" synth --out "$model" --preset k3-scale --layers "$layers" --experts "$experts" \
    >"$out/synth.log" 2>&1
du -sh "$model" >"$out/model_size.txt"

limit=$(numfmt --from=iec "$mem")
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  cg=/sys/fs/cgroup/deltafin-spec-$$
  mkdir "$cg" && echo "$limit" >"$cg/memory.max"
  [[ -e $cg/memory.swap.max ]] && echo 0 >"$cg/memory.swap.max"
elif [[ -d /sys/fs/cgroup/memory ]]; then
  cg=/sys/fs/cgroup/memory/deltafin-spec-$$
  mkdir "$cg" && echo "$limit" >"$cg/memory.limit_in_bytes"
else
  echo "bench_speculation: needs a writable memory cgroup (v2, or v1's memory controller)" >&2
  exit 2
fi
trap 'rmdir "$cg" 2>/dev/null || true' EXIT

capped() {  # capped NAME CMD...: one cold run inside the cgroup, stdout to OUT/NAME.json
  local name=$1
  shift
  sync
  echo 3 >/proc/sys/vm/drop_caches
  echo "[$(date +%T)] $name" >&2
  (echo "$BASHPID" >"$cg/cgroup.procs" && exec "$@") >"$out/$name.json" 2>"$out/$name.err" ||
    echo "  $name exited $? (see $out/$name.err)" >&2
}

capped verify "$deltafin" bench verify --model "$model" --widths 1,2,4,8 --tokens "$tokens" \
  --reps "$reps" --memory-budget "$mem" --json
for r in $(seq 1 "$rounds"); do
  for mode in off auto; do
    capped "decode_${mode}_r$r" "$deltafin" bench decode --model "$model" --tokens "$((tokens - 1))" \
      --memory-budget "$mem" --speculate "$mode" --json
  done
done
echo "bench_speculation: figures in $out" >&2
