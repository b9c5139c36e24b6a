#!/usr/bin/env bash
# The GPU backend's decode and prefill figures against the CPU path (issue #18; docs/CUDA.md,
# "Figures"), in one command on the GPU host, no root:
#   1. a k3-scale checkpoint held whole in VRAM: `deltafin synth --preset k3-scale --layers LAYERS
#      --experts EXPERTS --no-drafters` (K3's real per-layer sizes; skipped with --model DIR);
#   2. ROUNDS interleaved rounds of `bench decode --json --keep-page-cache --speculate off
#      --prompt-tokens PROMPT_TOKENS --tokens TOKENS` with --device cuda, then --device cpu (one
#      token a pass; the checkpoint stays in the page cache, so neither reads the disk): the
#      prompt's time gives prefill tokens per
#      second, the decode passes s/token; the GPU runs add the "gpu" object (bytes touched per
#      token, the device's read rate and per-operation costs measured in the same run, the floor
#      and the ratio);
#   3. OUT/summary.json and OUT/summary.md (scripts/bench_gpu_summary.py): min/median/max over the
#      rounds and the speed-ups GPU over CPU, rewritten after every run, so a run stopped early
#      still leaves what it had; OUT/<backend>-<round>.json and .log for every run.
# It prints a time estimate first; rounds stop early (and say so) when another would end past
# BUDGET_S seconds from the start. Needs bash and python3 (standard library); deltafin may be a
# binary built elsewhere (set LD_LIBRARY_PATH for its libraries).
#
# usage: scripts/bench_gpu.sh --out DIR [--deltafin PATH] [--model DIR] [--dry-estimate]
# Sizes and counts come from the environment (defaults in brackets):
#   LAYERS [6: the dense layer 0, KDA layers 1, 2, 4, MLA layers 3, 5]  EXPERTS [64 per MoE layer]
#   TOKENS [24 decode tokens]  PROMPT_TOKENS [512]  ROUNDS [3]  BUDGET_S [560]
#   HOST_SLOTS [0: off; N: each round also runs the GPU with --experts stream and an expert
#     cache of N slots (--vram-expert-slots N), so most experts are copied in every token from
#     the RAM tier's pinned slots: the summary sets the tiers' host-to-device stream against the
#     pinned copy rate of the same run]
#   WORK_ROOT [/tmp: the checkpoint goes to WORK_ROOT/deltafin-bench-gpu]
#   CPU_PREFILL_S [0.014: the CPU's prefill seconds per token per GB of spine, for the estimate]
#   CPU_DECODE_GBPS [60: the CPU's decode rate over a token's bytes, for the estimate]
set -euo pipefail

deltafin=build/release/deltafin
out=
model=
dry=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --deltafin) deltafin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --dry-estimate) dry=1; shift ;;
    -h|--help) sed -n 2,29p "$0"; exit 0 ;;
    *) echo "bench_gpu: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $out ]] || { echo "bench_gpu: --out DIR is required" >&2; exit 2; }
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $deltafin == /* ]] || deltafin=$PWD/$deltafin
[[ -x $deltafin ]] || { echo "bench_gpu: no deltafin at $deltafin (--deltafin PATH)" >&2; exit 2; }

LAYERS=${LAYERS:-6}
EXPERTS=${EXPERTS:-64}
TOKENS=${TOKENS:-24}
PROMPT_TOKENS=${PROMPT_TOKENS:-512}
ROUNDS=${ROUNDS:-3}
HOST_SLOTS=${HOST_SLOTS:-0}
BUDGET_S=${BUDGET_S:-560}
WORK_ROOT=${WORK_ROOT:-/tmp}
CPU_PREFILL_S=${CPU_PREFILL_S:-0.014}
CPU_DECODE_GBPS=${CPU_DECODE_GBPS:-60}
((LAYERS >= 2 && EXPERTS >= 16)) ||
  { echo "bench_gpu: LAYERS >= 2 and EXPERTS >= 16 (K3's top-16), got $LAYERS and $EXPERTS" >&2; exit 2; }

# Sizes at k3-scale (docs/SYNTH.md): embedding + lm_head 4.7 GB, layer 0 2.3 GB, a KDA+MoE layer
# 1.3 GB of spine, an MLA+MoE layer 0.7 GB (MLA where the 1-based index is a multiple of 4, and
# the last), each expert 17,547,264 bytes. A decode token reads the spine, the lm_head and 16
# experts per MoE layer; a 16-row prompt pass up to 256 per layer (the checkpoint's EXPERTS at most).
read -r model_gb spine_gb token_gb <<<"$(awk -v L="$LAYERS" -v E="$EXPERTS" 'BEGIN {
  spine = 2.3
  for (l = 1; l < L; ++l) spine += ((l + 1) % 4 == 0 || l == L - 1) ? 0.7 : 1.3
  e = 0.017547264
  printf "%.1f %.1f %.1f", 4.7 + spine + (L - 1) * E * e, spine, spine + 2.35 + (L - 1) * 16 * e }')"
# Synth writes ~13.5 GB a minute on the GPU host; a GPU run: ~10 s of start (CUDA context, the
# mapping) plus the upload at ~3 GB/s (pageable copies), the prompt and tokens in ~2 s, the probes;
# a CPU run: 5 s of start and measurements plus the prompt and the tokens at the rates above.
read -r synth_s gpu_s cpu_s <<<"$(awk -v m="$model_gb" -v s="$spine_gb" -v t="$token_gb" \
  -v P="$PROMPT_TOKENS" -v T="$TOKENS" -v ps="$CPU_PREFILL_S" -v dg="$CPU_DECODE_GBPS" 'BEGIN {
  printf "%.0f %.0f %.0f", m / 13.5 * 60, 12 + m / 3, 5 + P * ps * s + T * t / dg }')"
[[ -n $model ]] && synth_s=0
host_s=0
((HOST_SLOTS > 0)) && host_s=$((gpu_s + 10))
estimate=$((synth_s + ROUNDS * (gpu_s + host_s + cpu_s) + 5))
echo "bench_gpu: k3-scale, $LAYERS layers x $EXPERTS experts: ~${model_gb} GB (a decode token touches" \
  "~${token_gb} GB); $ROUNDS rounds of $PROMPT_TOKENS prompt + $TOKENS decode tokens, GPU then CPU"
echo "bench_gpu: estimate ~${estimate} s: synth ~${synth_s} s, a GPU run ~${gpu_s} s, a CPU run" \
  "~${cpu_s} s (rounds stop at BUDGET_S=${BUDGET_S} s)"
((dry)) && exit 0
if ((estimate > BUDGET_S)); then
  echo "bench_gpu: the estimate is past BUDGET_S; fewer ROUNDS, LAYERS or EXPERTS, or a larger BUDGET_S" >&2
  exit 2
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
synthesized=false  # with --model, LAYERS and EXPERTS below describe the estimate only
if [[ -z $model ]]; then
  synthesized=true
  model=$WORK_ROOT/deltafin-bench-gpu
  echo "bench_gpu: synth into $model"
  "$deltafin" synth --out "$model" --preset k3-scale --layers "$LAYERS" --experts "$EXPERTS" \
    --no-drafters >"$out/synth.json" 2>"$out/synth.log" ||
    { tail -5 "$out/synth.log" >&2; echo "bench_gpu: synth failed" >&2; exit 1; }
  echo "bench_gpu: synth done at ${SECONDS} s: $(cat "$out/synth.json")"
fi
cat >"$out/config.json" <<EOF
{"layers":$LAYERS,"experts":$EXPERTS,"tokens":$TOKENS,"prompt_tokens":$PROMPT_TOKENS,"rounds":$ROUNDS,
"budget_s":$BUDGET_S,"estimate_s":$estimate,"model":"$model","synthesized":$synthesized,"nproc":$(nproc)}
EOF

# Kernels load at start, not inside the first pass's time.
export CUDA_MODULE_LOADING=EAGER
run() {  # label round (cuda, cpu, or cuda-host: the experts from host RAM through a small cache)
  local label=$1 r=$2 dev=$1 extra=()
  # The disk's ceiling measures nothing here (the checkpoint is in the page cache): keep it short.
  [[ $label == cpu ]] && extra=(--ceiling-reps 1 --ceiling-gb 0.1)
  # Experts through the RAM tier (the streaming store's pinned slots; the prompt fills it) into
  # a VRAM cache of HOST_SLOTS: the decode's misses are copied from pinned host memory.
  [[ $label == cuda-host ]] && dev=cuda && extra=(--experts stream --vram-expert-slots "$HOST_SLOTS")
  local start=$SECONDS
  if "$deltafin" bench decode --model "$model" --device "$dev" --tokens "$TOKENS" \
    --prompt-tokens "$PROMPT_TOKENS" --speculate off --json --keep-page-cache "${extra[@]}" \
    >"$out/$label-$r.json" 2>"$out/$label-$r.log"; then
    echo "bench_gpu: round $r $label: $((SECONDS - start)) s"
  else
    echo "bench_gpu: round $r $label FAILED (exit $?): $(tail -3 "$out/$label-$r.log")" >&2
    rm -f "$out/$label-$r.json"
  fi
  python3 "$script_dir/bench_gpu_summary.py" "$out" >/dev/null
}
round_s=$((gpu_s + host_s + cpu_s))
for ((r = 1; r <= ROUNDS; ++r)); do
  if ((r > 1 && SECONDS + round_s > BUDGET_S)); then
    echo "bench_gpu: stopping after $((r - 1)) round(s): another (~${round_s} s) would end past BUDGET_S=$BUDGET_S"
    break
  fi
  run cuda "$r"
  ((HOST_SLOTS > 0)) && run cuda-host "$r"
  run cpu "$r"
done
python3 "$script_dir/bench_gpu_summary.py" "$out"
echo "bench_gpu: done in ${SECONDS} s; $out/summary.md, $out/summary.json"
