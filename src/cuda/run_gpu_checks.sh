#!/usr/bin/env bash
# Builds the GPU test and the GEMV benchmark with nvcc alone (no CMake, gtest or other Debian
# packages: the device host has only the CUDA toolkit) and runs both. One command on a GPU host:
#   src/cuda/run_gpu_checks.sh [out_dir]        env: REPS (default 15), GENCODE, SANITIZE=1, NVCC
# Exit status: the test's (0 passed, 1 failed, 77 no GPU), or the build's.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/gpu}
mkdir -p "$out"
nvcc=${NVCC:-nvcc}
command -v "$nvcc" >/dev/null || nvcc=/usr/local/cuda/bin/nvcc
gencode=${GENCODE:--gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a}
# shellcheck disable=SC2206
flags=(-std=c++20 -O3 $gencode --fmad=false -Xcompiler=-ffp-contract=off -Isrc)
"$nvcc" --version | tail -2
"$nvcc" "${flags[@]}" -o "$out/deltafin_cuda_gpu_tests" src/cuda/gemv_gpu_test.cu \
  src/cuda/decode_gpu_test.cu src/cuda/gemv.cu src/cuda/norm.cu src/cuda/decode_ops.cu \
  -x cu src/cuda/gemv_order_ref.cc src/cuda/decode_order_ref.cc src/kernels/matmul_ref.cc \
  src/kernels/activation_ref.cc src/kernels/attn_res_ref.cc src/kernels/kda_ref.cc \
  src/model/router.cc src/base/error.cc src/quant/mxfp4.cc &
test_build=$!
"$nvcc" "${flags[@]}" -o "$out/deltafin_cuda_bench" src/cuda/gemv_bench.cu src/cuda/gemv.cu \
  src/cuda/decode_ops.cu &
bench_build=$!
wait $test_build
wait $bench_build
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true

status=0
"$out/deltafin_cuda_gpu_tests" || status=$?
if [[ ${SANITIZE:-0} == 1 ]] && command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$out/deltafin_cuda_gpu_tests" >"$out/memcheck.log" 2>&1 ||
    status=$?
  tail -3 "$out/memcheck.log"
fi
[[ $status == 77 ]] && exit 77
"$out/deltafin_cuda_bench" "${REPS:-15}"
exit $status
