#!/usr/bin/env bash
# One device call for the tensor-core MXFP4 kernel (src/cuda/gemv_mxfp4_tc.cu): the GPU tests of
# the working tree (src/cuda/run_gpu_checks.sh, sm_90a), ROUNDS rounds of the `mxtc` bench entry
# in CUDA graphs (every compiled shape at DELTAFIN_BENCH_N rows), the model tests of a carried
# build if PACK names its tarball (bin/ and lib/, as .devcarry/pack.sh makes it), and the
# mma.sync rate probe (mma_peak.cu). Logs go to $OUT; run from the repository root:
#   OUT=$OUT ROUNDS=2 PACK=.devcarry/pack.tar.xz bash tools/gpu_experiments/tc_check.sh
set -uo pipefail
out=${OUT:?set OUT}
here=$(dirname "$0")
nvcc=/usr/local/cuda/bin/nvcc
gencode='-gencode=arch=compute_90a,code=sm_90a'
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
date -u
t=$SECONDS
GENCODE=$gencode REPS=1 DELTAFIN_BENCH_ONLY=none JOBS=16 src/cuda/run_gpu_checks.sh /tmp/tc_check \
  >"$out/checks.log" 2>&1
echo "GPU tests rc=$? ($((SECONDS - t)) s)"
grep -E "^(PASSED|FAILED)|FAIL |NOT" "$out/checks.log" | head
"$nvcc" -std=c++17 -O3 $gencode -o /tmp/mma_peak "$here/mma_peak.cu" &
for r in $(seq "${ROUNDS:-2}"); do
  t=$SECONDS
  DELTAFIN_BENCH_ONLY=mxtc DELTAFIN_BENCH_N=${N_LIST:-1,2,4,8,16} DELTAFIN_BENCH_GRAPH=1 \
    /tmp/tc_check/deltafin_cuda_bench "${REPS:-7}" >"$out/mxtc_$r.log" 2>&1
  echo "mxtc round $r rc=$? ($((SECONDS - t)) s)"
done
if [[ -n ${PACK:-} ]]; then
  mkdir -p /tmp/tc_pack && tar -C /tmp/tc_pack -xJf "$PACK"
  LD_LIBRARY_PATH=/tmp/tc_pack/lib /tmp/tc_pack/bin/deltafin_gpu_model_tests tests/fixtures \
    >"$out/model.log" 2>&1
  echo "model tests rc=$?"; tail -1 "$out/model.log"
fi
wait && /tmp/mma_peak | tee "$out/mma_peak.log"
date -u
