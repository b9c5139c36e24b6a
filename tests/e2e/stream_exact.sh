#!/usr/bin/env bash
# Streaming changes where bytes come from, never what is computed: on the oracle models and the
# synth demo, `deltafin logits` with streamed experts and a streamed spine (several slot counts,
# chunk sizes, read depths, reads in pieces, prefetch on and off, layers on one thread or all), and
# the mapped path with its background warm-up, must write a file byte-identical to the plain
# mapped path's, and `deltafin generate` must print identical greedy ids. Prefill groups of many
# rows must equal chunk-sized passes. Also checks --trace-routes, --stats and the budget refusal.
set -euo pipefail
deltafin=$1
tests=$2
root=$(cd "$tests/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
export DF_TOOLS="$root/tools"
failed=0

ids_of() {  # ids_of FILE TENSOR -> "1,2,3"
  "$py" - "$1" "$2" <<'PY'
import os, sys
sys.path.insert(0, os.environ["DF_TOOLS"])
from compare_logits import read_safetensors
print(",".join(str(int(i)) for i in read_safetensors(sys.argv[1])[sys.argv[2]].reshape(-1)))
PY
}

fail() {
  echo "stream_exact: FAIL: $*" >&2
  failed=1
}

"$deltafin" synth --out "$work/demo" --preset demo >/dev/null 2>"$work/synth.err" ||
  { cat "$work/synth.err" >&2; exit 1; }

declare -A prompts
prompts[k3-tiny-a]=$(ids_of "$tests/fixtures/k3-tiny-a/reference.safetensors" prompt_ids)
prompts[kimi-linear-tiny]=$(ids_of "$tests/fixtures/kimi-linear-tiny/reference.safetensors" prompt_ids)
prompts[demo]="464,1012,300,7,88,512,9,130,44,61,700,2,3,999,15,16,23,42,77,101"
declare -A dirs=([k3-tiny-a]="$tests/fixtures/k3-tiny-a"
  [kimi-linear-tiny]="$tests/fixtures/kimi-linear-tiny" [demo]="$work/demo")

# name|flags: each variant against the plain mapped path (no warm-up: --no-prefetch).
variants=(
  "mapped-warm|--experts mapped"
  "stream-all|--experts stream --spine stream"
  "stream-2-slots|--experts stream --spine stream --expert-slots 2"
  "stream-5-slots-chunk-3|--experts stream --spine stream --expert-slots 5 --chunk 3"
  "experts-only|--experts stream"
  "spine-only|--experts mapped --spine stream"
  "no-prefetch|--experts stream --spine stream --no-prefetch --expert-slots 9"
  "read-depth-1|--experts stream --spine stream --read-depth 1 --expert-slots 6"
  "read-depth-16|--experts stream --read-depth 16"
  "read-pieces-4k|--experts stream --spine stream --read-piece 4K --expert-slots 7"
  "read-pieces-8k-depth-3|--experts stream --read-piece 8K --read-depth 3"
  "layer-threads-1|--experts stream --spine stream --layer-threads 1 --expert-slots 3"
  "layer-threads-all|--experts stream --layer-threads all"
  "mapped-layer-threads-1|--experts mapped --no-prefetch --layer-threads 1"
)

for name in k3-tiny-a kimi-linear-tiny demo; do
  dir=${dirs[$name]}
  prompt=${prompts[$name]}
  for v in "${variants[@]}"; do
    label=${v%%|*}
    read -r -a flags <<<"${v#*|}"
    # The reference: the plain mapped path, its weights faulted in as touched, with the same
    # prefill chunking (chunk sizes change rounding).
    chunk=(--chunk 64)
    [[ " ${flags[*]} " =~ " --chunk "([0-9]+)" " ]] && chunk=(--chunk "${BASH_REMATCH[1]}")
    "$deltafin" logits --model "$dir" --ids "$prompt" --out "$work/$name.mapped.st" \
      --experts mapped --no-prefetch "${chunk[@]}" 2>"$work/err" ||
      { cat "$work/err" >&2; fail "$name: mapped logits"; continue; }
    ref_ids=$("$deltafin" generate --model "$dir" --ids "$prompt" --max-new 12 --ignore-eos \
      --experts mapped --no-prefetch "${chunk[@]}" 2>"$work/err") ||
      { cat "$work/err" >&2; fail "$name: mapped generate"; continue; }
    if ! "$deltafin" logits --model "$dir" --ids "$prompt" --out "$work/$name.$label.st" \
        "${flags[@]}" 2>"$work/err"; then
      cat "$work/err" >&2
      fail "$name $label: logits exited non-zero"
      continue
    fi
    grep -q "memory budget" "$work/err" || fail "$name $label: no memory plan at startup"
    if [[ $label == mapped-warm ]]; then
      grep -q "mapped weights: bringing them into memory" "$work/err" ||
        fail "$name $label: the mapped weights were not warmed"
    elif [[ $label == mapped-layer-threads-1 ]]; then
      grep -q "layers: 1 of" "$work/err" || fail "$name $label: the layers did not run on one thread"
    elif [[ $label != spine-only ]] && ! grep -q "experts streamed" "$work/err"; then
      fail "$name $label: experts were not streamed: $(grep 'memory budget' "$work/err")"
    fi
    if cmp -s "$work/$name.mapped.st" "$work/$name.$label.st"; then
      echo "stream_exact: $name $label: logits byte-identical"
    else
      fail "$name $label: logits differ from the mapped path ($(cmp "$work/$name.mapped.st" "$work/$name.$label.st" || true))"
    fi
    got=$("$deltafin" generate --model "$dir" --ids "$prompt" --max-new 12 --ignore-eos \
      "${flags[@]}" 2>"$work/err") || { cat "$work/err" >&2; got="(exit)"; }
    if [[ $got == "$ref_ids" ]]; then
      echo "stream_exact: $name $label: 12 greedy ids identical"
    else
      fail "$name $label: generate printed $got, mapped printed $ref_ids"
    fi
  done
done

# Prefill groups: a pass of many prompt rows runs attention chunk by chunk and everything else row
# by row, so it must equal chunk-sized passes bit for bit (mapped and streamed), including a group
# that is not a multiple of the KDA's internal 64-row blocks.
long_prompt=$("$py" -c "print(','.join(str((7 + 37 * i) % 500) for i in range(300)))")
groups=(
  "group-512|"
  "group-512-streamed|--experts stream --spine stream --expert-slots 9"
  "chunk-32-group-96|--chunk 32 --prefill-group 96"
)
for name in k3-tiny-a kimi-linear-tiny demo; do
  dir=${dirs[$name]}
  "$deltafin" logits --model "$dir" --ids "$long_prompt" --out "$work/$name.g64.st" \
    --prefill-group 64 2>"$work/err" || { cat "$work/err" >&2; fail "$name: --prefill-group 64"; continue; }
  "$deltafin" logits --model "$dir" --ids "$long_prompt" --out "$work/$name.c32.st" \
    --chunk 32 --prefill-group 32 2>"$work/err" || { cat "$work/err" >&2; fail "$name: --chunk 32"; continue; }
  for g in "${groups[@]}"; do
    label=${g%%|*}
    read -r -a flags <<<"${g#*|}"
    ref=$work/$name.g64.st
    [[ $label == chunk-32-* ]] && ref=$work/$name.c32.st
    if ! "$deltafin" logits --model "$dir" --ids "$long_prompt" --out "$work/$name.$label.st" \
        "${flags[@]}" 2>"$work/err"; then
      cat "$work/err" >&2
      fail "$name $label: logits exited non-zero"
      continue
    fi
    if cmp -s "$ref" "$work/$name.$label.st"; then
      echo "stream_exact: $name $label (300 rows): logits byte-identical to chunk-sized passes"
    else
      fail "$name $label: logits differ from chunk-sized passes ($(cmp "$ref" "$work/$name.$label.st" || true))"
    fi
  done
done
if "$deltafin" logits --model "$work/demo" --ids 5,6 --out "$work/x.st" --prefill-group -1 \
    2>"$work/err"; then
  fail "--prefill-group -1 was accepted"
fi
grep -q -- "--prefill-group must be" "$work/err" || fail "unexpected refusal: $(cat "$work/err")"

# --trace-routes: one line per pass and MoE layer; decode lines have rows 1 and top_k experts.
# Speculation off: under auto, whether a drafter's proposal is verified (a pass of 2+ rows)
# depends on the pass times the controller has measured, so on a loaded machine it varies.
dir=$work/demo
"$deltafin" generate --model "$dir" --ids 5,6,7 --max-new 4 --ignore-eos --experts stream \
  --speculate off --trace-routes "$work/trace.jsonl" --stats >/dev/null 2>"$work/err" ||
  { cat "$work/err" >&2; fail "generate with --trace-routes --stats"; }
"$py" - "$work/trace.jsonl" "$dir/config.json" <<'PY' || fail "route trace"
import json, sys
cfg = json.load(open(sys.argv[2]))
t = cfg.get("text_config", cfg)
k, n_layers = t["num_experts_per_token"], t["num_hidden_layers"]
moe = [l for l in range(n_layers) if l >= t.get("first_k_dense_replace", 0)]
lines = [json.loads(l) for l in open(sys.argv[1])]
prompt = [l for l in lines if l["rows"] == 3]
decode = [l for l in lines if l["rows"] == 1]
assert len(prompt) == len(moe), (len(prompt), len(moe))
assert len(decode) == 3 * len(moe), len(decode)  # 4 ids: the last is never run
assert [l["position"] for l in decode[::len(moe)]] == [3, 4, 5]
assert all(len(l["experts"]) == k and len(set(l["experts"])) == k for l in decode)
print(f"stream_exact: trace: {len(lines)} lines, {len(moe)} MoE layers, top-{k}")
PY
n_stats=$(grep -c "^token [0-9]*: wall" "$work/err" || true)
[[ $n_stats == 3 ]] || fail "--stats printed $n_stats token lines, expected 3"
grep -q "^prompt: wall" "$work/err" || fail "--stats printed no prompt line"

# A budget below what streaming needs is refused, naming what it needs.
if "$deltafin" logits --model "$dir" --ids 5,6 --out "$work/x.st" --experts stream \
    --memory-budget 1M 2>"$work/err"; then
  fail "--memory-budget 1M was accepted"
elif ! grep -q "is too small for this model" "$work/err"; then
  fail "--memory-budget 1M: unexpected message: $(cat "$work/err")"
else
  echo "stream_exact: --memory-budget 1M refused: $(grep -o 'streaming still needs at least [^(]*' "$work/err")"
fi
exit $failed
