#!/usr/bin/env bash
# `deltafin place` on a streaming install (served by the local HF server): it lays out the cache
# files fetched so far and leaves the rest remote; a second place after more fetches keeps every
# piece it wrote; logits equal the original folder's bit for bit with a partial pool, with the
# pool emptied and the server refusing everything (so the placed pieces alone serve the
# experts), and with a drive folder removed (its experts fetched again); nothing fetched yet is
# refused.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

S="$WORK/stream"
stream_install "$S"
ids="5,17,42,7,99,3,64,200"
"$DF" logits --model "$WORK/repo" --ids "$ids" --out "$WORK/ref.st" 2>"$WORK/err" ||
  fail "logits on the original: $(tail -3 "$WORK/err")"
same_logits() {  # same_logits LABEL: logits of the streaming install, bit for bit the original's
  "$DF" logits --model "$S" --ids "$ids" --out "$WORK/$1.st" 2>"$WORK/$1.err" ||
    fail "$1: logits exited non-zero: $(tail -3 "$WORK/$1.err")"
  expect_in "$WORK/$1.err" "placement ("
  cmp -s "$WORK/ref.st" "$WORK/$1.st" || fail "$1: logits differ from the original folder's"
  echo "drives_place_stream: $1: logits byte-identical"
}
json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())$1)"; }
n_experts=$(python3 -c "import json; print(sum(len(l['experts']) for l in json.load(open('$S/.deltafin/experts.json'))['layers']))")
n_pieces() { find "$WORK"/d? -name 'L*-E*-at*.bin' | wc -l; }

mkdir -p "$WORK/d0" "$WORK/d1" "$WORK/d2"
drives="$WORK/d0,$WORK/d1,$WORK/d2"
place() { "$DF" place --model "$S" --drives "$drives" --gbps 1,2,4 "$@"; }

# 1. Nothing fetched yet: refused, saying how to fetch.
expect_fail "$WORK/e0" place
expect_in "$WORK/e0" "none of its $n_experts experts fetched yet"

# 2. Part of the pool: only the fetched experts are placed, striped over the three folders.
"$DF" fetch-experts --model "$S" --layers 1-2 >/dev/null 2>"$WORK/err" || fail "fetch 1-2: $(tail -3 "$WORK/err")"
n_local=$(find "$S/experts" -name 'E*.bin' | wc -l)
((n_local > 0 && n_local < n_experts)) || fail "fetched $n_local of $n_experts"
place >"$WORK/p1.json" 2>"$WORK/err" || fail "place (partial pool): $(tail -3 "$WORK/err")"
[[ $(json_field '["experts"]' <"$WORK/p1.json") == "$n_local" ]] || fail "placed: $(cat "$WORK/p1.json")"
[[ $(json_field '["remote_not_placed"]' <"$WORK/p1.json") == $((n_experts - n_local)) ]] ||
  fail "remote: $(cat "$WORK/p1.json")"
[[ -f $S/placement.json ]] || fail "no placement.json"
pieces1=$(n_pieces)
((pieces1 >= n_local)) || fail "$pieces1 pieces for $n_local experts"
same_logits partial-pool

# 3. The rest fetched, placed again: every piece of the first place is kept, the rest written.
"$DF" fetch-experts --model "$S" >/dev/null 2>"$WORK/err" || fail "fetch all: $(tail -3 "$WORK/err")"
place >"$WORK/p2.json" 2>"$WORK/err" || fail "place (whole pool): $(tail -3 "$WORK/err")"
[[ $(json_field '["experts"]' <"$WORK/p2.json") == "$n_experts" ]] || fail "placed: $(cat "$WORK/p2.json")"
[[ $(json_field '["kept"]' <"$WORK/p2.json") == "$pieces1" ]] ||
  fail "the second place kept $(json_field '["kept"]' <"$WORK/p2.json") of the $pieces1 pieces already written"
[[ $(json_field '["removed"]' <"$WORK/p2.json") == 0 ]] || fail "the second place removed files"
echo "drives_place_stream: placed $n_local, then all $n_experts experts ($pieces1 pieces kept)"

# 4. The pool emptied and every request to the server failing: the placed pieces alone serve
# every expert (a fetch would fail the command), and no request is sent.
rm -rf "$S/experts"
hf_faults '[{"match": "", "kind": "status", "status": 404, "times": -1}]'
hf_log_reset
same_logits pieces-only
[[ $(hf_count 'True') == 0 ]] || fail "the placed install still sent $(hf_count 'True') requests"

# 5. A drive folder gone as well: its experts are fetched again, never garbage.
hf_faults '[]'
rm -rf "$WORK/d1"
same_logits drive-removed
expect_in "$WORK/drive-removed.err" "failed"
fetched=$(hf_count 'r["method"] == "GET" and r["status"] == 206')
((fetched > 0)) || fail "no expert was fetched again after its drive folder was removed"
echo "drives_place_stream: a removed drive folder's experts were fetched again ($fetched requests)"
echo "drives_place_stream: ok"
