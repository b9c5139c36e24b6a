#!/usr/bin/env bash
# On the GPU host: the builds ab_build.sh left in DIR, side by side. Each build's GPU tests, then
# ROUNDS rounds in which every build runs the bench entries ONLY at the row counts N, in CUDA
# graphs, builds interleaved within a round. The bench's rows go to stdout (only lines matching
# GREP if set), with each build's name, so one call's output holds the comparison.
#   OUT=$OUT ONLY=launches,bfshapes N=8 ROUNDS=2 bash tools/gpu_experiments/ab_run.sh .devcarry/ab
# A build's bench runs with the VAR=value lines of its ENV file, if it has one, so a bench switch
# is timed as a build of its own: copy main's folder to DIR/balanced and write
# DELTAFIN_BENCH_BF16_BALANCED=1 into DIR/balanced/ENV. Such a copy's GPU tests are its
# source's, so they are not run again. CARD=H200 stops at once (status 3) on a GPU whose name
# lacks it: a call for one kind may get another, and a run on it would spend the device budget.
set -uo pipefail
dir=${1:?usage: ab_run.sh DIR}
card=$(nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader)
echo "$card"
if [[ -n ${CARD:-} && ${card%%,*} != *"$CARD"* ]]; then
  echo "ab_run: not a $CARD; stopping" >&2
  exit 3
fi
date -u
builds=()
for b in "$dir"/*/; do [[ -x $b/deltafin_cuda_bench ]] && builds+=("${b%/}"); done
[[ ${#builds[@]} -gt 0 ]] || { echo "ab_run: no builds in $dir" >&2; exit 2; }
for b in "${builds[@]}"; do
  name=$(basename "$b")
  [[ -f $b/ENV ]] && continue
  timeout 300 "$b/deltafin_cuda_gpu_tests" >"/tmp/ab_tests_$name.log" 2>&1
  rc=$?
  echo "$name ($(cut -c1-12 "$b/REV" 2>/dev/null)): GPU tests rc=$rc $(grep -E "^(PASSED|FAILED)" "/tmp/ab_tests_$name.log")"
  grep -E "^FAIL " "/tmp/ab_tests_$name.log" | head -5
done
for r in $(seq "${ROUNDS:-2}"); do
  for b in "${builds[@]}"; do
    name=$(basename "$b")
    switches=()
    [[ -f $b/ENV ]] && mapfile -t switches <"$b/ENV"
    echo "== round $r: $name ${switches[*]}"
    env "${switches[@]}" DELTAFIN_BENCH_ONLY="${ONLY:?set ONLY, the bench entries}" \
      DELTAFIN_BENCH_N="${N:-1,8}" DELTAFIN_BENCH_GRAPH=1 \
      timeout "${ENTRY_TIMEOUT:-200}" "$b/deltafin_cuda_bench" "${REPS:-7}" 2>&1 |
      grep -E "${GREP:-.}" | grep -vE "^(device|GEMV entries|DRAM|memcpy|read kernel|kernel \()"
  done
done
date -u
