#!/usr/bin/env bash
# Inference from installs made by `deltafin setup` against a local HF-style server: greedy ids and
# logits (bit for bit) from the original folder, a full install (mapped and streamed experts), a
# streaming install with an empty pool (experts fetched on demand: one request per expert, none on
# a rerun), a half-filled one, a fault during an on-demand fetch (a clear error naming the expert,
# no cache file left, a rerun that succeeds), and `inspect` on a streaming install.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

# The demo preset with 64 experts per layer: their 8 MiB leave room for a budget between the
# smallest streaming plan and the whole model.
"$DF" synth --out "$WORK/repo" --preset demo --layers 6 --experts 64 >/dev/null 2>"$WORK/synth.err" ||
  fail "synth: $(tail -3 "$WORK/synth.err")"
hf_start "test/model=$WORK/repo"
ids="5,17,42,7,99,3"

gen() {  # gen DIR [flags...]: the generated ids
  "$DF" generate --model "$1" --ids "$ids" --max-new 8 --ignore-eos "${@:2}" 2>"$WORK/gen.err" ||
    fail "generate --model $1 ${*:2}: $(tail -3 "$WORK/gen.err")"
}
same_logits() {  # same_logits DIR [flags...]: logits identical, bit for bit, to the original's
  "$DF" logits --model "$1" --ids "$ids" --out "$WORK/logits.st" "${@:2}" 2>"$WORK/logits.err" ||
    fail "logits --model $1 ${*:2}: $(tail -3 "$WORK/logits.err")"
  cmp -s "$WORK/ref.st" "$WORK/logits.st" || fail "logits from $1 ${*:2} differ from the original's"
}
install() {  # install KIND DIR
  "$DF" setup "--$1" --repo test/model --revision main --endpoint "$HF_URL" --dir "$2" \
    >/dev/null 2>"$WORK/setup.err" || fail "setup --$1: $(tail -5 "$WORK/setup.err")"
}
n_cached() { find "$1/experts" -name 'E*.bin' 2>/dev/null | wc -l; }
no_temporaries() {
  local left
  left=$(find "$1" -name '*.tmp-*' -o -name '*.partial' | head -3)
  [[ -z "$left" ]] || fail "temporary files left in $1: $left"
}

ref=$(gen "$WORK/repo")
"$DF" logits --model "$WORK/repo" --ids "$ids" --out "$WORK/ref.st" 2>"$WORK/logits.err" ||
  fail "logits on the original: $(tail -3 "$WORK/logits.err")"
echo "original: ids $ref"

# 1. A full install, its experts mapped (the default for a model this small) and streamed.
install full "$WORK/full"
[[ $(gen "$WORK/full") == "$ref" ]] || fail "full install (mapped): ids differ"
expect_in "$WORK/gen.err" "experts mapped"
# A budget below the whole model's size (by half its experts) makes the plan stream the experts.
SMALL_BUDGET=$(python3 - "$WORK/gen.err" <<'PY'
import re, sys
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
def size(s):
    v, u = s.split()
    return float(v) * units[u]
m = re.search(r"planned ([\d.]+ \w+):.*experts mapped \(([\d.]+ \w+)", open(sys.argv[1]).read())
print(int(size(m.group(1)) - size(m.group(2)) / 2))
PY
) || fail "no memory plan in the log: $(grep -i budget "$WORK/gen.err")"
[[ $(gen "$WORK/full" --memory-budget "$SMALL_BUDGET") == "$ref" ]] ||
  fail "full install (streamed by the budget): ids differ"
expect_in "$WORK/gen.err" "experts streamed with O_DIRECT"
same_logits "$WORK/full"
same_logits "$WORK/full" --experts stream --expert-slots 4
echo "full install: identical ids and logits, mapped and streamed"

# 2. A streaming install with an empty pool: experts are fetched while tokens need them.
install stream "$WORK/stream"
[[ $(n_cached "$WORK/stream") == 0 ]] || fail "a fresh streaming install already has experts"
expect_fail "$WORK/mapped.err" "$DF" generate --model "$WORK/stream" --ids "$ids" --max-new 1 --experts mapped
expect_in "$WORK/mapped.err" "is a streaming install"
expect_in "$WORK/mapped.err" "cannot be mapped"
hf_log_reset
[[ $(gen "$WORK/stream") == "$ref" ]] || fail "streaming install (empty pool): ids differ"
expect_in "$WORK/gen.err" "streaming install: 0.0% of experts are local"
expect_in "$WORK/gen.err" "experts streamed with O_DIRECT"
n_fetched=$(n_cached "$WORK/stream")
((n_fetched > 0)) || fail "inference fetched no expert"
# One HTTP request per expert fetched (a 302 to the CDN counts as part of its request).
n_gets=$(hf_count 'r["method"] == "GET" and r["status"] == 206')
n_all=$(hf_count 'r["status"] != 302')
[[ "$n_gets" == "$n_fetched" && "$n_all" == "$n_fetched" ]] ||
  fail "$n_fetched experts fetched with $n_gets range GETs ($n_all requests in all)"
[[ $(check_expert_cache "$WORK/stream" "$WORK/repo") == "$n_fetched" ]] || fail "cache check"
no_temporaries "$WORK/stream"
hf_log_reset
[[ $(gen "$WORK/stream") == "$ref" ]] || fail "streaming install, second run: ids differ"
[[ $(hf_count 'True') == 0 ]] || fail "a second run sent $(hf_count 'True') requests"
[[ $(n_cached "$WORK/stream") == "$n_fetched" ]] || fail "the second run fetched more experts"
same_logits "$WORK/stream"
same_logits "$WORK/stream" --expert-slots 4
echo "streaming install (empty pool): identical ids and logits; $n_fetched experts fetched with" \
  "$n_gets requests, none on the rerun"

# 3. inspect recognises the install and reports the pool.
"$DF" inspect --model "$WORK/stream" >"$WORK/inspect.out" 2>"$WORK/inspect.err" ||
  fail "inspect on a streaming install: $(tail -5 "$WORK/inspect.out")"
expect_in "$WORK/inspect.out" "install      streaming"
expect_in "$WORK/inspect.out" "expert pool  $n_fetched of "
expect_in "$WORK/inspect.out" "check        OK"
echo "inspect: $(grep 'expert pool' "$WORK/inspect.out")"

# 4. A half-filled pool: some layers fetched beforehand, the rest on demand.
install stream "$WORK/half"
"$DF" fetch-experts --model "$WORK/half" --layers 1-2 >/dev/null 2>"$WORK/fetch.err" ||
  fail "fetch-experts --layers 1-2: $(tail -3 "$WORK/fetch.err")"
n_before=$(n_cached "$WORK/half")
n_12=$(python3 -c "import json; print(sum(len(l['experts']) for l in json.load(open('$WORK/half/.deltafin/experts.json'))['layers'] if l['layer'] in (1, 2)))")
[[ "$n_before" == "$n_12" ]] || fail "--layers 1-2 fetched $n_before experts, expected $n_12"
hf_log_reset
[[ $(gen "$WORK/half") == "$ref" ]] || fail "half-filled streaming install: ids differ"
n_after=$(n_cached "$WORK/half")
[[ $(hf_count 'r["status"] != 302') == $((n_after - n_before)) ]] ||
  fail "half-filled: $((n_after - n_before)) experts fetched with $(hf_count 'r["status"] != 302') requests"
[[ -z "$(find "$WORK/half/experts/L001" "$WORK/half/experts/L002" -newer "$WORK/fetch.err" -name 'E*')" ]] ||
  fail "experts already local were fetched again"
same_logits "$WORK/half"
echo "half-filled pool: identical ids and logits; $n_before local, $((n_after - n_before)) fetched"

# 5. A persistent fault on expert fetches: a clear error naming the expert, nothing in the cache;
#    a rerun against a healthy server succeeds.
install stream "$WORK/fault"
hf_faults '[{"match": "model-", "method": "GET", "range_only": true, "kind": "status", "status": 503, "times": -1}]'
DELTAFIN_HTTP_ATTEMPTS=2 expect_fail "$WORK/fault.err" "$DF" generate --model "$WORK/fault" --ids "$ids" --max-new 8 --ignore-eos
grep -Eq "layer [0-9]+ expert [0-9]+" "$WORK/fault.err" || fail "the error names no expert: $(tail -3 "$WORK/fault.err")"
expect_in "$WORK/fault.err" "503"
[[ -z "$(find "$WORK/fault/experts" -type f 2>/dev/null)" ]] ||
  fail "a failed fetch left files: $(find "$WORK/fault/experts" -type f | head -3)"
echo "fault: $(grep -Eo 'layer [0-9]+ expert [0-9]+[^;]*' "$WORK/fault.err" | head -1 | cut -c1-160)"
hf_faults '[]'
[[ $(gen "$WORK/fault") == "$ref" ]] || fail "rerun after the fault: ids differ"
no_temporaries "$WORK/fault"
echo "setup_infer: ok"
