#!/usr/bin/env bash
# A Qwen3 dense folder "like any model" (tests/fixtures/qwen3-tiny-a, no tokenizer files): `deltafin
# inspect` accepts it (GQA layers, tied lm_head) and refuses it without a layer's q_norm; `deltafin
# logits --ids` is within 5e-4 of the oracle and byte-identical with a streamed spine; `deltafin
# generate --ids` prints the oracle's greedy ids, with speculation off and with the n-gram drafter;
# a text command stops with an error that names the tokenizer.
#   bash tests/e2e/qwen3_dense.sh path/to/deltafin path/to/tests
set -euo pipefail
deltafin=$1
tests=$2
root=$(cd "$tests/.." && pwd)
case_dir=$tests/fixtures/qwen3-tiny-a
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
export DF_TOOLS="$root/tools"
failed=0

fail() {
  echo "qwen3_dense: FAIL: $*" >&2
  failed=1
}

ids_of() {  # ids_of FILE TENSOR -> "1,2,3"
  "$py" - "$1" "$2" <<'PY'
import os, sys
sys.path.insert(0, os.environ["DF_TOOLS"])
from compare_logits import read_safetensors
print(",".join(str(int(i)) for i in read_safetensors(sys.argv[1])[sys.argv[2]].reshape(-1)))
PY
}
prompt=$(ids_of "$case_dir/reference.safetensors" prompt_ids)
greedy=$(ids_of "$case_dir/reference.safetensors" greedy_ids)

# inspect
out=$("$deltafin" inspect --model "$case_dir" 2>&1) || fail "inspect exited non-zero: $out"
grep -q "^arch         qwen3" <<<"$out" || fail "inspect: no qwen3 arch line"
grep -q "^  GQA        0-3: 4 query heads, 2 key/value heads, head_dim 32" <<<"$out" ||
  fail "inspect: no GQA line"
grep -q "^lm_head      tied" <<<"$out" || fail "inspect: lm_head not reported tied"
grep -q "^check        OK" <<<"$out" || fail "inspect: no OK line"
# The same folder without layer 1's q_norm: refused, naming the tensor.
mkdir "$work/broken"
cp "$case_dir"/config.json "$work/broken/"
"$py" - "$case_dir/model.safetensors" "$work/broken/model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
drop = "model.layers.1.self_attn.q_norm.weight"
out, body = {"__metadata__": header.get("__metadata__", {})}, b""
for name in sorted(k for k in header if k != "__metadata__" and k != drop):
    b, e = header[name]["data_offsets"]
    out[name] = dict(header[name], data_offsets=[len(body), len(body) + e - b])
    body += data[b:e]
h = json.dumps(out).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + body)
PY
if out=$("$deltafin" inspect --model "$work/broken" 2>&1); then
  fail "inspect accepted a folder without a q_norm"
elif ! grep -q "missing tensor model.layers.1.self_attn.q_norm.weight" <<<"$out"; then
  fail "inspect: the missing q_norm is not named: $out"
fi

# logits --ids, mapped and with the spine streamed
for spine in auto stream; do
  if ! "$deltafin" logits --model "$case_dir" --ids "$prompt" --spine "$spine" \
      --out "$work/$spine.safetensors" 2>"$work/logits.err"; then
    cat "$work/logits.err" >&2
    fail "logits --spine $spine exited non-zero"
  fi
done
if report=$("$py" "$root/tools/compare_logits.py" "$case_dir/reference.safetensors" \
    "$work/auto.safetensors"); then
  echo "qwen3_dense: logits: $report"
else
  fail "logits: $report"
fi
cmp -s "$work/auto.safetensors" "$work/stream.safetensors" ||
  fail "logits with --spine stream differ from the mapped ones"

# generate --ids: greedy, with and without drafts (verify passes and commits)
for speculate in off ngram auto; do
  got=$("$deltafin" generate --model "$case_dir" --ids "$prompt" --max-new 16 --ignore-eos \
    --speculate "$speculate" 2>"$work/gen.err") || { cat "$work/gen.err" >&2; got="(exit $?)"; }
  [[ $got == "[$greedy]" ]] ||
    fail "generate --speculate $speculate printed $got, expected [$greedy]"
done
echo "qwen3_dense: generate: 16 greedy ids identical (speculation off, ngram, auto)"

# A text command: the oracle's folder ships no tokenizer.json (tests/e2e/drafters.sh runs text on a
# Qwen3 folder that has one).
if out=$("$deltafin" run --model "$case_dir" --prompt "hello" --max-new 2 2>&1); then
  fail "run --prompt succeeded on a folder without a tokenizer"
elif ! grep -q "has no tokenizer.json (the tokenizer)" <<<"$out"; then
  fail "run --prompt: unexpected error: $out"
fi

exit $failed
