#!/usr/bin/env bash
# End-to-end test of the lossy int8 spine (issue #21 part 2, docs/QUALITY.md): `convert-spine
# --int8` on the synth demo (files, a rerun that skips every verified file, --verify catching a
# corrupted file, a resumed run rewriting only what is missing or changed, --lm-head); refusals
# before conversion and of an unfinished one; `eval --variant '--spine-dtype int8'` reporting KL > 0
# and labelling the variant lossy on random weights; on weights that per-row int8 holds exactly
# (rows of q * 2^k), the int8 path equal to BF16 up to fp32 rounding (top-1 1, greedy identical),
# which checks the binding itself; the int8 path streamed equal to it mapped, reading fewer spine
# bytes; and the labels (--stats, bench decode JSON, logits metadata, /v1/models, responses'
# "model").
#   bash tests/e2e/int8_spine.sh path/to/deltafin path/to/tests
set -uo pipefail
deltafin=$1
tests=$2
root=$(cd "$tests/.." && pwd)
work=$(mktemp -d)
py=/usr/bin/python3
export DF_TOOLS="$root/tools"
failures=0
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "int8_spine: FAIL: $*" >&2
  failures=$((failures + 1))
}
ok() { echo "int8_spine: $*"; }
json() {  # json FILE EXPR: a Python expression over the parsed file, bound to d
  "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
convert() {  # convert NAME ARGS...: convert-spine into $work/NAME.json (stderr NAME.err)
  local name=$1
  shift
  "$deltafin" convert-spine "$@" >"$work/$name.json" 2>"$work/$name.err"
}

"$deltafin" synth --preset demo --out "$work/demo" --no-drafters >/dev/null 2>"$work/synth.err" ||
  { cat "$work/synth.err" >&2; exit 1; }
demo=$work/demo
layers=$(json "$demo/config.json" "d['text_config']['num_hidden_layers']")

# 1. Before conversion the option is refused, naming the command that writes the spine.
out=$("$deltafin" generate --model "$demo" --ids 1,2,3 --max-new 2 --spine-dtype int8 2>&1) &&
  fail "int8 before conversion: exit 0"
grep -qF "deltafin convert-spine --model $demo --int8" <<<"$out" ||
  fail "int8 before conversion: the refusal does not name convert-spine: $out"
out=$("$deltafin" generate --model "$demo" --ids 1,2,3 --spine-dtype int4 2>&1) &&
  fail "--spine-dtype int4: exit 0"
grep -qF -- "--spine-dtype must be bf16 or int8" <<<"$out" || fail "--spine-dtype int4: $out"

# 2. Conversion, a rerun that skips every file, and --verify.
if convert first --model "$demo" --int8; then
  spine=$demo/spine-int8
  n=$(ls "$spine"/layer-*.safetensors | wc -l)
  [[ $n == "$layers" ]] || fail "convert: $n layer files for $layers layers"
  [[ $(json "$work/first.json" "d['skipped'] == 0 and d['file_bytes'] < 0.6 * d['source_bytes']") == True ]] ||
    fail "convert: $(cat "$work/first.json")"
  [[ $(json "$spine/manifest.json" "d['complete'] and d['lossy'] and len(d['files']) == $layers") == True ]] ||
    fail "convert: the manifest is not complete"
  grep -q "convert-spine: $layers/$layers layer-" "$work/first.err" || fail "convert: no progress"
  ls "$spine"/*.tmp >/dev/null 2>&1 && fail "convert: temporary files left"
  convert again --model "$demo" --int8 || fail "rerun exited non-zero"
  [[ $(json "$work/again.json" "d['skipped']") == "$layers" ]] ||
    fail "rerun: skipped $(json "$work/again.json" "d['skipped']") of $layers"
  convert verify --model "$demo" --int8 --verify &&
    [[ $(json "$work/verify.json" "d['verified']") == True ]] || fail "verify: $(cat "$work/verify.json")"
  ok "converted $layers layers ($(json "$work/first.json" "d['source_bytes']") -> $(json "$work/first.json" "d['file_bytes']") bytes), rerun skipped all, verified"

  # A corrupted file: --verify names it and fails; a rerun rewrites that one file only.
  printf 'X' | dd of="$spine/layer-00003.safetensors" bs=1 seek=4000 conv=notrunc 2>/dev/null
  convert corrupt --model "$demo" --int8 --verify && fail "verify of a corrupted file: exit 0"
  grep -q "layer-00003.safetensors: sha256 differs" "$work/corrupt.err" ||
    fail "verify does not name the corrupted file: $(cat "$work/corrupt.err")"
  convert repair --model "$demo" --int8 &&
    [[ $(json "$work/repair.json" "d['skipped']") == $((layers - 1)) ]] ||
    fail "repair: $(cat "$work/repair.json")"
  convert verify2 --model "$demo" --int8 --verify || fail "verify after repair failed"
  ok "a corrupted file is found by --verify and rewritten alone"

  # An interrupted run: two layer files gone and the manifest unfinished. Loading refuses; a rerun
  # resumes, writing the two.
  rm -f "$spine/layer-00001.safetensors" "$spine/layer-00007.safetensors"
  "$py" -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); d['complete']=False; json.dump(d, open(p,'w'))" \
    "$spine/manifest.json"
  out=$("$deltafin" generate --model "$demo" --ids 1,2,3 --max-new 2 --spine-dtype int8 2>&1) &&
    fail "an unfinished spine: exit 0"
  grep -q "has not finished" <<<"$out" || fail "an unfinished spine: $out"
  convert resume --model "$demo" --int8 &&
    [[ $(json "$work/resume.json" "d['skipped']") == $((layers - 2)) ]] ||
    fail "resume: $(cat "$work/resume.json")"
  ok "an unfinished conversion is refused at load and resumed (2 files written, $((layers - 2)) skipped)"
fi

# 3. eval: the int8 spine against the exact path on random weights (KL > 0), labelled lossy.
corpus="The quick brown fox jumps over the lazy dog. deltafin decides every token at the precision \
it was shipped; a lossy option is measured against the exact path."
echo "$corpus $corpus" >"$work/corpus.txt"
printf 'The capital of France is\nOnce upon a time\n' >"$work/prompts.txt"
if "$deltafin" eval --json --model "$demo" --corpus "$work/corpus.txt" --window 40 \
    --prompts "$work/prompts.txt" --max-new 8 --variant "--spine-dtype int8" \
    >"$work/eval.json" 2>"$work/eval.err"; then
  c="d['comparison']"
  [[ $(json "$work/eval.json" "$c['kl']['mean'] > 0 and not $c['matches_exact']") == True ]] ||
    fail "eval: KL $(json "$work/eval.json" "$c['kl']")"
  [[ $(json "$work/eval.json" "d['variant']['lossy'] and d['variant']['spine_dtype'] == 'int8'") == True ]] ||
    fail "eval: the report does not label the variant lossy"
  grep -q "variant: --spine-dtype int8 (lossy: int8 spine)" "$work/eval.err" ||
    fail "eval: the summary does not label the variant lossy"
  ok "eval on random weights: KL mean $(json "$work/eval.json" "$c['kl']['mean']"), top-1 $(json "$work/eval.json" "$c['top1_agreement']")"
else
  tail -5 "$work/eval.err" >&2
  fail "eval exited non-zero"
fi
# Within the int8 path, streaming changes nothing: streamed spine and experts equal mapped.
if "$deltafin" eval --json --model "$demo" --corpus "$work/corpus.txt" --window 40 \
    --prompts "$work/prompts.txt" --max-new 8 --engine-flags "--spine-dtype int8" \
    --variant "--spine-dtype int8 --spine stream --experts stream --prefill-group 16" \
    >"$work/eval-stream.json" 2>"$work/eval-stream.err"; then
  [[ $(json "$work/eval-stream.json" "d['comparison']['matches_exact']") == True ]] ||
    fail "int8 streamed differs from int8 mapped: $(json "$work/eval-stream.json" "d['comparison']['kl']")"
  ok "int8 streamed equals int8 mapped"
else
  tail -5 "$work/eval-stream.err" >&2
  fail "eval (int8 streamed) exited non-zero"
fi

# 4. The binding: on weights per-row int8 holds exactly (the lm_head's too, converted with
# --lm-head), int8 equals BF16 up to fp32 rounding.
exact=$work/exact
cp -r "$demo" "$exact"
"$py" - "$exact" <<'PY' || fail "could not rewrite the weights"
import json, os, struct, sys
import numpy as np
model = sys.argv[1]
manifest = json.load(open(os.path.join(model, "spine-int8", "manifest.json")))
targets = {s["name"] for f in manifest["files"].values() for s in f["sources"] if s["int8"]}
index = json.load(open(os.path.join(model, "model.safetensors.index.json")))["weight_map"]
targets |= {n for n in index if n.endswith("lm_head.weight")}  # converted with --lm-head below
for shard in sorted(set(index[n] for n in targets)):
    path = os.path.join(model, shard)
    raw = bytearray(open(path, "rb").read())
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    for name, info in header.items():
        if name not in targets:
            continue
        b, e = info["data_offsets"]
        rows, cols = info["shape"]
        w = np.frombuffer(bytes(raw[8 + n + b:8 + n + e]), dtype=np.uint16).reshape(rows, cols)
        w = (w.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        out = np.zeros_like(w)
        for r in range(rows):  # q * 2^k, |q| <= 127, the largest +-127: exact in BF16 and int8
            m = np.abs(w[r]).max()
            if m == 0:
                continue
            k = np.floor(np.log2(m / 127))
            q = np.clip(np.rint(w[r] / 2.0**k), -127, 127)
            q[np.argmax(np.abs(w[r]))] = 127
            out[r] = q * 2.0**k
        bits = (out.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        assert ((bits.astype(np.uint32) << 16).view(np.float32) == out.astype(np.float32)).all()
        raw[8 + n + b:8 + n + e] = bits.tobytes()
    open(path, "wb").write(raw)
PY
# The sources changed, so every file converts again.
if convert exact-convert --model "$exact" --int8 --lm-head; then
  [[ $(json "$work/exact-convert.json" "d['skipped']") == 0 ]] ||
    fail "changed sources: $(json "$work/exact-convert.json" "d['skipped']") files skipped"
  if "$deltafin" eval --json --model "$exact" --corpus "$work/corpus.txt" --window 40 \
      --prompts "$work/prompts.txt" --max-new 8 --variant "--spine-dtype int8" \
      >"$work/eval-exact.json" 2>"$work/eval-exact.err"; then
    c="d['comparison']"
    [[ $(json "$work/eval-exact.json" "$c['kl']['max'] < 1e-6 and $c['top1_agreement'] == 1 and $c['greedy']['diverged'] == 0") == True ]] ||
      fail "int8-exact weights: KL $(json "$work/eval-exact.json" "$c['kl']"), top-1 $(json "$work/eval-exact.json" "$c['top1_agreement']")"
    ok "int8-exact weights: KL max $(json "$work/eval-exact.json" "$c['kl']['max']"), top-1 1, greedy identical"
  else
    tail -5 "$work/eval-exact.err" >&2
    fail "eval (int8-exact weights) exited non-zero"
  fi
fi

# 5. Labels: --stats lines, the startup message, bench decode JSON, fewer streamed spine bytes.
"$deltafin" generate --model "$demo" --ids 1,2,3 --max-new 3 --ignore-eos --spine-dtype int8 \
  --spine stream --experts stream --stats >/dev/null 2>"$work/stats.err" || fail "generate --stats"
grep -q "^token 2 \[int8 spine, lossy\]: " "$work/stats.err" || fail "--stats lines lack the label"
grep -q "int8 spine (lossy, --spine-dtype int8): memory budget" "$work/stats.err" ||
  fail "the startup message lacks the label"
for d in bf16 int8; do
  "$deltafin" bench decode --model "$demo" --tokens 3 --prompt-tokens 4 --spine stream \
    --experts stream --spine-dtype "$d" --json >"$work/bench-$d.json" 2>"$work/bench-$d.err" ||
    { tail -3 "$work/bench-$d.err" >&2; fail "bench decode --spine-dtype $d"; }
done
[[ $(json "$work/bench-int8.json" "d['spine_dtype'] == 'int8' and d['lossy'] is True") == True ]] ||
  fail "bench decode JSON lacks spine_dtype/lossy"
[[ $(json "$work/bench-bf16.json" "d['spine_dtype'] == 'bf16' and d['lossy'] is False") == True ]] ||
  fail "bench decode JSON (bf16) mislabelled"
ratio=$("$py" -c "import json; a=json.load(open('$work/bench-int8.json')); b=json.load(open('$work/bench-bf16.json')); print(a['needed_bytes_per_token'] / b['needed_bytes_per_token'])")
"$py" -c "import sys; sys.exit(0 if float('$ratio') < 0.8 else 1)" ||
  fail "int8 needs $ratio of bf16's bytes per token"
ok "labels in --stats, startup and bench JSON; int8 needs $ratio of bf16's bytes per token"

# deltafin logits: the file's metadata says lossy.
"$deltafin" logits --model "$demo" --ids 1,2,3 --out "$work/logits.st" --spine-dtype int8 \
  2>/dev/null || fail "logits --spine-dtype int8"
[[ $("$py" -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; m=json.loads(f.read(n))['__metadata__']; print(m.get('deltafin_lossy') == 'true' and m.get('deltafin_spine_dtype') == 'int8')" "$work/logits.st") == True ]] ||
  fail "logits: the file's metadata does not say lossy"

# /v1/models: the id carries -int8-spine and a deltafin object says lossy.
port=$((20000 + RANDOM % 20000))
"$deltafin" serve --model "$demo" --port "$port" --spine-dtype int8 >"$work/serve.out" \
  2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 100); do
  curl -s "http://127.0.0.1:$port/v1/models" >"$work/models.json" 2>/dev/null && break
  sleep 0.1
done
if [[ $(json "$work/models.json" "d['data'][0]['id'].endswith('-int8-spine') and d['data'][0]['deltafin']['lossy'] and d['data'][0]['deltafin']['spine_dtype'] == 'int8'") == True ]]; then
  ok "/v1/models: $(json "$work/models.json" "d['data'][0]['id']")"
else
  fail "/v1/models: $(cat "$work/models.json")"
fi
# The exact model's name is not this engine's: refused; the lossy id is served and echoed.
chat() {  # chat MODEL -> the response body
  curl -s -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/chat/completions" \
    -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}"
}
grep -q model_not_found <<<"$(chat demo)" || fail "serve: the exact model's name was accepted"
grep -q '"model":"demo-int8-spine"' <<<"$(chat demo-int8-spine)" ||
  fail "serve: a response does not name the lossy model"
kill "$server_pid" 2>/dev/null
wait "$server_pid" 2>/dev/null
server_pid=

if ((failures > 0)); then
  echo "int8_spine: $failures failure(s)" >&2
  exit 1
fi
echo "int8_spine: all checks passed"
