#!/usr/bin/env bash
# Finds, on one checkpoint, the two prompts the speculation figures need (docs/PERFORMANCE.md,
# "Speculation"): one whose greedy continuation repeats (n-gram drafts get accepted) and one where
# n-gram drafts are proposed and fail. Greedy ids depend on every weight, so this runs on exactly
# the checkpoint the figures use. Each candidate is one `deltafin generate --speculate off` (no
# cgroup, page cache kept: speed is not measured here); the n-gram drafter (longest of n = 4..2,
# most recent earlier occurrence, as runtime/ngram_drafter.h) is replayed offline on prompt +
# continuation, counting proposals and accepted ids. Prints both picks as REPEAT_IDS= / FAIL_IDS=.
# usage: scripts/find_spec_prompts.sh DELTAFIN MODEL_DIR OUT_DIR [TOKENS=24]
#   env: BUDGET_S (default 240): stop trying candidates after this many seconds
set -euo pipefail
deltafin=$1
model=$2
out=$3
tokens=${4:-24}
budget_s=${BUDGET_S:-240}
mkdir -p "$out"
start=$SECONDS

gen() {  # gen IDS: the greedy continuation, one JSON array
  "$deltafin" generate --model "$model" --ids "$1" --max-new "$tokens" --ignore-eos \
    --speculate off 2>>"$out/search.err" | tail -1
}

# Candidate families. Random weights give no induction, so a repeat must come from the model's
# own dynamics: constant and short-period prompts (a fixed point or a short cycle of the
# next-token map), and prompts that hold the model's own continuation once (S + C(S) + S), where
# the first drafted ids are C(S)'s and hold only if the context does not change them.
: >"$out/candidates.txt"
try() {
  (( SECONDS - start < budget_s )) || return 0
  local ids=$1 c
  c=$(gen "$ids")
  echo "$ids $c" >>"$out/candidates.txt"
  echo "[$((SECONDS - start)) s] $ids -> $c" >&2
  LAST=$c
}
# Self-feed: P(k+1) = P(k) + C(P(k)) + S. Measured on the VM's copy of the device checkpoint, the
# id after S was the same whatever came before it (9292 after 100,137,174,211) while later ids
# changed, so these prompts hold several continuations of S: drafts get proposed, and hold as far
# as the continuations agree.
for s in "100,137,174,211" "500,900,1300,1700"; do
  p=$s
  for k in 1 2 3 4; do
    try "$p"
    p="$p,$(echo "$LAST" | tr -d '[] '),$s"
  done
done

for t in 1000 5 60000 163000; do try "$t,$t,$t,$t,$t,$t,$t,$t"; done
for p in "7,8" "300,301,302" "11,22,33,44"; do try "$p,$p,$p,$p"; done

python3 - "$out/candidates.txt" "$tokens" <<'EOF' | tee "$out/picks.txt"
import json, sys
def replay(hist, n_prompt, draft_max=7):
    """proposed and accepted ids of the n-gram drafter over the continuation, verifying up to
    draft_max drafts per step as a pass that always drafts would"""
    proposed = accepted = steps = 0
    i = n_prompt  # hist[i] is the pending id
    while i < len(hist) - 1:
        steps += 1
        best = []
        for n in (4, 3, 2):
            if i + 1 < n:
                continue
            suf = hist[i + 1 - n : i + 1]
            for j in range(i - n, -1, -1):
                if hist[j : j + n] == suf:
                    best = hist[j + n : min(j + n + draft_max, i + 1)]
                    break
            if best:
                break
        k = 0
        while k < len(best) and i + 1 + k < len(hist) and best[k] == hist[i + 1 + k]:
            k += 1
        proposed += len(best)
        accepted += k
        i += 1 + k
    return proposed, accepted, steps
rows = []
for line in open(sys.argv[1]):
    ids, cont = line.split(" ", 1)
    p = [int(x) for x in ids.split(",")]
    c = json.loads(cont)
    prop, acc, steps = replay(p + c, len(p))
    rows.append((ids, prop, acc, steps, len(c)))
    print(f"{ids}: proposed {prop}, accepted {acc}, {len(c) - 1} decoded ids in {steps} passes")
rep = max(rows, key=lambda r: (r[2], -r[1]))
fail = max(rows, key=lambda r: (r[1] - r[2] if r[2] == 0 else -1, -len(r[0])))
print(f"REPEAT_IDS={rep[0]}  # accepted {rep[2]}, {rep[4] - 1} ids in {rep[3]} passes")
print(f"FAIL_IDS={fail[0]}  # proposed {fail[1]}, accepted {fail[2]}")
if rep[2] == 0:
    print("NOTE: no candidate repeats: no n-gram draft would be accepted on any of them")
if fail[1] == 0:
    print("NOTE: no candidate gets a draft proposed: the back-off is not exercised")
EOF
