#!/usr/bin/env bash
# The model drafters change how fast ids come, never which: K3's output with DSpark or Qwen3
# drafting (forced to verify drafts on every pass, and left to the controller) equals the output
# with speculation off, greedy and seeded, through generate, run and the server. DSpark runs on
# the k3-tiny-a oracle with the dspark-tiny-a oracle drafter (whose planted Markov head makes
# drafts accepted) and on the demo's synthetic one; Qwen3 on the demo's synthetic 0.6B. Also: the
# startup log's drafter lines, the errors for a drafter asked for and absent, and text commands
# on a Qwen3 folder (its tokenizer.json).
# usage: drafters.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
tmp=$(mktemp -d)
source "$tests/e2e/lib/server.sh"
trap 'server_cleanup; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# k3-tiny-a with the oracle drafter beside it, as setup lays a model out.
k3=$tmp/k3
mkdir -p "$k3/drafters"
for f in "$tests"/fixtures/k3-tiny-a/*; do ln -s "$(realpath "$f")" "$k3/"; done
ln -s "$(realpath "$tests/fixtures/dspark-tiny-a")" "$k3/drafters/dspark"
prompt=488,250,115,269,384,67,152,153,398,289,199,395,485,75,449,114,323,470,200,333,180,382,244,329

gen() {  # gen NAME ARGS...: generate on k3 into $tmp/NAME (ids) and $tmp/NAME.err
  local name=$1
  shift
  "$deltafin" generate --model "$k3" --ids $prompt --max-new 16 --ignore-eos "$@" \
    >"$tmp/$name" 2>"$tmp/$name.err" || { cat "$tmp/$name.err" >&2; fail "generate $*"; }
}
# (generate is greedy; seeded sampling with DSpark on this case is runtime's Drafters.* test.)
gen off --speculate off
for mode in "--draft dspark" "--draft dspark --draft-min 1" "--draft dspark --draft-min 7"; do
  # shellcheck disable=SC2086
  gen on $mode --stats
  cmp -s "$tmp/off" "$tmp/on" || fail "k3-tiny-a $mode: $(cat "$tmp/on") != $(cat "$tmp/off")"
  grep -q "drafter dspark loaded from" "$tmp/on.err" || fail "$mode: no drafter line: $(cat "$tmp/on.err")"
done
# Greedy, the oracle drafter's drafts are accepted (its trace accepts 1, 7, 0, 2, ... drafts).
gen on --draft dspark --draft-min 1 --stats
accepted=$(sed -n 's/.*speculation dspark: .* accepted \([0-9]*\).*/\1/p' "$tmp/on.err")
[[ -n $accepted && $accepted -ge 4 ]] || fail "DSpark accepted ${accepted:-no} drafts: $(cat "$tmp/on.err")"
echo "drafters: k3-tiny-a + dspark-tiny-a: ids identical, $accepted drafts accepted"

# Asked for by name and absent: a clear error, not a silent fallback.
if out=$("$deltafin" generate --model "$tests/fixtures/k3-tiny-a" --ids 1,2 --max-new 1 \
  --draft dspark 2>&1); then
  fail "--draft dspark without a DSpark folder succeeded"
fi
grep -q "has no DSpark drafter in" <<<"$out" || fail "--draft dspark: unexpected: $out"
if out=$("$deltafin" generate --model "$k3" --ids 1,2 --max-new 1 --draft qwen 2>&1); then
  fail "--draft qwen without a Qwen3 folder succeeded"
fi
grep -q "has no Qwen3 drafter in" <<<"$out" || fail "--draft qwen: unexpected: $out"

# The demo with its synthetic drafters (synth writes both by default).
demo=$tmp/demo
"$deltafin" synth --out "$demo" --preset demo >/dev/null
ids=3,14,15,92,65,35,89,79,32,38,46,26,43,38,32,79
"$deltafin" generate --model "$demo" --ids $ids --max-new 30 --ignore-eos --speculate off \
  >"$tmp/demo.off" 2>/dev/null
for mode in "--draft qwen --draft-min 2" "--draft qwen" "--draft dspark --draft-min 3" \
  "--draft-min 5"; do
  # shellcheck disable=SC2086
  "$deltafin" generate --model "$demo" --ids $ids --max-new 30 --ignore-eos $mode --stats \
    >"$tmp/demo.on" 2>"$tmp/demo.err" || { cat "$tmp/demo.err" >&2; fail "demo generate $mode"; }
  cmp -s "$tmp/demo.off" "$tmp/demo.on" || fail "demo generate $mode changed the ids"
done
# auto (the last mode) loads both: the plan's line names each and why.
grep -q "drafters: dspark (.*) loaded, worth its memory.*qwen3-0.6b-base (.*) loaded" \
  "$tmp/demo.err" || fail "no memory-plan line for the drafters: $(cat "$tmp/demo.err")"

run_both() {  # run_both WHAT ARGS...: run on $model with speculation off and with ARGS; equal
  local what=$1
  shift
  "$deltafin" run --model "$model" --max-new 40 "${common[@]}" --speculate off >"$tmp/run.off" \
    2>/dev/null
  "$deltafin" run --model "$model" --max-new 40 "${common[@]}" "$@" --stats >"$tmp/run.on" \
    2>"$tmp/run.err" || { cat "$tmp/run.err" >&2; fail "run $what"; }
  cmp -s "$tmp/run.off" "$tmp/run.on" || fail "run $what changed the output"
  grep -q "stats: speculation" "$tmp/run.err" || fail "run $what: no speculation line"
}
model=$demo
for sampling in "--temperature 0" "--temperature 0.9 --seed 11"; do
  # shellcheck disable=SC2206
  common=(--prompt "Once upon a time there was" $sampling)
  run_both "raw, qwen, $sampling" --draft qwen --draft-min 3
  run_both "raw, auto, $sampling" --draft-min 2
  # shellcheck disable=SC2206
  common=(--chat --prompt "Hello there" $sampling)
  run_both "chat, dspark, $sampling" --draft dspark --draft-min 3
  run_both "chat, auto, $sampling" --draft-min 6
done
echo "drafters: demo: generate and run identical with Qwen3 and DSpark drafting"

# The oracle case with text: k3-tiny-a given a byte-level tokenizer (its 256 byte ids, the rest
# reserved) and the demo's synthetic Qwen3 beside the oracle DSpark, so that run drafts raw text
# with Qwen3 (whose text always re-encodes here: bytes never merge) and chat with DSpark.
python3 - "$k3" <<'PY'
import base64, sys
with open(sys.argv[1] + "/tiktoken.model", "w") as f:
    for b in range(256):
        f.write("%s %d\n" % (base64.b64encode(bytes([b])).decode(), b))
with open(sys.argv[1] + "/tokenizer_config.json", "w") as f:
    # the chat specials of tests/support/text_model.h, which the unit tests lay out the same way
    f.write('{"added_tokens_decoder": {"256": {"content": "[BOS]"}, "257": {"content": "[EOS]"}, '
            '"259": {"content": "<|open|>"}, "260": {"content": "<|close|>"}, '
            '"261": {"content": "<|sep|>"}, "501": {"content": "<|end_of_msg|>"}}}')
PY
ln -s "$demo/drafters/qwen3-0.6b-base" "$k3/drafters/qwen3-0.6b-base"
model=$k3
for sampling in "--temperature 0" "--temperature 0.9 --seed 5"; do
  # shellcheck disable=SC2206
  common=(--prompt "The cat sat on the mat" $sampling)
  run_both "k3-tiny-a raw, qwen, $sampling" --draft qwen --draft-min 2
  grep -Eq "speculation qwen: .* drafted [1-9]" "$tmp/run.err" ||
    fail "k3-tiny-a: Qwen3 drafted nothing: $(cat "$tmp/run.err")"
  # shellcheck disable=SC2206
  common=(--chat --prompt "Hi" $sampling)
  run_both "k3-tiny-a chat, dspark, $sampling" --draft dspark --draft-min 3
done
echo "drafters: k3-tiny-a with a byte-level tokenizer: run identical with Qwen3 and DSpark"

# A Qwen3 folder is a model too: its tokenizer.json gives it text commands.
"$deltafin" run --model "$demo/drafters/qwen3-0.6b-base" --prompt "hello world" --max-new 4 \
  >"$tmp/qwen.out" 2>"$tmp/qwen.err" || { cat "$tmp/qwen.err" >&2; fail "run on a Qwen3 folder"; }

# The server: completions (Qwen3) and chat (DSpark) equal with and without drafting.
start_server off --model "$demo" --speculate off
off_port=$port
start_server on --model "$demo" --draft-min 3
on_port=$port
grep -q "drafter dspark loaded" "$tmp/on.log" || fail "server: no drafter line"
ask() {  # ask PORT PATH BODY: the response's text
  curl -sf "http://127.0.0.1:$1/v1/$2" -H 'Content-Type: application/json' -d "$3" |
    python3 -c 'import json,sys; c=json.load(sys.stdin)["choices"][0]; print(c.get("text") or json.dumps(c["message"]))'
  [[ ${PIPESTATUS[0]} == 0 ]] || fail "server request $2 failed: $3"
}
for body in '{"prompt": "The weather today", "max_tokens": 24, "temperature": 0}' \
  '{"prompt": "The weather today", "max_tokens": 24, "temperature": 0.7, "seed": 4}'; do
  a=$(ask $off_port completions "$body")
  b=$(ask $on_port completions "$body")
  [[ $a == "$b" ]] || fail "server completions differ: $body: $a VS $b"
done
for body in '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32, "temperature": 0}' \
  '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32, "temperature": 0.8, "seed": 9}'; do
  a=$(ask $off_port chat/completions "$body")
  b=$(ask $on_port chat/completions "$body")
  [[ $a == "$b" ]] || fail "server chat differs: $body: $a VS $b"
done
echo "drafters: PASS"
