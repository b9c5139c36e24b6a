#!/usr/bin/env bash
# Exactness against the oracles: for every case folder under tests/fixtures with a
# reference.safetensors, `deltafin logits` on its prompt_ids must be within 5e-4 × max|reference|
# at every position with the same argmax, and `deltafin generate --max-new 16 --ignore-eos` must
# print exactly its greedy_ids. Prints each case's max relative logit error.
set -euo pipefail
deltafin=$1
tests=$2
root=$(cd "$tests/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
n_cases=0
failed=0

ids_of() {  # ids_of FILE TENSOR -> "1,2,3"
  "$py" - "$1" "$2" <<'PY'
import os, sys
sys.path.insert(0, os.environ["DF_TOOLS"])
from compare_logits import read_safetensors
print(",".join(str(int(i)) for i in read_safetensors(sys.argv[1])[sys.argv[2]].reshape(-1)))
PY
}
export DF_TOOLS="$root/tools"

for ref in "$tests"/fixtures/*/reference.safetensors; do
  [[ -e $ref ]] || continue
  case_dir=$(dirname "$ref")
  name=$(basename "$case_dir")
  # A drafter's oracle (DSpark) is a trace, not a model's logits: tests/e2e/draft_dspark.sh has it.
  if grep -q '"model_type": *"k3_dspark"' "$case_dir/config.json"; then continue; fi
  n_cases=$((n_cases + 1))
  prompt=$(ids_of "$ref" prompt_ids)
  greedy=$(ids_of "$ref" greedy_ids)
  n_new=$(awk -F, '{print NF}' <<<"$greedy")

  if ! "$deltafin" logits --model "$case_dir" --ids "$prompt" --out "$work/$name.safetensors" \
      2>"$work/$name.err"; then
    cat "$work/$name.err" >&2
    echo "oracle: FAIL: $name: deltafin logits exited non-zero" >&2
    failed=1
    continue
  fi
  if ! report=$("$py" "$root/tools/compare_logits.py" "$ref" "$work/$name.safetensors"); then
    echo "oracle: FAIL: $name: $report" >&2
    failed=1
  else
    echo "oracle: $name: logits: $report"
  fi

  rc=0
  got=$("$deltafin" generate --model "$case_dir" --ids "$prompt" --max-new "$n_new" --ignore-eos \
    2>"$work/$name.gen.err") || rc=$?
  if ((rc != 0)); then
    cat "$work/$name.gen.err" >&2
    got="nothing (exit $rc)"
  fi
  if [[ $got != "[$greedy]" ]]; then
    echo "oracle: FAIL: $name: generate printed $got, expected [$greedy]" >&2
    failed=1
  else
    echo "oracle: $name: generate: $n_new greedy ids identical"
  fi
done

((n_cases > 0)) || { echo "oracle: FAIL: no case with a reference.safetensors under $tests/fixtures" >&2; exit 1; }
exit $failed
