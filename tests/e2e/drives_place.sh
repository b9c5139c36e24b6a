#!/usr/bin/env bash
# Placement changes where expert bytes come from, never what is computed: on the synth demo,
# `deltafin place` over three folders (bandwidths given), first whole with hot experts replicated
# from a recorded trace, then striped (every expert split over the three); each time logits and
# greedy ids with no extra flags must equal the unplaced run's, also with a folder removed before
# the run, placed copies or pieces truncated, and a folder removed mid-run. Also: the dry run
# writes nothing, a second run resumes (writes nothing), --verify rewrites a copy whose bytes
# changed, and bad --drives, --layout and --layout stripe with --from-trace are refused.
set -euo pipefail
deltafin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() {
  echo "drives_place: FAIL: $*" >&2
  failed=1
}
py=/usr/bin/python3
json_field() { "$py" -c "import json,sys; print(json.loads(sys.stdin.readline())$1)"; }

"$deltafin" synth --out "$work/demo" --preset demo >/dev/null 2>"$work/err" ||
  { cat "$work/err" >&2; exit 1; }
model=$work/demo
ids="464,1012,300,7,88,512,9,130,44,61,700,2,3,999,15,16,23,42,77,101"
"$deltafin" logits --model "$model" --ids "$ids" --out "$work/ref.st" --experts stream 2>"$work/err" ||
  { cat "$work/err" >&2; exit 1; }
ref_ids=$("$deltafin" generate --model "$model" --ids "$ids" --max-new 16 --ignore-eos \
  --experts stream --trace-routes "$work/routes.jsonl" 2>"$work/err") || { cat "$work/err" >&2; exit 1; }

check_same() {  # check_same LABEL [extra flags...]
  local label=$1
  shift
  if ! "$deltafin" logits --model "$model" --ids "$ids" --out "$work/$label.st" "$@" 2>"$work/$label.err"; then
    cat "$work/$label.err" >&2
    fail "$label: logits exited non-zero"
    return
  fi
  grep -q "placement (" "$work/$label.err" || fail "$label: the placement was not used"
  if cmp -s "$work/ref.st" "$work/$label.st"; then
    echo "drives_place: $label: logits byte-identical"
  else
    fail "$label: logits differ from the unplaced run"
  fi
  got=$("$deltafin" generate --model "$model" --ids "$ids" --max-new 16 --ignore-eos "$@" \
    2>"$work/$label.gen.err") || got="(exit)"
  if [[ $got == "$ref_ids" ]]; then
    echo "drives_place: $label: 16 greedy ids identical"
  else
    fail "$label: generate printed $got, expected $ref_ids"
  fi
}

mkdir -p "$work/d0" "$work/d1" "$work/d2"
drives="$work/d0,$work/d1,$work/d2"
# Dry run: the plan, and nothing written.
"$deltafin" place --model "$model" --drives "$drives" --gbps 1,2,4 --layout whole --dry-run \
  >"$work/plan.json" 2>"$work/err" ||
  { cat "$work/err" >&2; fail "dry run"; }
[[ -e $model/placement.json || -e $work/d0/deltafin-demo ]] && fail "the dry run wrote something"
shares=$(json_field '["drives"][2]["share_of_bytes"]' <"$work/plan.json")
"$py" -c "import sys; s=float(sys.argv[1]); sys.exit(0 if abs(s-4/7)<0.05 else 1)" "$shares" ||
  fail "the 4 GB/s folder gets $shares of the bytes, expected about 4/7"

# The real thing, with replicas of the most used experts from the trace.
expert_bytes=$(du -sb "$model" | cut -f1)
budget=$((expert_bytes / 2))
"$deltafin" place --model "$model" --drives "$drives" --gbps 1,2,4 --from-trace "$work/routes.jsonl" \
  --budget-per-drive "$budget" >"$work/place.json" 2>"$work/err" || { cat "$work/err" >&2; fail "place"; }
replicas=$(json_field '["replicas"]' <"$work/place.json")
[[ $replicas -gt 0 ]] || fail "no replicas from the trace: $(cat "$work/place.json")"
[[ -f $model/placement.json ]] || fail "no placement.json in the model folder"
compgen -G "$work/d*/deltafin-demo/*.tmp" >/dev/null && fail "temporary files left behind"
echo "drives_place: placed $(json_field '["experts"]' <"$work/place.json") experts, $replicas replicas"

check_same placed
check_same placed-pieces --read-piece 4K --expert-slots 5

# Resume: nothing to write. --verify: a changed copy is found and rewritten.
"$deltafin" place --model "$model" --drives "$drives" --gbps 1,2,4 --from-trace "$work/routes.jsonl" \
  --budget-per-drive "$budget" >"$work/again.json" 2>"$work/err" || { cat "$work/err" >&2; fail "resume"; }
[[ $(json_field '["written"]' <"$work/again.json") == 0 ]] || fail "resume rewrote files: $(cat "$work/again.json")"
copies=("$work"/d2/deltafin-demo/*.bin)
victim=${copies[0]}
printf 'XXXX' | dd of="$victim" bs=1 seek=100 conv=notrunc status=none
"$deltafin" place --model "$model" --drives "$drives" --gbps 1,2,4 --from-trace "$work/routes.jsonl" \
  --budget-per-drive "$budget" --verify >"$work/verify.json" 2>"$work/err" || { cat "$work/err" >&2; fail "verify"; }
[[ $(json_field '["rewritten"]' <"$work/verify.json") == 1 ]] || fail "--verify: $(cat "$work/verify.json")"
echo "drives_place: resume wrote 0 files; --verify rewrote the changed copy"

# Short copies (every copy on d0: some of its experts have no other holder, so one is read), then
# a whole folder gone before the run: reported, read elsewhere.
for f in "$work"/d0/deltafin-demo/*.bin; do truncate -s 1000 "$f"; done
check_same truncated
grep -q "drive folder .*d0/deltafin-demo failed: .* has 1000 bytes" "$work/truncated.err" ||
  fail "the short copies were not reported"
mv "$work/d1" "$work/d1.gone"
check_same folder-missing
n=$(grep -c "drive folder .*d1/deltafin-demo failed" "$work/folder-missing.err" || true)
[[ $n == 1 ]] || fail "the missing folder was reported $n times, expected once"
mv "$work/d1.gone" "$work/d1"

# A folder removed while a generation runs (small pool, so experts are read again and again).
# 48 tokens, so the run is well past the removal when it happens.
ref48=$("$deltafin" generate --model "$model" --ids "$ids" --max-new 48 --ignore-eos --experts mapped \
  2>/dev/null) || fail "generate 48 (mapped)"
# remove_mid_run NAME FOLDER LABEL: a 48-token generation (4 slots: experts are read again and
# again) during which FOLDER is removed; its ids must equal ref48, and when it was still running
# at the removal its later reads must have found the folder gone and said so.
remove_mid_run() {
  local name=$1 folder=$2 label=$3 pid running=0
  ("$deltafin" generate --model "$model" --ids "$ids" --max-new 48 --ignore-eos --expert-slots 4 \
    >"$work/$name.out" 2>"$work/$name.err") &
  pid=$!
  sleep 0.3
  kill -0 $pid 2>/dev/null && running=1
  rm -rf "$work/$folder"
  wait $pid || fail "$label mid-run: generate exited non-zero: $(tail -3 "$work/$name.err")"
  [[ $(cat "$work/$name.out") == "$ref48" ]] &&
    echo "drives_place: $label removed mid-run: 48 ids identical" ||
    fail "$label mid-run removal: ids $(cat "$work/$name.out"), expected $ref48"
  if [[ $running == 1 ]] && ! grep -q "drive folder .*$folder/deltafin-demo failed" "$work/$name.err"; then
    fail "the $label removed mid-run was not reported"
  fi
}
remove_mid_run mid d2 folder

# ---- Striped (the default without a trace): pieces of every expert on all three folders.
mkdir -p "$work/s0" "$work/s1" "$work/s2"
sdrives="$work/s0,$work/s1,$work/s2"
"$deltafin" place --model "$model" --drives "$sdrives" --gbps 1,2,4 --dry-run >"$work/splan.json" \
  2>"$work/err" || { cat "$work/err" >&2; fail "stripe dry run"; }
[[ -e $work/s0/deltafin-demo ]] && fail "the stripe dry run wrote something"
[[ $(json_field '["layout"]' <"$work/splan.json") == stripe ]] || fail "the default layout is not stripe"
shares=$(json_field '["drives"][2]["share_of_bytes"]' <"$work/splan.json")
"$py" -c "import sys; s=float(sys.argv[1]); sys.exit(0 if abs(s-4/7)<0.05 else 1)" "$shares" ||
  fail "stripe: the 4 GB/s folder gets $shares of the bytes, expected about 4/7"
"$deltafin" place --model "$model" --drives "$sdrives" --gbps 1,2,4 >"$work/splace.json" \
  2>"$work/err" || { cat "$work/err" >&2; fail "place --layout stripe"; }
grep -q '"layout":"stripe"' "$model/placement.json" || fail "placement.json is not a stripe"
n_experts=$(json_field '["experts"]' <"$work/splace.json")
pieces=0
for d in s0 s1 s2; do
  n=$(find "$work/$d/deltafin-demo" -name 'L*-at*.bin' | wc -l)
  [[ $n -gt 0 ]] || fail "stripe: no pieces on $d"
  pieces=$((pieces + n))
done
[[ $pieces -gt $n_experts ]] || fail "stripe: $pieces pieces for $n_experts experts: not split"
echo "drives_place: striped $n_experts experts in $pieces pieces"
check_same striped
grep -q "experts striped over 3 drive folders" "$work/striped.err" || fail "striped: not read as a stripe"
check_same striped-pieces --read-piece 4K --expert-slots 5

"$deltafin" place --model "$model" --drives "$sdrives" --gbps 1,2,4 >"$work/sagain.json" \
  2>"$work/err" || { cat "$work/err" >&2; fail "stripe resume"; }
[[ $(json_field '["written"]' <"$work/sagain.json") == 0 ]] || fail "stripe resume rewrote files"
spieces=("$work"/s2/deltafin-demo/*.bin)
printf 'XXXX' | dd of="${spieces[0]}" bs=1 seek=100 conv=notrunc status=none
"$deltafin" place --model "$model" --drives "$sdrives" --gbps 1,2,4 --verify >"$work/sverify.json" \
  2>"$work/err" || { cat "$work/err" >&2; fail "stripe verify"; }
[[ $(json_field '["rewritten"]' <"$work/sverify.json") == 1 ]] || fail "stripe --verify: $(cat "$work/sverify.json")"
echo "drives_place: stripe resume wrote 0 files; --verify rewrote the changed piece"

# Short pieces on one folder: it is reported once and every expert comes whole from the shards.
for f in "$work"/s0/deltafin-demo/*.bin; do truncate -s 1000 "$f"; done
check_same striped-truncated
n=$(grep -c "drive folder .*s0/deltafin-demo failed: .* has 1000 bytes" "$work/striped-truncated.err" || true)
[[ $n == 1 ]] || fail "the short pieces were reported $n times, expected once"
"$deltafin" place --model "$model" --drives "$sdrives" --gbps 1,2,4 >"$work/srepair.json" \
  2>"$work/err" || { cat "$work/err" >&2; fail "stripe repair"; }
[[ $(json_field '["written"]' <"$work/srepair.json") -gt 0 ]] || fail "the short pieces were kept"

# A stripe folder removed while a generation runs: its experts move to the shards, ids unchanged.
remove_mid_run smid s1 "stripe folder"

# Refusals name the flag.
if "$deltafin" place --model "$model" --drives "$drives" --gbps 1,2,4 --layout stripe \
    --from-trace "$work/routes.jsonl" 2>"$work/err" >/dev/null; then
  fail "--layout stripe with --from-trace was accepted"
fi
grep -q -- "--from-trace adds hot replicas, which only the whole layout has" "$work/err" ||
  fail "unexpected refusal: $(cat "$work/err")"
if "$deltafin" place --model "$model" --drives "$work/d0" --gbps 1 --layout diagonal \
    2>"$work/err" >/dev/null; then
  fail "--layout diagonal was accepted"
fi
grep -q -- "--layout diagonal: expected stripe or whole" "$work/err" || fail "unexpected refusal: $(cat "$work/err")"
if "$deltafin" place --model "$model" --drives "$work/nowhere" --gbps 1 2>"$work/err" >/dev/null; then
  fail "a missing --drives folder was accepted"
fi
grep -q -- "--drives $work/nowhere" "$work/err" || fail "unexpected refusal: $(cat "$work/err")"
if "$deltafin" place --model "$model" --drives "$work/d0,$work/d0/" --gbps 1,1 2>"$work/err" >/dev/null; then
  fail "a folder named twice was accepted"
fi
grep -q -- "names $work/d0/ twice" "$work/err" || fail "unexpected refusal: $(cat "$work/err")"
if "$deltafin" place --model "$model" --drives "$work/d0" --gbps 1 --budget-per-drive lots \
    2>"$work/err" >/dev/null; then
  fail "--budget-per-drive lots was accepted"
fi
grep -q -- "--budget-per-drive lots: expected a size" "$work/err" || fail "unexpected refusal: $(cat "$work/err")"
exit $failed
