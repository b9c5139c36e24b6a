#!/usr/bin/env bash
# One device call for the tensor-core mode's wgmma shape (src/cuda/gemv_mxfp4_wgmma.cu): the
# layout probe first (wgmma_layout.cu: whether the fragment and descriptor layouts the kernel
# assumes are the hardware's), then the GPU tests (which run the wgmma shape among the others and
# ask it for their bits), the `mxtc` bench entry with every shape against a same-bytes read, and
# the probe of the bench's low first read (first_read.cu). Needs an sm_90 GPU (H100/H200). From
# the repository root:
#   OUT=$OUT bash tools/gpu_experiments/wgmma_check.sh
set -uo pipefail
out=${OUT:?set OUT}
here=$(dirname "$0")
nvcc=/usr/local/cuda/bin/nvcc
gencode='-gencode=arch=compute_90a,code=sm_90a'
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
date -u
"$nvcc" -std=c++17 -O3 -Isrc $gencode -o /tmp/wgmma_layout "$here/wgmma_layout.cu" &
"$nvcc" -std=c++17 -O3 $gencode -o /tmp/first_read "$here/first_read.cu" &
wait
timeout 60 /tmp/wgmma_layout >"$out/wgmma_layout.log" 2>&1
echo "layout probe rc=$?"
grep -E '^layout|^LAYOUT' "$out/wgmma_layout.log" | head -30
GENCODE=$gencode REPS=1 DELTAFIN_BENCH_ONLY=none JOBS=16 timeout 400 src/cuda/run_gpu_checks.sh \
  /tmp/wgmma_check >"$out/product_checks.log" 2>&1
echo "GPU tests rc=$?"
grep -E "^(PASSED|FAILED)|FAIL |wgmma" "$out/product_checks.log" | head -20
for r in $(seq "${ROUNDS:-2}"); do
  DELTAFIN_BENCH_ONLY=mxtc DELTAFIN_BENCH_N=${N_LIST:-1,2,4,8,16} DELTAFIN_BENCH_GRAPH=1 \
    timeout 150 /tmp/wgmma_check/deltafin_cuda_bench "${REPS:-7}" >"$out/mxtc_$r.log" 2>&1
  echo "mxtc round $r rc=$?"
done
timeout 60 /tmp/first_read >"$out/first_read.log" 2>&1
echo "first_read rc=$?"
grep -E 'shape|grouped' "$out/mxtc_1.log" | grep -v 'tc mxfp4'
cat "$out/first_read.log"
date -u
