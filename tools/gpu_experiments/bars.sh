#!/usr/bin/env bash
# One device call for issue #18's kernel bars: builds the GPU test and the benchmark for sm_90a
# (src/cuda/run_gpu_checks.sh, no benchmark), then, in CUDA graphs, two rounds of the bar entries
# (MXFP4 grouped and row-pair kernels, BF16 shapes at 1 and 8 rows, the short matrices, the
# lm_head), the model's own BF16 spine launches (`launches`) and the tensor-core mode (`mxtc`).
# From the repository root on an H100/H200 (~4 minutes with the build on 16 cores):
#   OUT=$OUT bash tools/gpu_experiments/bars.sh
# Logs: $OUT/gpu_checks.log, bars_1.log, bars_2.log, launches.log, mxtc.log.
set -uo pipefail
out=${OUT:?set OUT}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
date -u
GENCODE='-gencode=arch=compute_90a,code=sm_90a' REPS=1 DELTAFIN_BENCH_ONLY=none JOBS=$(nproc) \
  timeout 400 src/cuda/run_gpu_checks.sh /tmp/bars_build >"$out/gpu_checks.log" 2>&1
status=$?
echo "GPU tests rc=$status"
grep -E "^(PASSED|FAILED)|FAIL " "$out/gpu_checks.log" | head -20
[[ $status == 0 ]] || exit "$status"
bench=/tmp/bars_build/deltafin_cuda_bench
for r in 1 2; do
  DELTAFIN_BENCH_ONLY=grouped,mxpairs,bfshapes,bfsmall,lmhead DELTAFIN_BENCH_N=1,8 \
    DELTAFIN_BENCH_GRAPH=1 timeout 200 "$bench" 7 >"$out/bars_$r.log" 2>&1
  echo "bars round $r rc=$?"
done
DELTAFIN_BENCH_ONLY=launches DELTAFIN_BENCH_N=1,8,16 DELTAFIN_BENCH_GRAPH=1 timeout 120 "$bench" 7 \
  >"$out/launches.log" 2>&1
echo "launches rc=$?"
grep "layer spine" "$out/launches.log"
DELTAFIN_BENCH_ONLY=mxtc DELTAFIN_BENCH_N=1,8,16 DELTAFIN_BENCH_GRAPH=1 timeout 150 "$bench" 7 \
  >"$out/mxtc.log" 2>&1
echo "mxtc rc=$?"
date -u
