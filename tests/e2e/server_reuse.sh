#!/usr/bin/env bash
# Conversation-state reuse in `deltafin serve` on the demo model: a prompt that extends the kept
# state runs only its new ids, the output is identical to a cold start, and the time to the first
# token both ways is printed (server-side, from the log: min / median / max over 5 rounds).
# Token-id prompts make the extension exact.
# usage: server_reuse.sh DELTAFIN TESTS_DIR [PREFIX_IDS]
set -euo pipefail
deltafin=$1
tests=$2
n_prefix=${3:-400}
tmp=$(mktemp -d)
source "$tests/e2e/lib/server.sh"
trap 'server_cleanup; rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

"$deltafin" synth --out "$tmp/demo" --preset demo >/dev/null
start_server reuse --model "$tmp/demo" --no-memo
url="http://127.0.0.1:$port/v1/completions"
ids() { python3 -c "import random; r=random.Random($1); print(','.join(str(r.randrange(0,700)) for _ in range($2)))"; }
prefix=$(ids 1 "$n_prefix")
suffix=$(ids 2 20)
warm='{"prompt":['$prefix'],"max_tokens":0}'
other='{"prompt":[1,2,3],"max_tokens":1}'
full() { echo '{"prompt":['$prefix','$suffix'],"max_tokens":'$1'}'; }

# Identical output: 16 tokens after the kept prefix, and from cold.
curl -s -H "Content-Type: application/json" -o /dev/null "$url" -d "$warm"
curl -s -H "Content-Type: application/json" -o "$tmp/warm" "$url" -d "$(full 16)"
curl -s -H "Content-Type: application/json" -o /dev/null "$url" -d "$other"
curl -s -H "Content-Type: application/json" -o "$tmp/cold" "$url" -d "$(full 16)"
[[ $(json "$tmp/warm" "d['usage']['prompt_tokens_details']['cached_tokens']") == "$n_prefix" ]] ||
  fail "the warm request did not reuse the $n_prefix kept ids"
[[ $(json "$tmp/cold" "d['usage']['prompt_tokens_details']['cached_tokens']") == 0 ]] ||
  fail "the cold request reused state"
[[ "$(json "$tmp/warm" "d['choices']")" == "$(json "$tmp/cold" "d['choices']")" ]] ||
  fail "reuse changed the output"

# Time to the first token (max_tokens 1), 5 rounds each way.
for _ in 1 2 3 4 5; do
  curl -s -H "Content-Type: application/json" -o /dev/null "$url" -d "$warm"
  curl -s -H "Content-Type: application/json" -o /dev/null "$url" -d "$(full 1)"
  curl -s -H "Content-Type: application/json" -o /dev/null "$url" -d "$other"
  curl -s -H "Content-Type: application/json" -o /dev/null "$url" -d "$(full 1)"
done
grep "prompt $((n_prefix + 20)) tokens" "$tmp/reuse.log" |
  python3 -c "
import re, statistics, sys
runs = {'reused': [], 'cold': []}
for line in sys.stdin:
    m = re.search(r'\((\d+) reused\), first token after ([0-9.]+) ms, 1 tokens', line)
    if m: runs['reused' if int(m.group(1)) else 'cold'].append(float(m.group(2)))
for name, v in runs.items():
    print(f'server_reuse: first token, {name:6} ({len(v)}): min {min(v):.1f} / median {statistics.median(v):.1f} / max {max(v):.1f} ms')
w, c = statistics.median(runs['reused']), statistics.median(runs['cold'])
sys.exit(0 if len(runs['reused']) == 5 and len(runs['cold']) == 5 and w < c else 1)
" || fail "reuse was not faster to the first token (or runs are missing)"

((failures == 0)) || { tail -20 "$tmp/reuse.log" >&2; exit 1; }
echo "server_reuse: PASS"
