#!/usr/bin/env bash
# `kill -9` of deltafin in the middle of a full download, a spine download and an expert fetch:
# nothing may appear under a final name unless complete, and a rerun must resume (at the exact
# byte in the same boot; from the fsynced length after a reboot) and finish byte-identical.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"
export DELTAFIN_PROGRESS_INTERVAL_MS=200

make_repo "$WORK/repo"
hf_start "test/model=$WORK/repo"
shards=$(cd "$WORK/repo" && ls model-*.safetensors)
A=$(echo "$shards" | head -1)
CDN_A="/cdn/test/model/$COMMIT/$A"
BIG=1000000
setup_args=(--repo test/model --revision main --endpoint "$HF_URL")
size_at_least() { [[ -f "$1" ]] && (($(stat -c %s "$1") >= $2)); }

# 1. A full install, killed mid-shard.
F="$WORK/full"
hf_faults "[{\"match\": \"/cdn/\", \"kind\": \"slow\", \"rate\": 1000000, \"min_range\": $BIG, \"times\": -1}]"
"$DF" setup --full "${setup_args[@]}" --dir "$F" >/dev/null 2>"$WORK/k1.err" &
pid=$!
wait_for 30 size_at_least "$F/$A.partial" 1500000 || fail "the download never got going: $(tail -3 "$WORK/k1.err")"
kill -9 $pid
wait $pid 2>/dev/null && fail "deltafin survived kill -9"
[[ ! -e "$F/$A" ]] || fail "$A appeared under its final name before it was complete"
[[ ! -e "$F/.deltafin/install.json" && ! -e "$F/model.safetensors.index.json" ]] ||
  fail "an interrupted install looks complete"
expect_in "$WORK/k1.err" "download: .*%.*/s.*ETA"  # plain progress lines while it ran
killed_at=$(stat -c %s "$F/$A.partial")
hf_faults '[]'
hf_log_reset
"$DF" setup --full "${setup_args[@]}" --dir "$F" >/dev/null 2>"$WORK/k1b.err" || fail "rerun: $(tail -3 "$WORK/k1b.err")"
same_files "$WORK/repo" "$F" $shards
[[ $(hf_count "r['path'].startswith('$CDN_A') and start(r) == $killed_at") == 1 ]] ||
  fail "the rerun did not resume $A at byte $killed_at"
echo "ok  full install killed at byte $killed_at of $A, resumed there and verified"

# 2. The same after a (simulated) reboot: only the fsynced length recorded in the mark counts.
F2="$WORK/full2"
hf_faults "[{\"match\": \"/cdn/\", \"kind\": \"slow\", \"rate\": 1000000, \"min_range\": $BIG, \"times\": -1}]"
"$DF" setup --full "${setup_args[@]}" --dir "$F2" >/dev/null 2>"$WORK/k2.err" &
pid=$!
wait_for 30 size_at_least "$F2/$A.partial" 1500000 || fail "the second download never got going"
kill -9 $pid
wait $pid 2>/dev/null || true
printf 'a-boot-before-a-power-loss\n1048576\n' >"$F2/$A.partial.mark"
hf_faults '[]'
hf_log_reset
"$DF" setup --full "${setup_args[@]}" --dir "$F2" >/dev/null 2>"$WORK/k2b.err" || fail "rerun: $(tail -3 "$WORK/k2b.err")"
same_files "$WORK/repo" "$F2" $shards
[[ $(hf_count "r['path'].startswith('$CDN_A') and start(r) == 1048576") == 1 ]] ||
  fail "after a reboot the rerun should resume $A at the fsynced 1048576 bytes"
echo "ok  after a reboot only the fsynced length was trusted"

# 3. A streaming install killed while it copies the spine.
S="$WORK/stream"
hf_faults "[{\"match\": \"/cdn/\", \"kind\": \"slow\", \"rate\": 1000000, \"min_range\": $BIG, \"times\": -1}]"
"$DF" setup --stream "${setup_args[@]}" --dir "$S" >/dev/null 2>"$WORK/k3.err" &
pid=$!
wait_for 30 eval 'ls "$S"/spine-*.partial >/dev/null 2>&1 && size_at_least "$(ls "$S"/spine-*.partial | head -1)" 1500000' ||
  fail "the spine download never got going: $(tail -3 "$WORK/k3.err")"
kill -9 $pid
wait $pid 2>/dev/null || true
[[ ! -e "$S/.deltafin/install.json" ]] || fail "an interrupted streaming install looks complete"
hf_faults '[]'
"$DF" setup --stream "${setup_args[@]}" --dir "$S" >/dev/null 2>"$WORK/k3b.err" || fail "rerun: $(tail -3 "$WORK/k3b.err")"
expect_in "$WORK/k3b.err" "resuming .*spine-"
check_spine "$S" "$WORK/repo" >/dev/null || fail "spine after the rerun"
echo "ok  streaming install killed mid-spine, resumed and identical"

# 4. fetch-experts killed while experts are in flight.
span=$(python3 -c "import json; print(json.load(open('$S/.deltafin/experts.json'))['layers'][0]['span_bytes'])")
hf_faults "[{\"match\": \"/cdn/\", \"kind\": \"slow\", \"rate\": 20000, \"min_range\": $span, \"times\": -1}]"
"$DF" fetch-experts --model "$S" >/dev/null 2>"$WORK/k4.err" &
pid=$!
wait_for 30 eval '[[ -n "$(find "$S/experts" -name "*.tmp-*" -size +1k)" ]]' || fail "no expert fetch got going"
kill -9 $pid
wait $pid 2>/dev/null || true
n_tmp=$(find "$S/experts" -name '*.tmp-*' | wc -l)
((n_tmp > 0)) || fail "expected temporary files from the killed fetch"
check_expert_cache "$S" "$WORK/repo" >/dev/null || fail "a cache file is not its expert's span after kill -9"
hf_faults '[]'
"$DF" fetch-experts --model "$S" >/dev/null 2>"$WORK/k4b.err" || fail "rerun: $(tail -3 "$WORK/k4b.err")"
[[ -z "$(find "$S/experts" -name '*.tmp-*')" ]] || fail "temporary files of the killed process were not removed"
expect_in "$WORK/k4b.err" "left by a process that no longer runs"
n=$(check_expert_cache "$S" "$WORK/repo") || fail "cache after the rerun"
echo "ok  fetch-experts killed with $n_tmp experts in flight; the rerun cleaned up and fetched all $n"
echo "setup_kill: ok"
