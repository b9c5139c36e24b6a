#!/usr/bin/env bash
# `deltafin run` and `deltafin demo` on the demo model: chat with labelled reasoning/answer when
# not on a terminal, raw continuation, --stats, the model lookup ($DELTAFIN_MODEL, the install
# location, the message when there is none), Ctrl-C keeping what was printed, the demo's cache;
# and the CLI's token-id lists (--ids "1,2,3" in, [1,2,3] out; a bad item is named).
# usage: run_cli.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tmp=$(mktemp -d)
bg=""
trap '[[ -n $bg ]] && kill -KILL "$bg" 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
export DELTAFIN_HOME=$tmp/home  # nothing installed there
unset DELTAFIN_MODEL XDG_DATA_HOME XDG_CACHE_HOME
"$deltafin" synth --out "$tmp/demo" --preset demo >/dev/null

# No model anywhere: a clear message naming both ways forward.
if "$deltafin" run --prompt hi >"$tmp/out" 2>"$tmp/err"; then fail "ran without a model"; fi
grep -q "deltafin setup" "$tmp/err" && grep -q "deltafin demo" "$tmp/err" ||
  fail "no-model message: $(cat "$tmp/err")"

# Chat, not on a terminal: labelled channels; the same output twice (greedy).
"$deltafin" run --model "$tmp/demo" --chat --prompt "Hello" --max-new 16 >"$tmp/chat1" 2>/dev/null
head -1 "$tmp/chat1" | grep -qx '\[reasoning\]' || fail "chat output has no [reasoning] label"
DELTAFIN_MODEL=$tmp/demo "$deltafin" run --chat --prompt "Hello" --max-new 16 >"$tmp/chat2" 2>/dev/null
cmp -s "$tmp/chat1" "$tmp/chat2" || fail "\$DELTAFIN_MODEL run differs from --model run"
"$deltafin" run --model "$tmp/demo" --chat --no-think --prompt "Hello" --max-new 8 >"$tmp/plain" 2>/dev/null
head -1 "$tmp/plain" | grep -qx '\[answer\]' || fail "--no-think output is not labelled [answer]"

# Raw continuation with --stats.
"$deltafin" run --model "$tmp/demo" --prompt "Once upon a time" --max-new 12 --stats \
  >"$tmp/raw" 2>"$tmp/raw.err"
[[ -s $tmp/raw ]] || fail "raw continuation printed nothing"
grep -q "^stats: 12 tokens in" "$tmp/raw.err" || fail "--stats: $(cat "$tmp/raw.err")"
grep -q "per token: min" "$tmp/raw.err" || fail "--stats has no per-token summary"
[[ $(grep -c "^stats: token [0-9]*: wall" "$tmp/raw.err") == 11 ]] ||
  fail "--stats: want one pass line per token after the first"
grep -q "^stats: prompt ([0-9]* ids): wall" "$tmp/raw.err" || fail "--stats: no line for the prompt's pass"
if "$deltafin" run --model "$tmp/demo" --prompt x --effort high 2>/dev/null; then
  fail "--effort without --chat was accepted"
fi

# Sampling and chunk flags are checked as serve checks them, before the model loads: NaN, infinities
# and negatives are refused, naming the flag (issue #22).
for bad in "--temperature nan" "--temperature inf" "--temperature -1" "--temperature 1e999" \
  "--top-p nan" "--chunk 0" "--chunk -4"; do
  # shellcheck disable=SC2086  # $bad is a flag and its value
  if "$deltafin" run --model "$tmp/demo" --prompt x --max-new 1 $bad >/dev/null 2>"$tmp/flag.err"; then
    fail "run $bad was accepted"
  fi
  grep -q -- "deltafin run: ${bad%% *} must be" "$tmp/flag.err" ||
    fail "run $bad: $(cat "$tmp/flag.err")"
done
if "$deltafin" generate --model "$tmp/demo" --ids 1 --chunk 0 >/dev/null 2>&1; then
  fail "generate --chunk 0 was accepted"
fi

# A folder whose tokenizer lacks a chat special token: `run --chat` and `serve` both refuse it at
# startup (serve used to listen and answer every chat request with 500); an eos_token_id outside
# the vocabulary is refused by the loader, naming the field and vocab_size (issue #22).
cp -r "$tmp/demo" "$tmp/nochat"
python3 - "$tmp/nochat/tokenizer_config.json" <<'PY'
import json, sys
path = sys.argv[1]
c = json.load(open(path))
c["added_tokens_decoder"] = {k: v for k, v in c["added_tokens_decoder"].items() if v["content"] != "<|open|>"}
json.dump(c, open(path, "w"), indent=2)
PY
if "$deltafin" run --model "$tmp/nochat" --chat --prompt hi --max-new 1 >/dev/null 2>"$tmp/nochat.err"; then
  fail "run --chat accepted a tokenizer without <|open|>"
fi
status=0
timeout 30 "$deltafin" serve --model "$tmp/nochat" --port 0 >/dev/null 2>"$tmp/nochat.err" || status=$?
[[ $status == 1 ]] || fail "serve on a tokenizer without <|open|>: status $status, want 1"
grep -q "cannot serve the chat format.*no special token <|open|>" "$tmp/nochat.err" ||
  fail "serve's refusal: $(tail -1 "$tmp/nochat.err")"
cp -r "$tmp/demo" "$tmp/badeos"
python3 - "$tmp/badeos/config.json" <<'PY'
import json, sys
path = sys.argv[1]
c = json.load(open(path))
c["text_config"]["eos_token_id"] = c["eos_token_id"] = c["text_config"]["vocab_size"] + 5
json.dump(c, open(path, "w"), indent=2)
PY
if "$deltafin" run --model "$tmp/badeos" --prompt hi --max-new 1 >/dev/null 2>"$tmp/badeos.err"; then
  fail "an eos_token_id outside the vocabulary was accepted"
fi
grep -q "eos_token_id: 1029 is outside the vocabulary (vocab_size 1024)" "$tmp/badeos.err" ||
  fail "eos refusal: $(tail -1 "$tmp/badeos.err")"

# Ctrl-C: stops after the current token, keeps what was printed, exits 130.
"$deltafin" run --model "$tmp/demo" --prompt "Go on" --max-new 100000 >"$tmp/int" 2>"$tmp/int.err" &
bg=$!
for _ in $(seq 1 200); do [[ -s $tmp/int ]] && break; sleep 0.05; done
kill -INT "$bg"
status=0
wait "$bg" || status=$?
bg=""
[[ $status == 130 ]] || fail "Ctrl-C exit status $status, want 130"
grep -q "interrupted after [0-9]* tokens" "$tmp/int.err" || fail "no interruption note: $(cat "$tmp/int.err")"
[[ -s $tmp/int ]] || fail "nothing printed before Ctrl-C"

# Ctrl-C during a long prompt's prefill (about 23k ids, tens of seconds on the demo model) takes
# effect within a second or two: the prefill polls between layers, not only between passes.
long_prompt=$(python3 -c "
import random
random.seed(1)
w = ['alpha', 'beta', 'gamma', 'delta', 'river', 'stone', 'light', 'cloud', 'seven', 'north']
print(' '.join(random.choice(w) + str(random.randint(0, 99)) for _ in range(5000)))")
"$deltafin" run --model "$tmp/demo" --prompt "$long_prompt" --prefill-group 8192 --max-new 4 --stats >"$tmp/pint" 2>"$tmp/pint.err" &
bg=$!
for _ in $(seq 1 200); do grep -q "kernels:" "$tmp/pint.err" && break; sleep 0.05; done
sleep 0.5  # into the prefill
kill -INT "$bg"
t0=$(date +%s%N)
for _ in $(seq 1 100); do kill -0 "$bg" 2>/dev/null || break; sleep 0.05; done
elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
if kill -0 "$bg" 2>/dev/null; then
  kill -KILL "$bg"
  fail "Ctrl-C during prefill: still running ${elapsed_ms} ms later"
fi
status=0
wait "$bg" || status=$?
bg=""
[[ $status == 130 ]] || fail "Ctrl-C during prefill: exit status $status, want 130"
grep -q "interrupted after 0 tokens" "$tmp/pint.err" || fail "prefill interruption: $(tail -2 "$tmp/pint.err")"
((elapsed_ms < 2000)) || fail "Ctrl-C during prefill took ${elapsed_ms} ms"

# The demo makes its model once, in $DELTAFIN_HOME/demo, then reuses it.
"$deltafin" demo --max-new 8 >"$tmp/demo1" 2>"$tmp/demo1.err"
grep -q "making the demo model" "$tmp/demo1.err" || fail "the first demo did not make its model"
[[ -f $DELTAFIN_HOME/demo/model.safetensors.index.json ]] || fail "the demo model is not cached"
"$deltafin" demo --max-new 8 >"$tmp/demo2" 2>"$tmp/demo2.err"
grep -q "making the demo model" "$tmp/demo2.err" && fail "the second demo made its model again"
cmp -s "$tmp/demo1" "$tmp/demo2" || fail "the demo's output changed between runs"
grep -qx '\[reasoning\]' "$tmp/demo1" || fail "the demo shows no chat turn"

# Token-id lists: spaces after commas are fine and the output is one JSON array; every malformed
# list is refused before the model loads, naming the item.
out=$("$deltafin" generate --model "$tmp/demo" --ids "5, 0,7" --max-new 2 --ignore-eos 2>/dev/null) ||
  fail "generate --ids '5, 0,7' failed"
[[ $out =~ ^\[[0-9]+,[0-9]+\]$ ]] || fail "generate printed '$out', want [a,b]"
for bad in "" "1,,2" "1,x" "-3" "1,2," "99999999999"; do
  if "$deltafin" generate --model "$tmp/demo" --ids "$bad" --max-new 1 >/dev/null 2>"$tmp/ids.err"; then
    fail "--ids '$bad' was accepted"
  fi
  grep -q "token ids: '.*' (item [0-9]*) is not a non-negative integer" "$tmp/ids.err" ||
    fail "--ids '$bad': $(cat "$tmp/ids.err")"
done

((failures == 0)) || exit 1
echo "run_cli: PASS"
