#!/usr/bin/env bash
# Finds, on one checkpoint, the two prompts the speculation figures need (docs/PERFORMANCE.md,
# "Speculation"): one whose greedy continuation repeats (n-gram drafts get accepted) and one where
# n-gram drafts are proposed and fail. Prints both picks as REPEAT_IDS= / FAIL_IDS=.
#
# A checkpoint made with `synth --plant-cycles` (MODEL_DIR/planted_cycles.json, docs/SYNTH.md) has
# them by construction, without a search: REPEAT_IDS is the shortest cycle twice in pi order (the
# output repeats with that period), REPEAT_LONG_IDS the longest cycle once plus its first 4 ids
# (the output repeats with the long period, so drafts are not capped by it), FAIL_IDS the longest
# cycle's pairs (t, pi(t)) in a stride order (FAIL below): after every generated id the last
# two ids occur once in the prompt, followed by another id than pi's, so an n-gram draft is
# proposed and fails at every step, for up to L - 1 steps (L: the long cycle's length). Unless
# CHECK=0 each prompt is then run once (`generate --speculate off`) and checked: the greedy ids
# follow pi, and the drafter replayed offline accepts every draft on the repeats and proposes and
# fails on every step of FAIL_IDS; the script exits 1 when one of these does not hold.
#
# On any other checkpoint it searches: greedy ids depend on every weight, so this runs on exactly
# the checkpoint the figures use. Each candidate is one `deltafin generate --speculate off` (no
# cgroup, page cache kept: speed is not measured here); the n-gram drafter (longest of n = 4..2,
# most recent earlier occurrence, as runtime/ngram_drafter.h) is replayed offline on prompt +
# continuation, counting proposals and accepted ids.
# usage: scripts/find_spec_prompts.sh DELTAFIN MODEL_DIR OUT_DIR [TOKENS=24]
#   env: BUDGET_S (default 240): stop trying candidates after this many seconds
#        CHECK (default 1): 0 prints a planted checkpoint's prompts without running the model
set -euo pipefail
deltafin=$1
model=$2
out=$3
tokens=${4:-24}
budget_s=${BUDGET_S:-240}
check=${CHECK:-1}
mkdir -p "$out"
start=$SECONDS

# The n-gram drafter replayed offline, shared by both modes (imported from OUT_DIR).
cat >"$out/ngram_replay.py" <<'EOF'
def replay(hist, n_prompt, draft_max=7):
    """proposed and accepted ids of the n-gram drafter over the continuation, verifying up to
    draft_max drafts per step as a pass that always drafts would; also the steps (passes) and
    the steps whose draft failed (a drafted id differed from the continuation's)"""
    proposed = accepted = steps = failed_steps = 0
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
        failed_steps += k < len(best) and i + 1 + k < len(hist)
        i += 1 + k
    return proposed, accepted, steps, failed_steps
EOF

gen() {  # gen IDS: the greedy continuation, one JSON array
  "$deltafin" generate --device cpu --model "$model" --ids "$1" --max-new "$tokens" --ignore-eos \
    --speculate off 2>>"$out/search.err" | tail -1
}

if [[ -f $model/planted_cycles.json ]]; then
  python3 - "$model/planted_cycles.json" >"$out/planted.txt" <<'EOF'
import json, math, sys
cycles = json.load(open(sys.argv[1]))["cycles"]
short, long = min(cycles, key=len), max(cycles, key=len)
L = len(long)
repeat = short * max(2, -(-8 // len(short)))
repeat_long = long + (long * 4)[:4]
# FAIL: the pairs (c[js], c[js + 1]) for j = 0..L-1, s coprime with L (every pair once) and
# s != 2 mod L (the id after a pair is c[js + s], never pi's c[js + 2], and no three prompt ids
# follow pi, so the longest match is always a pair, whose continuation fails).
ids = lambda v: ",".join(map(str, v))
print(f"REPEAT_IDS={ids(repeat)}  # the {len(short)}-cycle in pi order: output period {len(short)}")
print(f"REPEAT_LONG_IDS={ids(repeat_long)}  # the {L}-cycle in pi order: output period {L}")
if L < 3:
    sys.exit(f"find_spec_prompts: FAIL_IDS needs a planted cycle of at least 3 ids, the longest is {L}")
s = next(s for s in range(3, 3 * L + 3) if math.gcd(s, L) == 1 and (s - 2) % L != 0)
fail = [long[(j * s + d) % L] for j in range(L) for d in (0, 1)]
print(f"FAIL_IDS={ids(fail)}  # the {L}-cycle's pi pairs at stride {s}: drafts fail for {L - 1} steps")
EOF
  if [[ $check != 0 ]]; then
    for name in REPEAT_IDS REPEAT_LONG_IDS FAIL_IDS; do
      ids=$(sed -n "s/^$name=\([0-9,]*\).*/\1/p" "$out/planted.txt")
      gen "$ids" >"$out/$name.json"
    done
    python3 - "$model/planted_cycles.json" "$out" <<'EOF' || { cat "$out/planted.txt"; exit 1; }
import json, os, sys
sys.path.insert(0, sys.argv[2])
from ngram_replay import replay
cycles = json.load(open(sys.argv[1]))["cycles"]
pi = {c[i]: c[(i + 1) % len(c)] for c in cycles for i in range(len(c))}
L = max(len(c) for c in cycles)
ok = True
for line in open(os.path.join(sys.argv[2], "planted.txt")):
    name, ids = line.split("=", 1)
    p = [int(x) for x in ids.split()[0].split(",")]
    c = json.load(open(os.path.join(sys.argv[2], f"{name}.json")))
    follows = sum(1 for prev, x in zip([p[-1]] + c, c) if pi.get(prev) == x)
    prop, acc, steps, failed = replay(p + c, len(p))
    print(f"{name}: greedy follows pi for {follows} of {len(c)} ids; n-gram replay: "
          f"{steps} steps, proposed {prop}, accepted {acc}, {failed} steps' drafts failed")
    if follows != len(c):
        print(f"  FAILED: the greedy ids do not follow the planted cycles: {c}")
        ok = False
    if name.startswith("REPEAT") and not (acc > 0 and failed == 0):
        print("  FAILED: a draft on the repeating prompt failed")
        ok = False
    if name == "FAIL_IDS" and len(c) <= L and not (acc == 0 and failed == steps):
        print("  FAILED: a step had no draft or a draft held")
        ok = False
sys.exit(0 if ok else 1)
EOF
  fi
  cat "$out/planted.txt"
  exit 0
fi

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

python3 - "$out/candidates.txt" "$tokens" "$out" <<'EOF' | tee "$out/picks.txt"
import json, sys
sys.path.insert(0, sys.argv[3])
from ngram_replay import replay
rows = []
for line in open(sys.argv[1]):
    ids, cont = line.split(" ", 1)
    p = [int(x) for x in ids.split(",")]
    c = json.loads(cont)
    prop, acc, steps, _ = replay(p + c, len(p))
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
