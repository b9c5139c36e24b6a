#!/usr/bin/env bash
# Real faults from the local HF-style server during `deltafin setup` and `deltafin fetch-experts`:
# 5xx answers, connection resets, truncated bodies, wrong Content-Length and Content-Range, stalls,
# corrupted bytes, a server ignoring Range, missing files and tokens. Transient faults must be
# retried to a byte-identical result; persistent ones must end in a clear error that leaves no
# file under a final name; a rerun must then finish.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

make_repo "$WORK/repo"
hf_start "test/model=$WORK/repo"
shards=$(cd "$WORK/repo" && ls model-*.safetensors)
A=$(echo "$shards" | head -1)
CDN_A="/cdn/test/model/$COMMIT/$A"
BIG=1000000  # larger than any header request: the fault hits shard bodies only

install() {  # install DIR [setup args]: a full install into DIR
  local dir=$1
  shift
  "$DF" setup --full --repo test/model --revision main --endpoint "$HF_URL" --dir "$dir" "$@"
}
n=0
transient() {  # transient NAME RULES [check]: a fault that must be survived
  local name=$1 rules=$2
  n=$((n + 1))
  hf_faults "$rules"
  hf_log_reset
  local t0=$SECONDS
  install "$WORK/t$n" >/dev/null 2>"$WORK/t$n.err" || fail "$name: setup failed: $(tail -3 "$WORK/t$n.err")"
  same_files "$WORK/repo" "$WORK/t$n" $shards
  local hits
  hits=$(hf_count '"fault" in r')
  ((hits > 0)) || cat "$WORK/faults.json" "$WORK/server.err" >&2
  ((hits > 0)) || fail "$name: the fault never fired"
  echo "ok  $name ($hits faults, $((SECONDS - t0)) s)"
  hf_faults '[]'
}

transient "503 twice" '[{"match": "/cdn/", "kind": "status", "status": 503, "times": 2}]'
expect_in "$WORK/t$n.err" "HTTP 503"
transient "429 with Retry-After" '[{"match": "/cdn/", "kind": "status", "status": 429, "retry_after": 0, "times": 1}]'
transient "reset before the answer" '[{"match": "/cdn/", "kind": "reset", "after_bytes": 0, "times": 2}]'
transient "reset mid-body" "[{\"match\": \"$CDN_A\", \"kind\": \"reset\", \"after_bytes\": 300000, \"min_range\": $BIG, \"times\": 1}]"
transient "truncated body" "[{\"match\": \"$CDN_A\", \"kind\": \"truncate\", \"after_bytes\": 100000, \"min_range\": $BIG, \"times\": 1}]"
# The retry resumes at the exact byte the truncated answer stopped at.
[[ $(hf_count "r['path'].startswith('$CDN_A') and start(r) == 100000") == 1 ]] ||
  fail "the retry after truncation did not resume at byte 100000"
transient "Content-Length too small" "[{\"match\": \"$CDN_A\", \"kind\": \"wrong_length\", \"delta\": -100, \"min_range\": $BIG, \"times\": 1}]"
expect_in "$WORK/t$n.err" "Content-Length"
transient "Content-Length too large" "[{\"match\": \"$CDN_A\", \"kind\": \"wrong_length\", \"delta\": 100, \"min_range\": $BIG, \"times\": 1}]"
transient "wrong Content-Range" "[{\"match\": \"$CDN_A\", \"kind\": \"wrong_range\", \"shift\": 4096, \"min_range\": $BIG, \"times\": 2}]"
expect_in "$WORK/t$n.err" "Content-Range"
transient "stalled body" "[{\"match\": \"$CDN_A\", \"kind\": \"stall\", \"after_bytes\": 2000, \"seconds\": 20, \"min_range\": $BIG, \"times\": 1}]"
transient "corrupted byte (sha256)" "[{\"match\": \"$CDN_A\", \"kind\": \"corrupt\", \"at\": 5000, \"min_range\": $BIG, \"times\": 1}]"
expect_in "$WORK/t$n.err" "downloading it again from the start"
transient "500 on HEAD" '[{"match": "/resolve/", "method": "HEAD", "kind": "status", "status": 500, "times": 2}]'

persistent() {  # persistent NAME RULES MESSAGE [DIR]: a fault that must end in a clear error
  local name=$1 rules=$2 message=$3 dir=${4:-}
  n=$((n + 1))
  dir=${dir:-$WORK/p$n}
  hf_faults "$rules"
  expect_fail "$WORK/p$n.err" install "$dir"
  expect_in "$WORK/p$n.err" "$message"
  grep -q "^deltafin: error: " "$WORK/p$n.err" || fail "$name: no one-line error: $(tail -2 "$WORK/p$n.err")"
  [[ ! -e "$dir/$A" ]] || cmp -s "$WORK/repo/$A" "$dir/$A" || fail "$name: a damaged $A under its final name"
  [[ ! -e "$dir/.deltafin/install.json" ]] || fail "$name: install.json written by a failed install"
  echo "ok  $name: $(grep '^deltafin: error: ' "$WORK/p$n.err" | cut -c1-160)"
  hf_faults '[]'
}

persistent "500 forever" '[{"match": "/cdn/", "kind": "status", "status": 500, "times": -1}]' "gave up after 4 attempts"
persistent "wrong Content-Range forever" "[{\"match\": \"$CDN_A\", \"kind\": \"wrong_range\", \"shift\": 4096, \"min_range\": $BIG, \"times\": -1}]" "the server answered Content-Range"
persistent "corrupted every time" "[{\"match\": \"$CDN_A\", \"kind\": \"corrupt\", \"at\": 5000, \"min_range\": $BIG, \"times\": -1}]" "(twice); the download was deleted"
[[ ! -e "$WORK/p$n/$A.partial" ]] || fail "a partial file that failed its hash was kept"
persistent "Range ignored" '[{"match": "/cdn/", "kind": "no_range", "times": -1}]' "ignored the Range header"
persistent "index missing" '[{"match": "model.safetensors.index.json", "kind": "status", "status": 404, "times": -1}]' "not in the repository"
# After a persistent failure, a rerun with a healthy server finishes the same folder.
persistent "truncated, then 500 forever" "[{\"match\": \"$CDN_A\", \"kind\": \"truncate\", \"after_bytes\": 200000, \"min_range\": $BIG, \"times\": 1},
  {\"match\": \"$CDN_A\", \"kind\": \"status\", \"status\": 500, \"min_range\": $BIG, \"times\": -1}]" "gave up" "$WORK/resume"
[[ $(stat -c %s "$WORK/resume/$A.partial") -ge 200000 ]] || fail "the partial download was not kept"
hf_log_reset
install "$WORK/resume" >/dev/null 2>"$WORK/resume.err" || fail "rerun after failures: $(tail -3 "$WORK/resume.err")"
same_files "$WORK/repo" "$WORK/resume" $shards
[[ $(hf_count "r['path'].startswith('$CDN_A') and start(r) == 200000") -ge 1 ]] || fail "the rerun did not resume $A at byte 200000"
echo "ok  rerun resumed and finished"

# Expert fetches of a streaming install under faults.
S="$WORK/stream"
"$DF" setup --stream --repo test/model --revision main --endpoint "$HF_URL" --dir "$S" >/dev/null 2>"$WORK/s.err" ||
  fail "setup --stream: $(tail -3 "$WORK/s.err")"
span=$(python3 -c "import json; print(json.load(open('$S/.deltafin/experts.json'))['layers'][0]['span_bytes'])")
hf_faults "[{\"match\": \"/cdn/\", \"kind\": \"status\", \"status\": 502, \"min_range\": $span, \"times\": 3},
            {\"match\": \"/cdn/\", \"kind\": \"reset\", \"after_bytes\": 1000, \"min_range\": $span, \"times\": 2},
            {\"match\": \"/cdn/\", \"kind\": \"truncate\", \"after_bytes\": 777, \"min_range\": $span, \"times\": 2}]"
"$DF" fetch-experts --model "$S" --layers 1 >/dev/null 2>"$WORK/f1.err" || fail "fetch under transient faults: $(tail -3 "$WORK/f1.err")"
check_expert_cache "$S" "$WORK/repo" >/dev/null || fail "expert cache after transient faults"
echo "ok  expert fetches survive 502, resets and truncation"
hf_faults '[{"match": "/cdn/", "kind": "status", "status": 500, "times": -1}]'
expect_fail "$WORK/f2.err" "$DF" fetch-experts --model "$S" --layers 2
expect_in "$WORK/f2.err" "fetching layer 2 expert"
[[ -z "$(find "$S/experts" -name '*.tmp-*')" ]] || fail "temporary expert files left after a failure"
[[ ! -d "$S/experts/L002" ]] || [[ -z "$(ls "$S/experts/L002")" ]] || fail "cache files for experts that failed"
echo "ok  $(grep '^deltafin: error: ' "$WORK/f2.err" | cut -c1-160)"
hf_faults '[]'
"$DF" fetch-experts --model "$S" >/dev/null 2>"$WORK/f3.err" || fail "fetch after the faults: $(tail -3 "$WORK/f3.err")"
check_expert_cache "$S" "$WORK/repo" >/dev/null || fail "expert cache after the rerun"
echo "ok  fetch-experts rerun completed the pool"

# A gated repository: no token, a wrong one, the right one.
hf_start "test/model=$WORK/repo" --token s3cret
expect_fail "$WORK/k1.err" install "$WORK/k1"
expect_in "$WORK/k1.err" "set HF_TOKEN"
HF_TOKEN=wrong expect_fail "$WORK/k2.err" install "$WORK/k2"
expect_in "$WORK/k2.err" "refused HF_TOKEN"
HF_TOKEN=s3cret install "$WORK/k3" >/dev/null 2>"$WORK/k3.err" || fail "with HF_TOKEN: $(tail -3 "$WORK/k3.err")"
same_files "$WORK/repo" "$WORK/k3" $shards
echo "ok  HF_TOKEN sent as a Bearer token"
echo "setup_faults: ok"
