#!/usr/bin/env bash
# The model drafters' costs on a streamed spine (issue #17; docs/PERFORMANCE.md, "Drafters"), one
# command: synthesizes a k3-scale checkpoint with its DSpark and Qwen3-0.6B drafters (the
# published sizes, random weights), then inside a memory cgroup of MEM_LIMIT with the page cache
# dropped before every run:
#   off:    bench decode --speculate off (the K3 pass a proposal is weighed against);
#   dspark: bench decode --draft dspark --draft-min 6 (a 7-row DSpark proposal before every pass:
#           pass_draft_ms, and the disk bytes a run reads beyond off's);
#   qwen:   bench decode --draft qwen --draft-min 6 (Qwen3 runs every step; its drafts do not
#           survive translation on random weights, so the pass is padded to the same width);
#   qwen_steps: generate on the Qwen3 folder itself, the cost of each greedy Qwen id;
#   verify: bench verify --widths VERIFY_WIDTHS, the cost of each verify width, from which
#           tools/drafter_speedup.py gives each drafter's speed-up at a per-draft acceptance.
# Results: OUT/summary.json and OUT/raw.tar.gz. Needs root (cgroup v2 or v1 memory, drop_caches).
# usage: scripts/bench_drafters.sh DELTAFIN WORKDIR OUTDIR
#   env: PRESET (k3-scale; demo for a quick check), LAYERS (5), EXPERTS (32), MEM_LIMIT (13G), TOKENS (6), VERIFY_WIDTHS (1,4,8),
#        VERIFY_TOKENS (8), TIMELINE (unset), SPINE (unset: the plan's choice; stream)
set -euo pipefail
deltafin=$(realpath "$1")
work=$2
out=$3
here=$(dirname "$(realpath "$0")")
layers=${LAYERS:-5}
experts=${EXPERTS:-32}
preset=${PRESET:-k3-scale}
mem=${MEM_LIMIT:-13G}
tokens=${TOKENS:-6}
widths=${VERIFY_WIDTHS:-1,4,8}
vtokens=${VERIFY_TOKENS:-8}
raw=$out/raw
mkdir -p "$work" "$raw"

model=$work/$preset-$layers-$experts-drafters
[[ -f $model/drafters/dspark/model.safetensors ]] ||
  "$deltafin" synth --out "$model" --preset "$preset" --layers "$layers" --experts "$experts" \
    >"$raw/synth.log" 2>&1
du -sh "$model" "$model"/drafters/* >"$raw/model_size.txt"

# shellcheck source=lib/memory_cgroup.sh
source "$here/lib/memory_cgroup.sh"
make_memory_cgroup deltafin-drafters "$mem"

# SPINE=stream streams every spine layer in every run, so a drafter's memory displaces no resident
# spine layer and each K3 pass reads the same bytes whichever drafter runs.
spine=(${SPINE:+--spine "$SPINE"})
common=(--model "$model" --tokens "$tokens" --memory-budget "$mem" --ceiling-reps 1 --json
  "${spine[@]}")
# TIMELINE=1: the plain run also records where each token's time went (tools/timeline_report.py).
capped off "$deltafin" bench decode --device cpu "${common[@]}" --speculate off \
  ${TIMELINE:+--trace-timeline "$raw/off_timeline.json"}
capped dspark "$deltafin" bench decode --device cpu "${common[@]}" --draft dspark --draft-min 6
capped qwen "$deltafin" bench decode --device cpu "${common[@]}" --draft qwen --draft-min 6
qwen_ids=$(seq -s, 100 131)
capped qwen_steps "$deltafin" generate --device cpu --model "$model/drafters/qwen3-0.6b-base" \
  --ids "$qwen_ids" --max-new 9 --ignore-eos --speculate off --stats
capped verify "$deltafin" bench verify --device cpu --model "$model" --widths "$widths" --tokens "$vtokens" \
  --reps 1 --memory-budget "$mem" --json "${spine[@]}"
python3 "$here/../tools/drafter_speedup.py" "$raw" >"$out/summary.json" ||
  echo "bench_drafters: the summary failed (raw files kept)" >&2
cat "$out/summary.json" >&2 || true
tar -czf "$out/raw.tar.gz" -C "$out" raw && rm -rf "$raw"
