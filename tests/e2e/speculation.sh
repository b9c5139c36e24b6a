#!/usr/bin/env bash
# Speculation leaves the output unchanged through every front end on the demo model: `generate`
# and `run` (greedy and seeded) with --speculate off against passes forced to verify drafted ids
# (--draft-min), their --stats lines, the flags' refusals, and two servers (off, forced) answering
# the openai SDK identically (tests/npm/speculation/same_output.mjs).
# usage: speculation.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
tmp=$(mktemp -d)
source "$tests/e2e/lib/server.sh"
trap 'server_cleanup; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$deltafin" synth --out "$tmp/demo" --preset demo >/dev/null
ids=3,14,15,92,65,35,89,79,32,38,46,26,43,38,32,79
"$deltafin" generate --model "$tmp/demo" --ids $ids --max-new 40 --ignore-eos --speculate off \
  >"$tmp/gen.off" 2>/dev/null
for forced in 1 3 7; do
  "$deltafin" generate --model "$tmp/demo" --ids $ids --max-new 40 --ignore-eos \
    --draft-min $forced --stats >"$tmp/gen.$forced" 2>"$tmp/gen.$forced.err"
  cmp -s "$tmp/gen.off" "$tmp/gen.$forced" || fail "generate --draft-min $forced changed the ids"
  grep -q "verify pass: $((forced + 1)) rows" "$tmp/gen.$forced.err" ||
    fail "generate --draft-min $forced --stats shows no verify pass of $((forced + 1)) rows"
  grep -q "speculation auto: 39 ids in" "$tmp/gen.$forced.err" ||
    fail "generate --stats has no speculation summary"
done

for sampling in "" "--temperature 0.9 --seed 5"; do
  # shellcheck disable=SC2086
  "$deltafin" run --model "$tmp/demo" --chat --prompt "Hello there" --max-new 48 $sampling \
    --speculate off >"$tmp/run.off" 2>/dev/null
  # shellcheck disable=SC2086
  "$deltafin" run --model "$tmp/demo" --chat --prompt "Hello there" --max-new 48 $sampling \
    --draft-min 4 --stats >"$tmp/run.on" 2>"$tmp/run.err"
  cmp -s "$tmp/run.off" "$tmp/run.on" || fail "run ${sampling:-greedy} changed with speculation"
  grep -q "stats: speculation auto:" "$tmp/run.err" || fail "run --stats: no speculation line"
done

# bench verify: every width decodes the same ids (it fails otherwise) and reports each width.
"$deltafin" bench verify --model "$tmp/demo" --widths 1,2,4 --tokens 9 --reps 1 --json \
  >"$tmp/verify.json" 2>"$tmp/verify.err" || { cat "$tmp/verify.err" >&2; fail "bench verify failed"; }
python3 - "$tmp/verify.json" <<'PY' || fail "bench verify: $(cat "$tmp/verify.json")"
import json, sys
d = json.load(open(sys.argv[1]))
widths = {w["width"]: w for w in d["widths"]}
assert sorted(widths) == [1, 2, 4], widths
# 9 decoded ids: 9 one-row passes, 4 of 2 rows, 2 of 4 (the last ids run in narrower passes)
assert widths[1]["vs_one_row"] == 1 and widths[1]["passes"] == 9, widths
assert widths[2]["passes"] == 4 and widths[4]["passes"] == 2, widths
assert "achieved_read_gbps" in d
assert all(w["pass_seconds"][0] <= w["pass_seconds"][1] <= w["pass_seconds"][2] for w in d["widths"])
assert len(d["ids"]) == 10  # the prompt's pass gives the first
PY

for bad in "--speculate maybe" "--draft-max 17" "--draft-min -1"; do
  # shellcheck disable=SC2086
  if "$deltafin" run --model "$tmp/demo" --prompt x --max-new 1 $bad >/dev/null 2>"$tmp/bad"; then
    fail "run $bad was accepted"
  fi
  grep -q -- "deltafin run: ${bad%% *} must be" "$tmp/bad" || fail "run $bad: $(cat "$tmp/bad")"
done

[[ -d $tests/npm/node_modules/openai ]] ||
  fail "$tests/npm/node_modules/openai is missing: run the test setup first (npm ci --prefix tests/npm)"
start_server off --model "$tmp/demo" --speculate off
off_port=$port
start_server on --model "$tmp/demo" --draft-min 3
on_port=$port
node "$tests/npm/speculation/same_output.mjs" "http://127.0.0.1:$off_port/v1" \
  "http://127.0.0.1:$on_port/v1" demo || { tail -20 "$tmp/on.log" >&2; exit 1; }
echo "speculation: PASS"
