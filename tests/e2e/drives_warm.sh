#!/usr/bin/env bash
# `deltafin warm --from-trace` on a streaming install served by the local HF server: the plan
# ranks absent experts by recorded use and fetches nothing; --fetch --top 2 fetches exactly the two
# most used (each cache file its expert's verbatim span); a rerun finds them local; a bad trace is
# refused naming the file and line.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

S="$WORK/stream"
stream_install "$S"
read -r l1 l2 <<<"$(python3 -c "
import json; m = json.load(open('$S/.deltafin/experts.json'))
print(m['layers'][0]['layer'], m['layers'][1]['layer'])")"
# Layer l2 expert 3 is used most, then layer l1 expert 5, then layer l1 expert 0.
cat >"$WORK/routes.jsonl" <<EOT
{"position":0,"rows":1,"layer":$l1,"experts":[5,0]}
{"position":1,"rows":1,"layer":$l2,"experts":[3]}
{"position":2,"rows":1,"layer":$l2,"experts":[3]}
{"position":2,"rows":1,"layer":$l1,"experts":[5]}
{"position":3,"rows":1,"layer":$l2,"experts":[3]}
EOT
"$DF" warm --model "$S" --from-trace "$WORK/routes.jsonl" >"$WORK/plan" 2>"$WORK/err" ||
  fail "warm plan: $(tail -3 "$WORK/err")"
expect_in "$WORK/plan" "3 absent experts used"
head -2 "$WORK/plan" | tail -1 | grep -q "layer $l2 expert 3: 3 uses" || fail "ranking: $(cat "$WORK/plan")"
[[ $(find "$S/experts" -type f | wc -l) == 0 ]] || fail "the plan fetched something"

"$DF" warm --model "$S" --from-trace "$WORK/routes.jsonl" --top 2 --fetch >"$WORK/out" \
  2>"$WORK/err" || fail "warm --fetch: $(tail -3 "$WORK/err")"
got=$(cd "$S/experts" && find . -type f -name '*.bin' | sort | tr '\n' ' ')
want=$(printf './L%03d/E0005.bin ./L%03d/E0003.bin ' "$l1" "$l2")
[[ $got == "$want" ]] || fail "warm --top 2 fetched '$got', expected '$want'"
n=$(check_expert_cache "$S" "$WORK/repo") || fail "cache check"
[[ $n == 2 ]] || fail "$n cache files match their spans, expected 2"
"$DF" warm --model "$S" --from-trace "$WORK/routes.jsonl" >"$WORK/plan2" 2>/dev/null
expect_in "$WORK/plan2" "1 absent experts used"
echo "warm: plan fetched nothing; --top 2 fetched the two most used experts"

echo '{"layer": "x"}' >>"$WORK/routes.jsonl"
expect_fail "$WORK/bad.err" "$DF" warm --model "$S" --from-trace "$WORK/routes.jsonl"
expect_in "$WORK/bad.err" "routes.jsonl:6"
echo "drives_warm: ok"
