#!/usr/bin/env bash
# End-to-end test of `deltafin eval` (issue #21, docs/QUALITY.md). On the synth demo (its own
# tokenizer, a corpus in several windows) and on the k3-tiny-a oracle: variants that must be exact
# (streamed experts and spine, other prefill groups, speculation) report KL 0 at every position,
# top-1 agreement 1 and no greedy divergence, also against a saved exact run (--save-exact,
# --exact-from); a variant that is not exact (--chunk 3: the KDA's other rounding) reports KL > 0,
# and its figures equal an independent numpy computation from `deltafin logits` of both paths; the
# exact path's NLL and greedy ids agree with the oracle's float64 reference; and the refusals (other
# ids, other model, the size bound, bad variant flags) name what is wrong.
#   bash tests/e2e/eval.sh path/to/deltafin path/to/tests
set -uo pipefail
deltafin=$1
tests=$2
root=$(cd "$tests/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
export DF_TOOLS="$root/tools"
failures=0

fail() {
  echo "eval: FAIL: $*" >&2
  failures=$((failures + 1))
}
json() {  # json FILE EXPR: a Python expression over the parsed file, bound to d
  "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
ids_of() {  # ids_of FILE TENSOR -> "1,2,3"
  "$py" - "$1" "$2" <<'PY'
import os, sys
sys.path.insert(0, os.environ["DF_TOOLS"])
from compare_logits import read_safetensors
print(",".join(str(int(i)) for i in read_safetensors(sys.argv[1])[sys.argv[2]].reshape(-1)))
PY
}

# eval_json NAME ARGS...: runs eval --json into $work/NAME.json (stderr in NAME.err); 0 on success.
eval_json() {
  local name=$1
  shift
  if ! "$deltafin" eval --json "$@" >"$work/$name.json" 2>"$work/$name.err"; then
    tail -5 "$work/$name.err" >&2
    fail "$name: eval exited non-zero"
    return 1
  fi
}

# expect_exact NAME: every KL 0, top-1 agreement 1, no greedy divergence, the summary says so.
expect_exact() {
  local f=$work/$1.json c
  c="d['comparison']"
  if [[ $(json "$f" "$c['kl']['max'] == 0 and $c['kl']['mean'] == 0") != True ]]; then
    fail "$1: KL is not 0: $(json "$f" "$c['kl']")"
  elif [[ $(json "$f" "$c['top1_agreement'] == 1 and $c['top5_overlap'] == 1") != True ]]; then
    fail "$1: top-1 $(json "$f" "$c['top1_agreement']"), top-5 $(json "$f" "$c['top5_overlap']")"
  elif [[ $(json "$f" "$c['greedy']['diverged']") != 0 ]]; then
    fail "$1: greedy diverged: $(json "$f" "$c['greedy']['first_difference']")"
  elif [[ $(json "$f" "$c['matches_exact']") != True ]] ||
      ! grep -q "the variant matches the exact path" "$work/$1.err"; then
    fail "$1: not reported as matching"
  else
    echo "eval: $1: $(json "$f" "$c['positions']") positions KL 0, top-1 1, $(json "$f" "$c['greedy']['prompts']") greedy prompts identical"
  fi
}

# expect_refused NAME TEXT ARGS...: non-zero exit and TEXT (a fixed string) in the output.
expect_refused() {
  local name=$1 text=$2 out rc
  shift 2
  out=$("$deltafin" eval "$@" 2>&1)
  rc=$?
  if [[ $rc == 0 ]]; then
    fail "$name: exit 0, expected a refusal"
  elif ! grep -qF -- "$text" <<<"$out"; then
    fail "$name: output lacks '$text'"
    echo "$out" | tail -5 >&2
  else
    echo "eval: $name: refused (exit $rc)"
  fi
}

# check_against_numpy NAME DIR IDS FLAGS: the eval NAME (one window over IDS, --per-position) must
# give, at every position, the KL, NLLs and top-1/top-5 that numpy computes in float64 from
# `deltafin logits` of the exact path and of the variant FLAGS.
check_against_numpy() {
  local name=$1 dir=$2 ids=$3 flags=$4
  read -r -a fl <<<"$flags"
  "$deltafin" logits --model "$dir" --ids "$ids" --out "$work/$name.exact.st" 2>/dev/null &&
    "$deltafin" logits --model "$dir" --ids "$ids" --out "$work/$name.variant.st" "${fl[@]}" \
      2>/dev/null || { fail "$name: deltafin logits exited non-zero"; return; }
  if ! report=$("$py" - "$work/$name.exact.st" "$work/$name.variant.st" "$work/$name.json" \
      "$ids" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["DF_TOOLS"])
import numpy as np
from compare_logits import read_safetensors
p = read_safetensors(sys.argv[1])["logits"].astype(np.float64)
q = read_safetensors(sys.argv[2])["logits"].astype(np.float64)
got = json.load(open(sys.argv[3]))["comparison"]["per_position"]
ids = [int(x) for x in sys.argv[4].split(",")]
def log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
lp, lq = log_softmax(p), log_softmax(q)
n = len(ids) - 1
kl = (np.exp(lp[:n]) * (lp[:n] - lq[:n])).sum(axis=1)
nll_p = -lp[np.arange(n), ids[1:]]
nll_q = -lq[np.arange(n), ids[1:]]
def top(x, k):  # highest first, ties to the lower id
    return [sorted(range(len(r)), key=lambda i: (-r[i], i))[:k] for r in x]
tp, tq = top(p[:n], 5), top(q[:n], 5)
assert got["position"] == list(range(n)), got["position"]
bad = []
for t in range(n):
    # KL is a sum of terms that cancel: double's rounding leaves ~1e-16 x the entropy.
    if abs(got["kl"][t] - max(kl[t], 0)) > 1e-6 * abs(kl[t]) + 1e-14:
        bad.append(f"kl[{t}] {got['kl'][t]} vs {kl[t]}")
    if abs(got["nll_exact"][t] - nll_p[t]) > 1e-12 or abs(got["nll_variant"][t] - nll_q[t]) > 1e-12:
        bad.append(f"nll[{t}]")
    if got["top1_exact"][t] != tp[t][0] or got["top1_variant"][t] != tq[t][0]:
        bad.append(f"top1[{t}]")
    if got["top5_overlap"][t] != len(set(tp[t]) & set(tq[t])) / 5:
        bad.append(f"top5[{t}]")
if bad:
    print("; ".join(bad[:5]))
    sys.exit(1)
print(f"{n} positions, KL max {kl.max():.3e} mean {kl.mean():.3e}")
PY
  ); then
    fail "$name: eval's figures differ from numpy's: $report"
  else
    echo "eval: $name: equals numpy's figures from deltafin logits ($report)"
  fi
}

"$deltafin" synth --preset demo --out "$work/demo" --no-drafters >/dev/null 2>"$work/synth.err" ||
  { cat "$work/synth.err" >&2; exit 1; }
demo=$work/demo
corpus="The quick brown fox jumps over the lazy dog. deltafin decides every token at the precision \
it was shipped; a lossy option is measured against the exact path. Once upon a time there was a \
model larger than memory, and its experts were read from disk one token at a time."
echo "$corpus $corpus" >"$work/corpus.txt"
printf 'The capital of France is\nOnce upon a time\n' >"$work/prompts.txt"

# 1. The demo: a corpus in windows of 40 ids (several prefill passes of 16 rows in the variant).
if eval_json demo-stream --model "$demo" --corpus "$work/corpus.txt" --window 40 \
    --prompts "$work/prompts.txt" --max-new 12 --engine-flags "--experts mapped --no-prefetch" \
    --variant "--experts stream --spine stream --expert-slots 5 --prefill-group 16" \
    --per-position; then
  expect_exact demo-stream
  [[ $(json "$work/demo-stream.json" "d['windows'] > 1 and d['comparison']['positions'] == d['corpus_ids'] - d['windows']") == True ]] ||
    fail "demo-stream: expected several windows and one position fewer than ids per window"
  [[ $(json "$work/demo-stream.json" "len(d['comparison']['per_position']['kl']) == d['comparison']['positions']") == True ]] ||
    fail "demo-stream: --per-position arrays are not one entry per position"
  grep -q "exact:   --experts mapped --no-prefetch" "$work/demo-stream.err" ||
    fail "demo-stream: the summary does not name the exact path's flags"
fi

# 2. Save the exact run once, then compare two exact variants against the file.
if eval_json demo-save --model "$demo" --corpus "$work/corpus.txt" --window 40 \
    --prompts "$work/prompts.txt" --max-new 12 --save-exact "$work/exact.safetensors"; then
  [[ -s $work/exact.safetensors ]] || fail "demo-save: no file"
  grep -q "saved:   $work/exact.safetensors" "$work/demo-save.err" || fail "demo-save: no saved line"
  eval_json demo-from-group --model "$demo" --exact-from "$work/exact.safetensors" \
    --variant "--prefill-group 8 --experts stream" && expect_exact demo-from-group
  # Ids given again must be the file's; speculation must not change a greedy id.
  eval_json demo-from-speculate --model "$demo" --exact-from "$work/exact.safetensors" \
    --corpus "$work/corpus.txt" --window 40 --prompts "$work/prompts.txt" --max-new 12 \
    --variant "--speculate ngram --draft-min 3" && expect_exact demo-from-speculate
  [[ $(json "$work/demo-from-group.json" "d['exact']['from_file']") == True ]] ||
    fail "demo-from-group: the report does not say the exact run came from the file"
fi

# 3. A variant that is not exact: attention chunks of 3 rows round the KDA differently.
if eval_json demo-chunk3 --model "$demo" --corpus "$work/corpus.txt" --window 40 \
    --prompts "$work/prompts.txt" --max-new 12 --variant "--chunk 3"; then
  [[ $(json "$work/demo-chunk3.json" "d['comparison']['kl']['max'] > 0 and not d['comparison']['matches_exact']") == True ]] ||
    fail "demo-chunk3: a lossy variant reported KL 0: $(json "$work/demo-chunk3.json" "d['comparison']['kl']")"
  grep -q "the variant differs from the exact path" "$work/demo-chunk3.err" ||
    fail "demo-chunk3: the summary does not say it differs"
  echo "eval: demo-chunk3: KL max $(json "$work/demo-chunk3.json" "d['comparison']['kl']['max']") > 0, reported as differing"
fi
# The corpus as the saved file holds it (the model's own tokenization), read by numpy.
demo_ids=$([[ -s $work/exact.safetensors ]] && ids_of "$work/exact.safetensors" corpus_ids)
if [[ -n $demo_ids ]] && eval_json demo-numpy --model "$demo" --ids "$demo_ids" --window 4096 \
    --variant "--chunk 3" --per-position; then
  check_against_numpy demo-numpy "$demo" "$demo_ids" "--chunk 3"
fi

# 4. The k3-tiny-a oracle: ids only (no tokenizer in the fixture).
oracle=$tests/fixtures/k3-tiny-a
prompt=$(ids_of "$oracle/reference.safetensors" prompt_ids)
greedy=$(ids_of "$oracle/reference.safetensors" greedy_ids)
n_new=$(awk -F, '{print NF}' <<<"$greedy")
if eval_json oracle-stream --model "$oracle" --ids "$prompt" --prompt-ids "$prompt" \
    --max-new "$n_new" --variant "--experts stream --spine stream --expert-slots 3 --prefill-group 5" \
    --window 12 --per-position; then
  expect_exact oracle-stream
  [[ $(json "$work/oracle-stream.json" "','.join(map(str, d['comparison']['greedy']['exact_ids'][0]))") == "$greedy" ]] ||
    fail "oracle-stream: the exact path's greedy ids are not the oracle's"
fi
if eval_json oracle-nll --model "$oracle" --ids "$prompt" --variant "--chunk 3" --per-position; then
  # The exact path's NLL against the float64 reference's (logits within 5e-4 of the largest).
  if report=$("$py" - "$oracle/reference.safetensors" "$work/oracle-nll.json" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["DF_TOOLS"])
import numpy as np
from compare_logits import read_safetensors
ref = read_safetensors(sys.argv[1])
x = ref["logits"].astype(np.float64)
ids = ref["prompt_ids"].astype(np.int64)
m = x.max(axis=1, keepdims=True)
lp = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
nll = -lp[np.arange(len(ids) - 1), ids[1:]].mean()
got = json.load(open(sys.argv[2]))["comparison"]["nll"]["exact"]
print(f"exact NLL {got:.6f}, float64 reference {nll:.6f}")
sys.exit(0 if abs(got - nll) < 1e-3 else 1)
PY
  ); then
    echo "eval: oracle-nll: $report"
  else
    fail "oracle-nll: $report"
  fi
  check_against_numpy oracle-nll "$oracle" "$prompt" "--chunk 3"
fi

# 5. Refusals, each naming what is wrong.
[[ -s $work/exact.safetensors ]] && {
  expect_refused other-ids "they differ from position 0" --model "$demo" \
    --exact-from "$work/exact.safetensors" --ids 1,2,3 --variant "--experts stream"
  expect_refused other-window "was made with --window 40" --model "$demo" \
    --exact-from "$work/exact.safetensors" --window 64 --variant ""
  expect_refused other-model "holds the exact logits of another model" --model "$oracle" \
    --exact-from "$work/exact.safetensors" --variant ""
  # The same config with other weights (another seed) is another model too.
  "$deltafin" synth --preset demo --seed 12 --out "$work/demo12" --no-drafters >/dev/null 2>&1
  cmp -s "$demo/config.json" "$work/demo12/config.json" || fail "seed 12 changed config.json"
  expect_refused other-weights "holds the exact logits of another model" --model "$work/demo12" \
    --exact-from "$work/exact.safetensors" --variant ""
}
expect_refused size-bound "over --max-saved-bytes" --model "$demo" --corpus "$work/corpus.txt" \
  --max-saved-bytes 64K --variant "--experts stream"
expect_refused bad-variant "deltafin eval --variant: --experts must be auto, mapped or stream" \
  --model "$demo" --ids 1,2,3 --variant "--experts sideways"
expect_refused unknown-variant "unknown option --frobnicate" --model "$demo" --ids 1,2,3 \
  --variant "--frobnicate 3"
expect_refused nothing-to-do "nothing to do" --model "$demo" --ids 1,2,3
expect_refused not-an-eval-file "not a saved exact run" --model "$demo" \
  --exact-from "$oracle/reference.safetensors" --variant ""

if ((failures > 0)); then
  echo "eval: $failures failure(s)" >&2
  exit 1
fi
echo "eval: all checks passed"
