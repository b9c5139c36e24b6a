#!/usr/bin/env bash
# Builds the GPU test and the benchmark with nvcc alone (no CMake, gtest or other Debian
# packages: the device host has only the CUDA toolkit) and runs both. One command on a GPU host:
#   src/cuda/run_gpu_checks.sh [out_dir]    env: REPS (default 15), GENCODE, SANITIZE=1, NVCC, JOBS,
#   DELTAFIN_BENCH_ONLY (the benchmark's entries to run, e.g. mxfp4,grouped,bf16),
#   DELTAFIN_BENCH_GRAPH=1 (the GEMV entries and their reads timed as CUDA graphs),
#   PROFILE: after the benchmark, ncu (--clock-control none) on chosen kernels of a one-repetition
#   benchmark run, each "entries|kernel regex|launches" (';' between), e.g.
#   PROFILE='mxpairs|rows_grouped_kernel<112, 2, |2;bfshapes|bf16_kernel<8, 4, 8|4' (demangled
#   names), one report each in out_dir/ncu_K.txt: stall reasons, pipes, issue, memory. ncu
#   writes some template arguments with their type, e.g. the tensor-core kernels':
#   PROFILE='mxtc|tc_grouped_kernel<\(int\)1, \(int\)8, \(int\)0>|1'.
# GENCODE='-gencode=arch=compute_90a,code=sm_90a' builds for the H100/H200 alone (faster).
# Exit status: the test's (0 passed, 1 failed, 77 no GPU), or the build's.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/gpu}
mkdir -p "$out/obj"
nvcc=${NVCC:-nvcc}
command -v "$nvcc" >/dev/null || nvcc=/usr/local/cuda/bin/nvcc
gencode=${GENCODE:--gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a}
# shellcheck disable=SC2206
flags=(-std=c++20 -O3 $gencode --fmad=false -Xcompiler=-ffp-contract=off -Isrc -Iinclude)
"$nvcc" --version | tail -2

kernels=(src/cuda/gemv.cu src/cuda/gemv_bf16_narrow.cu src/cuda/gemv_mxfp4_pairs.cu src/cuda/mxfp4_layout.cu src/cuda/gemv_mxfp4_tc.cu src/cuda/gemv_mxfp4_wgmma.cu src/cuda/norm.cu src/cuda/decode_ops.cu src/cuda/decode_ops_mla.cu)
# Host code: the CPU emulations and the repository's references the test compares against.
host=(src/cuda/gemv_order_ref.cc src/cuda/decode_order_ref.cc src/kernels/matmul_ref.cc
  src/kernels/activation_ref.cc src/kernels/attn_res_ref.cc src/kernels/kda_ref.cc
  src/kernels/short_conv_ref.cc src/kernels/elementwise_ref.cc src/model/router.cc
  src/base/error.cc src/quant/mxfp4.cc)
tests=(src/cuda/gemv_gpu_test.cu src/cuda/gemv_mxfp4_tc_test.cu src/cuda/mxfp4_layout_test.cu src/cuda/decode_gpu_test.cu)
bench=(src/cuda/bench/main.cu src/cuda/bench/harness.cu src/cuda/bench/mxfp4_entries.cu
  src/cuda/bench/bf16_entries.cu src/cuda/bench/decode_op_entries.cu)
# One object per source, compiled in parallel (nvcc compiles the files of one command in turn).
obj() { echo "$out/obj/$(echo "${1%.*}" | tr / _).o"; }
export -f obj
export out
printf '%s\n' "${kernels[@]}" "${tests[@]}" "${bench[@]}" "${host[@]}" |
  xargs -P "${JOBS:-$(nproc)}" -I{} bash -c \
    '"$0" "${@:1}" -x cu -c {} -o "$(obj {})"' "$nvcc" "${flags[@]}"
objs() { for f in "$@"; do obj "$f"; done; }
# shellcheck disable=SC2046
"$nvcc" "${flags[@]}" -o "$out/deltafin_cuda_gpu_tests" $(objs "${tests[@]}" "${kernels[@]}" "${host[@]}")
# shellcheck disable=SC2046
"$nvcc" "${flags[@]}" -o "$out/deltafin_cuda_bench" $(objs "${bench[@]}" "${kernels[@]}")
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
if [[ -n ${PROFILE:-} ]]; then
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
  [[ -n $ncu ]] || { echo "run_gpu_checks: PROFILE set but no ncu found" >&2; exit 2; }
  metrics=(sm__pipe_alu_cycles_active sm__pipe_fma_cycles_active sm__pipe_fmaheavy_cycles_active
    sm__pipe_shared_cycles_active sm__inst_executed_pipe_lsu smsp__issue_active)
  IFS=';' read -ra items <<<"$PROFILE"
  k=0
  for item in "${items[@]}"; do
    IFS='|' read -r only regex launches <<<"$item"
    k=$((k + 1))
    DELTAFIN_BENCH_ONLY=$only "$ncu" --clock-control none --kernel-name-base demangled \
      -k "regex:$regex" -c "${launches:-1}" --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section SchedulerStats --section WarpStateStats \
      --section InstructionStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --metrics "$(printf '%s.avg.pct_of_peak_sustained_active,' "${metrics[@]}")dram__throughput.avg.pct_of_peak_sustained_elapsed" \
      "$out/deltafin_cuda_bench" 1 >"$out/ncu_$k.txt" 2>&1 || echo "run_gpu_checks: ncu run $k failed" >&2
    echo "ncu $k ($only, $regex): $out/ncu_$k.txt"
  done
fi
exit $status
