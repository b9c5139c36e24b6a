#!/usr/bin/env bash
# End-to-end test of `deltafin draft`: the DSpark trace on the fixtures (k3-tiny-a drafted for by
# dspark-tiny-a) against the oracle's step table (context lengths, anchors, draft ids, accepted
# counts, new context lengths), and the --logits file against its draft logits (5e-4 of max|logit|).
# Then refusals: a damaged drafter folder fails naming the field or tensor, and `deltafin inspect`
# accepts the drafter folder and refuses one with a renamed tensor.
#   bash tests/e2e/draft_dspark.sh path/to/deltafin path/to/tests
set -uo pipefail
deltafin=$1
tests=$2
k3=$tests/fixtures/k3-tiny-a
drafter=$tests/fixtures/dspark-tiny-a
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prompt=488,250,115,269,384,67,152,153,398,289,199,395,485,75,449,114,323,470,200,333,180,382,244,329

if ! "$deltafin" draft --model "$k3" --drafter "$drafter" --ids "$prompt" --steps 6 --json \
  --logits "$work/logits.safetensors" >"$work/trace.json" 2>"$work/err"; then
  echo "FAIL: deltafin draft exited non-zero"
  cat "$work/err"
  exit 1
fi

python3 - "$work/trace.json" "$drafter/reference.safetensors" "$work/logits.safetensors" <<'PY' || exit 1
import json, struct, sys

def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        fmt = {"I32": "i", "F64": "d", "F32": "f"}[t["dtype"]]
        out[name] = struct.unpack("<%d%s" % ((e - b) // struct.calcsize(fmt), fmt), data[b:e])
    return out

trace = json.load(open(sys.argv[1]))
ref = read(sys.argv[2])
got = read(sys.argv[3])
fails = []
steps = trace["steps"]
if len(steps) != 6:
    fails.append("expected 6 steps, got %d" % len(steps))
for s, st in enumerate(steps):
    for key, ref_key in [("context_length", "step_ctx_len"), ("anchor", "step_anchor"),
                         ("accepted", "step_accepted"), ("new_context_length", "step_new_ctx_len")]:
        if st[key] != ref[ref_key][s]:
            fails.append("step %d: %s %s, oracle %s" % (s, key, st[key], ref[ref_key][s]))
    want = list(ref["step_draft_ids"][7 * s:7 * s + 7])
    if st["draft_ids"] != want:
        fails.append("step %d: drafts %s, oracle %s" % (s, st["draft_ids"], want))
    if len(st["confidence"]) != 7 or any(abs(a - b) > 1e-4 for a, b in
                                         zip(st["confidence"], ref["step_confidence"][7 * s:7 * s + 7])):
        fails.append("step %d: confidence %s" % (s, st["confidence"]))
if list(trace["target_ids"][:17]) != list(ref["target_ids"]):
    fails.append("target ids %s, oracle %s" % (trace["target_ids"], list(ref["target_ids"])))
for name, ref_name in [("logits", "step_logits"), ("logits_markov", "step_logits_markov")]:
    a, b = got[name], ref[ref_name]
    if len(a) != len(b):
        fails.append("%s: %d values, oracle %d" % (name, len(a), len(b)))
        continue
    err = max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)
    print("%s: max err / max|logit| %.3g" % (name, err))
    if err > 5e-4:
        fails.append("%s: error %.3g over 5e-4" % (name, err))
for f in fails:
    print("FAIL: " + f)
if fails:
    sys.exit(1)
print("ok: the trace matches the oracle's step table")
PY

failures=0
# expect_refused NAME DIR TEXT: a non-zero exit whose output holds TEXT.
expect_refused() {
  local out rc
  out=$("$deltafin" draft --model "$k3" --drafter "$2" --ids "$prompt" --steps 1 2>&1)
  rc=$?
  if [[ $rc == 0 ]] || ! grep -qF -- "$3" <<<"$out"; then
    echo "FAIL: $1: exit $rc, output: $out"
    failures=$((failures + 1))
  else
    echo "ok: $1 (exit $rc)"
  fi
}
bad=$work/bad
cp -r "$drafter" "$bad" && chmod -R u+w "$bad"
sed -i 's/"markov_rank": 48/"markov_rank": 40/' "$bad/config.json"
expect_refused "markov_rank mismatch" "$bad" "markov_head.markov_w1.weight"
cp "$drafter/config.json" "$bad/config.json" && chmod u+w "$bad/config.json"
sed -i 's/"target_num_hidden_layers": 13/"target_num_hidden_layers": 12/' "$bad/config.json"
expect_refused "target layer count" "$bad" "target_num_hidden_layers 12 differs"
cp "$drafter/config.json" "$bad/config.json"
sed -i 's/"k3_dspark"/"k3_dflash"/' "$bad/config.json"
expect_refused "model_type" "$bad" "model_type"

# `deltafin inspect` checks a drafter folder like a model folder.
out=$("$deltafin" inspect --model "$drafter" 2>&1)
if [[ $? != 0 ]] || ! grep -q "^check        OK" <<<"$out"; then
  echo "FAIL: inspect of the drafter fixture: $out"
  failures=$((failures + 1))
else
  echo "ok: inspect accepts the drafter fixture"
fi
rm -rf "$bad" && cp -r "$drafter" "$bad" && chmod -R u+w "$bad"
python3 - "$bad/model.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = open(p, "rb").read()
open(p, "wb").write(b.replace(b'"final_norm.weight"', b'"final_norx.weight"', 1))
PY
out=$("$deltafin" inspect --model "$bad" 2>&1)
if [[ $? == 0 ]] || ! grep -qF "missing tensor final_norm.weight" <<<"$out"; then
  echo "FAIL: inspect of a renamed tensor: $out"
  failures=$((failures + 1))
else
  echo "ok: inspect refuses a renamed tensor"
fi
exit $((failures > 0))
