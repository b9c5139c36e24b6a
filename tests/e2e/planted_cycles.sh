#!/usr/bin/env bash
# `synth --plant-cycles` on the demo model, through the real engine: the planted map is listed in
# the JSON line and planted_cycles.json, greedy ids follow it from the prompts
# scripts/find_spec_prompts.sh builds, n-gram drafts are all accepted on the repeating prompts and
# proposed and all rejected on the failing one, and the ids are the same with speculation off,
# n-gram, auto and forced (--draft-min).
# usage: planted_cycles.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
tokens=24

# No drafter folders: auto then drafts with n-gram lookup (with a Qwen3 folder it drafts raw ids
# with that instead, whose random weights never hold).
"$deltafin" synth --out "$tmp/demo" --preset demo --no-drafters --plant-cycles 4,64 \
  >"$tmp/synth.json" 2>/dev/null
python3 - "$tmp/synth.json" "$tmp/demo/planted_cycles.json" <<'PY' || fail "planted cycles: $(cat "$tmp/synth.json")"
import json, sys
line = json.loads(open(sys.argv[1]).read())
cycles = json.load(open(sys.argv[2]))["cycles"]
assert line["planted_cycles"] == cycles, (line["planted_cycles"], cycles)
assert [len(c) for c in cycles] == [4, 64], cycles
ids = [t for c in cycles for t in c]
assert len(set(ids)) == 68 and all(256 <= t < 768 for t in ids), ids  # ordinary BPE merges
PY

# The prompts; the script itself runs each once and checks the greedy ids and its drafter replay.
CHECK=1 "$tests/../scripts/find_spec_prompts.sh" "$deltafin" "$tmp/demo" "$tmp/search" $tokens \
  >"$tmp/picks.txt" || { cat "$tmp/picks.txt" >&2; fail "find_spec_prompts.sh on the planted model"; }
pick() { sed -n "s/^$1=\\([0-9,]*\\).*/\\1/p" "$tmp/picks.txt"; }
repeat=$(pick REPEAT_IDS)
repeat_long=$(pick REPEAT_LONG_IDS)
fail_ids=$(pick FAIL_IDS)
[[ -n $repeat && -n $repeat_long && -n $fail_ids ]] || fail "no prompts in $(cat "$tmp/picks.txt")"

gen() {  # gen NAME IDS FLAGS...: ids to NAME.out, stderr (with --stats) to NAME.err
  local name=$1 ids=$2
  shift 2
  "$deltafin" generate --model "$tmp/demo" --ids "$ids" --max-new $tokens --ignore-eos "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" || { cat "$tmp/$name.err" >&2; fail "generate $name $*"; }
}
# summary NAME: "verify drafted accepted" from the --stats total line
summary() {
  sed -n 's/.*speculation [a-z]*: [0-9]* ids in [0-9]* passes ([0-9.]* per pass), \([0-9]*\) verify passes, drafted \([0-9]*\), accepted \([0-9]*\).*/\1 \2 \3/p' \
    "$tmp/$1.err"
}

for prompt in repeat repeat_long fail_ids; do
  ids=${!prompt}
  gen "$prompt.off" "$ids" --speculate off
  # Independent of the script: every generated id is pi of the one before, from the prompt's last.
  python3 - "$tmp/demo/planted_cycles.json" "$ids" "$tmp/$prompt.off.out" <<'PY' ||
import json, sys
cycles = json.load(open(sys.argv[1]))["cycles"]
pi = {c[i]: c[(i + 1) % len(c)] for c in cycles for i in range(len(c))}
prompt = [int(x) for x in sys.argv[2].split(",")]
out = json.loads(open(sys.argv[3]).read())
assert len(out) == 24, out
prev = prompt[-1]
for i, t in enumerate(out):
    assert pi[prev] == t, f"id {i}: {t} after {prev}, planted {pi[prev]}"
    prev = t
PY
    fail "$prompt: greedy ids do not follow the planted cycles: $(cat "$tmp/$prompt.off.out")"
  # Every pass 8 rows wide: the drafter's ids, padded to 7 with the pending id (which never
  # holds here, no id being its own successor), so a pass accepts exactly the drafter's good ids.
  gen "$prompt.forced" "$ids" --speculate auto --draft-min 7 --stats
  cmp -s "$tmp/$prompt.off.out" "$tmp/$prompt.forced.out" ||
    fail "$prompt: --draft-min 7 changed the ids: $(cat "$tmp/$prompt.forced.out")"
  for mode in "ngram" "auto" "ngram --draft-min 1"; do
    run=$prompt.${mode// /_}
    # shellcheck disable=SC2086
    gen "$run" "$ids" --speculate $mode --stats
    cmp -s "$tmp/$prompt.off.out" "$tmp/$run.out" ||
      fail "$prompt: --speculate $mode changed the ids: $(cat "$tmp/$run.out")"
    read -r verify drafted accepted <<<"$(summary "$run")"
    [[ -n ${accepted:-} ]] || fail "$prompt --speculate $mode: no --stats summary"
    case $prompt in
      repeat*)
        # Every drafted id holds: the output repeats, and the drafts copy it.
        ((accepted > 0 && accepted == drafted)) ||
          fail "$prompt --speculate $mode: drafted $drafted, accepted $accepted"
        # Fewer passes than ids: 23 decoded ids in 23 - accepted passes.
        grep -q "speculation [a-z]*: 23 ids in $((23 - accepted)) passes" "$tmp/$run.err" ||
          fail "$prompt --speculate $mode: $(grep speculation "$tmp/$run.err")" ;;
      fail_ids)
        # Drafts are proposed and verified, and not one holds.
        ((drafted > 0 && accepted == 0)) ||
          fail "$prompt --speculate $mode: drafted $drafted, accepted $accepted"
        if [[ $mode == *draft-min* ]]; then
          # Every step but the last (one id left: no room for a draft) verifies and fails.
          ((verify == 22)) || fail "$prompt --speculate $mode: $verify verify passes, not 22"
        fi
        if grep "verify pass:" "$tmp/$run.err" | grep -qv " 0 of "; then
          fail "$prompt --speculate $mode: a verify pass accepted a draft"
        fi ;;
    esac
  done
done
# With 7 forced drafts: the 64-period output gives the drafter 7 good ids to copy, the 4-period
# one at most 4 (a draft stops at the end of the history), the failing prompt none.
accepted_per_pass() { sed -n 's/.*verify pass: 8 rows, \([0-9]*\) of 7 drafted.*/\1/p' "$tmp/$1.err" | sort -u | tr '\n' ' '; }
[[ $(accepted_per_pass repeat_long.forced) == "7 " ]] ||
  fail "repeat_long --draft-min 7: accepted per pass $(accepted_per_pass repeat_long.forced)"
[[ $(accepted_per_pass repeat.forced) == "4 " ]] ||
  fail "repeat --draft-min 7: accepted per pass $(accepted_per_pass repeat.forced)"
[[ $(accepted_per_pass fail_ids.forced) == "0 " ]] ||
  fail "fail_ids --draft-min 7: accepted per pass $(accepted_per_pass fail_ids.forced)"
echo "planted_cycles: PASS"
