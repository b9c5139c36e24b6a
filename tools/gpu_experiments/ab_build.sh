#!/usr/bin/env bash
# Builds the GPU test and benchmark of git revisions for sm_90a on this machine (no GPU needed),
# each from a temporary worktree, into DIR/<name>/ (deltafin_cuda_gpu_tests, deltafin_cuda_bench),
# so one device call can run them side by side (ab_run.sh). DIR must be a path the device call
# carries (an ignored folder named in `carry`, e.g. .devcarry; 64 MiB in all: ~14 MB a revision).
#   tools/gpu_experiments/ab_build.sh DIR main=main branch=gpu-bf16-block-rows
# Each argument is NAME=REV. Needs nvcc; ~1-5 minutes a revision on 2 cores.
set -euo pipefail
dir=${1:?usage: ab_build.sh DIR NAME=REV...}
shift
[[ $# -gt 0 ]] || { echo "ab_build: name at least one NAME=REV" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
for spec in "$@"; do
  name=${spec%%=*} rev=${spec#*=}
  [[ $name != "$spec" && -n $name && -n $rev ]] || { echo "ab_build: '$spec' is not NAME=REV" >&2; exit 2; }
  tree=$(mktemp -d /tmp/ab_build_XXXXXX)
  git -C "$root" worktree add --detach -q "$tree" "$rev"
  status=0
  (cd "$tree" && GENCODE='-gencode=arch=compute_90a,code=sm_90a' REPS=1 DELTAFIN_BENCH_ONLY=none \
    JOBS=${JOBS:-$(nproc)} src/cuda/run_gpu_checks.sh "$tree/build_gpu" >"$tree/build.log" 2>&1) || status=$?
  # 77: built, no GPU here to run the test on.
  if [[ $status != 0 && $status != 77 ]]; then
    tail -20 "$tree/build.log" >&2
    echo "ab_build: $name ($rev) failed to build" >&2
    exit 1
  fi
  mkdir -p "$dir/$name"
  cp "$tree/build_gpu/deltafin_cuda_gpu_tests" "$tree/build_gpu/deltafin_cuda_bench" "$dir/$name/"
  git -C "$root" rev-parse "$rev" >"$dir/$name/REV"
  git -C "$root" worktree remove --force "$tree"
  echo "$name: $(cut -c1-12 "$dir/$name/REV") -> $dir/$name"
done
