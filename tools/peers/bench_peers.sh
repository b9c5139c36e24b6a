#!/usr/bin/env bash
# Side-by-side decode benchmark of deltafin against the public C engines kimi-k3-in-c and colibri
# (kimi_k3), and llama.cpp's own K3 code through node-llama-cpp's prebuilt libraries, on one
# HF-layout K3 checkpoint: interleaved rounds, page cache dropped before every run, peak RSS from
# /usr/bin/time -v, greedy ids compared. Holds no peer code: the peers are built beforehand
# (tools/peers/README.md) and found under PEERS_DIR; node-llama-cpp is the npm package pinned in
# tools/peers/package.json, installed there on first use.
#
# usage: tools/peers/bench_peers.sh PEERS_DIR MODEL_DIR DELTAFIN_BIN OUT_DIR [ROUNDS] [TOKENS]
#   PEERS_DIR/kimi-k3-in-c/bin/k3   and   PEERS_DIR/colibri/c/kimi_k3   (either may be absent)
#   env: K3C_CACHE_GB (default 12)  kimi-k3-in-c expert cache; its trunk and embeddings are resident
#        COLI_EXPERT_GB (default 6.5) colibri expert LRU; its spine is resident in f32 (14.9 GB)
#        COLI_RAM_GB (default 25) colibri's RAM guard; it keeps 3.7 GB of it for page cache and
#        activations and clamps the LRU to the rest, so this leaves COLI_EXPERT_GB in force
#        (the defaults put each peer's peak RSS near deltafin's default budget on a 23.5 GiB
#        machine, about 20 GiB; check the rss column)
#        ENGINES (default "df df_mapped k3c coli"; also df_all: deltafin with --layer-threads all;
#        lcpp: llama.cpp, node-llama-cpp's defaults: the GGUF memory-mapped, F16 KV cache, CPU)
#        LCPP_GGUF (default MODEL_DIR.gguf, beside the folder) the model for lcpp, written once by
#        k3_to_gguf.py when missing (outside the timed runs); LCPP_THREADS (default: node-llama-cpp's)
#        MEM_LIMIT (e.g. 21G; default none) every run inside a memory cgroup capped there, page
#        cache included, and deltafin given --memory-budget MEM_LIMIT: the same memory for every
#        engine on a host with more RAM (needs root; cgroup v2, or v1's memory controller)
#        Speculation pair (issue #16): df_off / df_spec (deltafin bench decode --ids SPEC_IDS,
#        --speculate off / DF_SPECULATE, default auto) against k3c_spec (kimi-k3-in-c --spec 8
#        --incremental on its packed trunk) and k3c_serial (the same without --spec):
#        SPEC_IDS (default PROMPT_IDS) the prompt; K3C_TRUNK (default MODEL_DIR.k3trunk) its packed
#        trunk, written once by its own tools/pack_trunk.py when missing; K3C_SPEC_TRUNK_GB and
#        K3C_SPEC_CACHE_GB its budgets (default: from MEM_LIMIT, embeddings and lm_head taken off,
#        trunk first as its presets do, 1 GB of expert cache); K3C_SPEC (default 8)
# Every engine gets the same prompt ids as `deltafin bench decode --prompt-tokens 2` (100, 137)
# and runs TOKENS decode steps; s/token is the mean of those steps (prompt and load excluded).
set -euo pipefail

if [[ $# -lt 4 ]]; then
  sed -n '9,25p' "$0"
  exit 2
fi
PEERS=$(realpath "$1")
MODEL=$(realpath "$2")
DF=$(realpath "$3")
OUT=$4
ROUNDS=${5:-3}
TOKENS=${6:-12}
K3C_CACHE_GB=${K3C_CACHE_GB:-12}
COLI_EXPERT_GB=${COLI_EXPERT_GB:-6.5}
COLI_RAM_GB=${COLI_RAM_GB:-25}
ENGINES=${ENGINES:-"df df_mapped k3c coli"}
MEM_LIMIT=${MEM_LIMIT:-}
PROMPT_IDS="100,137"  # deltafin bench decode's 2-token prompt: (100 + 37 i) mod vocab
SPEC_IDS=${SPEC_IDS:-$PROMPT_IDS}
export SPEC_IDS
K3C_SPEC=${K3C_SPEC:-8}
K3C_TRUNK=${K3C_TRUNK:-${MODEL%/}.k3trunk}
K3C=$PEERS/kimi-k3-in-c/bin/k3
COLI=$PEERS/colibri/c/kimi_k3
HERE=$(dirname "$(realpath "$0")")
LCPP_GGUF=${LCPP_GGUF:-${MODEL%/}.gguf}
LCPP_THREADS=${LCPP_THREADS:-}
# Debian's python3, which has numpy (python3-numpy); a python3 earlier in PATH may not.
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUT"

# llama.cpp reads GGUF only: convert once (exact repack, k3_to_gguf.py) and install the pinned
# node-llama-cpp (its CPU build alone) before the first round, so neither is in any timed run.
if [[ " $ENGINES " == *" lcpp "* ]]; then
  # npm install, not npm ci: the lock holds only the packages the registry resolved (no other
  # platforms' optional builds), which npm ci refuses as out of sync; install keeps its versions.
  [[ -d $HERE/node_modules/node-llama-cpp ]] ||
    (cd "$HERE" && npm install --omit=optional --no-audit --no-fund --loglevel=error)
  [[ -s $LCPP_GGUF ]] || "$PY" "$HERE/k3_to_gguf.py" "$MODEL" "$LCPP_GGUF"
fi

# kimi-k3-in-c streams its trunk only from its own packed copy (tools/pack_trunk.py: each layer's
# non-expert tensors as one 4096-aligned run, read with O_DIRECT). Packed once, outside the runs.
if [[ " $ENGINES " == *" k3c_spec "* || " $ENGINES " == *" k3c_serial "* ]]; then
  n_layers=$("$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("text_config", c)["num_hidden_layers"])' "$MODEL/config.json")
  [[ -s $K3C_TRUNK/trunk.json ]] ||
    "$PY" "$PEERS/kimi-k3-in-c/tools/pack_trunk.py" "$MODEL" "$K3C_TRUNK" "$n_layers" >"$OUT/k3c_pack.log"
  # Its budgets at the same memory as deltafin's: MEM_LIMIT less the embeddings, lm_head and
  # norms it holds resident in BF16 and 0.6 GB for its KV cache, state and buffers; then the
  # trunk first (its presets' rule, docs/TUNING.md there), 1 GB of expert cache.
  K3C_SPEC_CACHE_GB=${K3C_SPEC_CACHE_GB:-1}
  if [[ -n $MEM_LIMIT && -z ${K3C_SPEC_TRUNK_GB:-} ]]; then
    K3C_SPEC_TRUNK_GB=$("$PY" - "$MODEL" "$(numfmt --from=iec "$MEM_LIMIT")" "$K3C_SPEC_CACHE_GB" <<'EOF'
import json, os, struct, sys
d, limit, cache_gb = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
globals_bytes = 0
for shard in sorted(set(wm.values())):
    with open(os.path.join(d, shard), "rb") as f:
        hdr = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    for k, v in hdr.items():
        if k != "__metadata__" and ".layers." not in k:
            globals_bytes += v["data_offsets"][1] - v["data_offsets"][0]
print(round((limit - globals_bytes) / 1e9 - 0.6 - cache_gb, 2))
EOF
)
  fi
  K3C_SPEC_TRUNK_GB=${K3C_SPEC_TRUNK_GB:-4}
  echo "k3c: packed trunk $K3C_TRUNK, --trunk-gb $K3C_SPEC_TRUNK_GB --cache-gb $K3C_SPEC_CACHE_GB" >&2
fi

# Cold start for every run: the shards must come from the disk, not from the previous engine's
# page cache. drop_caches needs root; otherwise evict the shards file by file.
drop_cache() {
  sync
  if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
    "$PY" - "$MODEL" "$LCPP_GGUF" <<'EOF'
import os, sys, glob
for p in glob.glob(os.path.join(sys.argv[1], "*.safetensors")) + [q for q in sys.argv[2:] if os.path.exists(q)]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
EOF
  fi
}

# With MEM_LIMIT, a memory cgroup for the runs: without it, a mapped engine on a host with more
# RAM than the budget keeps the model in page cache the budget does not count (measured: plain
# mmap at 1.1 s/token uncapped, 5.4 s/token capped at 21 GiB, on a 48 GiB checkpoint).
CG=""
DF_BUDGET=()
if [[ -n $MEM_LIMIT ]]; then
  limit=$(numfmt --from=iec "$MEM_LIMIT")
  DF_BUDGET=(--memory-budget "$MEM_LIMIT")
  if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    CG=/sys/fs/cgroup/deltafin-bench-$$
    mkdir "$CG" && echo "$limit" >"$CG/memory.max"
    [[ -e $CG/memory.swap.max ]] && echo 0 >"$CG/memory.swap.max"
  elif [[ -d /sys/fs/cgroup/memory ]]; then
    CG=/sys/fs/cgroup/memory/deltafin-bench-$$
    mkdir "$CG" && echo "$limit" >"$CG/memory.limit_in_bytes"
  else
    echo "MEM_LIMIT needs a writable memory cgroup (v2, or v1's memory controller)" >&2
    exit 2
  fi
  trap 'rmdir "$CG" 2>/dev/null || true' EXIT
fi

# run NAME ROUND CMD...: one cold run, stdout/stderr/time kept as OUT/NAME.rROUND.{out,err}.
run() {
  local name=$1 round=$2
  shift 2
  local base=$OUT/$name.r$round
  drop_cache
  echo "[$(date +%T)] round $round: $name" >&2
  local rc=0
  if [[ -n $CG ]]; then
    # A subshell joins the cgroup and execs the run, so only the run is capped.
    (echo "$BASHPID" >"$CG/cgroup.procs" && exec /usr/bin/time -v -o "$base.time" "$@") \
      >"$base.out" 2>"$base.err" || rc=$?
  else
    /usr/bin/time -v -o "$base.time" "$@" >"$base.out" 2>"$base.err" || rc=$?
  fi
  echo "$rc" >"$base.rc"
  [[ $rc -eq 0 ]] || echo "  $name exited $rc (see $base.err)" >&2
}

engine() {
  local e=$1 r=$2
  case $e in
    df)
      run df "$r" "$DF" bench decode --device cpu --model "$MODEL" --tokens "$TOKENS" --prompt-tokens 2 --json \
        "${DF_BUDGET[@]}" ;;
    df_all)  # every thread for the layers: the baseline the default's --layer-threads auto beats
      run df_all "$r" "$DF" bench decode --device cpu --model "$MODEL" --tokens "$TOKENS" --prompt-tokens 2 --json \
        --layer-threads all "${DF_BUDGET[@]}" ;;
    df_mapped)
      run df_mapped "$r" "$DF" bench decode --device cpu --model "$MODEL" --tokens "$TOKENS" --prompt-tokens 2 \
        --json --experts mapped --no-prefetch "${DF_BUDGET[@]}" ;;
    k3c)
      [[ -x $K3C ]] || return 0
      # Step 0 of its table is the prompt pass; steps 1..TOKENS are decode steps.
      run k3c "$r" "$K3C" "$MODEL" --ids "$PROMPT_IDS" --gen $((TOKENS + 1)) --incremental \
        --cache-gb "$K3C_CACHE_GB" --out "$OUT/k3c.r$r.json" ;;
    coli)
      [[ -x $COLI ]] || return 0
      # Exact mode per its docs/kimi_k3.md: f32 spine (K3_*BITS=32), float activations on the
      # MXFP4 experts (K3_IDOT=0), all 16 experts (K3_TOPP=0). --ngen TOKENS+1 runs TOKENS decode
      # steps (its loop stops when prompt+ngen fills the context). The usage history goes to
      # OUT, never into the model folder, and is not saved, so every run starts cold.
      run coli "$r" env K3_BITS=32 K3_MLA_BITS=32 K3_HEAD_BITS=32 K3_IDOT=0 K3_TOPP=0 \
        K3_EXPERT_GB="$COLI_EXPERT_GB" RAM_GB="$COLI_RAM_GB" USAGE_SAVE=0 COLI_USAGE="$OUT/coli_usage.none" \
        "$COLI" "$MODEL" --ids "$PROMPT_IDS" --ngen $((TOKENS + 1)) ;;
    df_off | df_spec)
      # The speculation pair: the chosen prompt; s/token is the JSON's mean over the decoded ids
      # (a pass that yields several ids counts once per id).
      local mode=off
      [[ $e == df_spec ]] && mode=${DF_SPECULATE:-auto}
      run "$e" "$r" "$DF" bench decode --device cpu --model "$MODEL" --tokens "$TOKENS" --ids "$SPEC_IDS" --json \
        --speculate "$mode" --ceiling-reps 1 "${DF_BUDGET[@]}" ;;
    k3c_spec | k3c_serial)
      [[ -x $K3C ]] || return 0
      local spec=()
      [[ $e == k3c_spec ]] && spec=(--spec "$K3C_SPEC")
      run "$e" "$r" "$K3C" "$MODEL" --ids "$SPEC_IDS" --gen $((TOKENS + 1)) --incremental "${spec[@]}" \
        --trunk "$K3C_TRUNK" --trunk-gb "$K3C_SPEC_TRUNK_GB" --cache-gb "$K3C_SPEC_CACHE_GB" \
        --out "$OUT/$e.r$r.json" ;;
    lcpp)
      # Prompt in one batch, then TOKENS greedy steps; per-step wall times on stderr in deltafin's
      # "token i: ... wall X ms" form, ids and load time in its JSON line.
      run lcpp "$r" node "$HERE/lcpp_run.mjs" --model "$LCPP_GGUF" --ids "$PROMPT_IDS" --tokens "$TOKENS" \
        ${LCPP_THREADS:+--threads "$LCPP_THREADS"} ;;
    *) echo "unknown engine $e" >&2 && exit 2 ;;
  esac
}

for ((r = 1; r <= ROUNDS; r++)); do
  for e in $ENGINES; do engine "$e" "$r"; done
done

"$PY" - "$OUT" "$ROUNDS" "$TOKENS" "$ENGINES" <<'EOF'
import json, os, re, statistics, sys
out, rounds, tokens, engines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()

def read(p):
    return open(p, errors="replace").read() if os.path.exists(p) else ""

def rss_gib(base):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", read(base + ".time"))
    return int(m.group(1)) / 2**20 if m else None

def parse(e, base):
    o, err = read(base + ".out"), read(base + ".err")
    if e == "lcpp":
        j = json.loads(o.strip().splitlines()[-1])
        return dict(steps=j["step_seconds"], ids=j["ids"], load=round(j["load_seconds"], 2),
                    prompt_s=round(j["prompt_seconds"], 2), threads=j["threads"])
    if e in ("df_off", "df_spec"):
        j = json.loads(o.strip().splitlines()[-1])
        n = j["tokens"]
        return dict(steps=[j["seconds_per_token_mean"]] * n, ids=j["ids"], load=j["load_seconds"],
                    budget=j["budget_bytes"] / 2**30, tokens_per_pass=j["tokens_per_pass"],
                    passes=j["passes"], drafted=j["drafted"], accepted=j["accepted"],
                    rss_within_budget=j["rss_within_budget"])
    if e.startswith("df"):
        j = json.loads(o.strip().splitlines()[-1])
        steps = [float(x) / 1e3 for x in re.findall(r"token \d+: wall ([\d.]+) ms", err)]
        return dict(steps=steps, ids=j["ids"], load=j["load_seconds"], budget=j["budget_bytes"] / 2**30,
                    median=j["seconds_per_token"])
    if e in ("k3c_spec", "k3c_serial"):
        # One STEP row per sweep; step 0 is the prompt (one id), each later sweep emits 1 + its
        # accepted drafts, so s/token = the decode sweeps' seconds over the ids they emitted.
        rows = re.findall(r"^(\d+)\s+(\d+)\s+([\d.]+)\s", o, re.M)
        ids = json.loads(read(base + ".json"))["generated_ids"]
        secs = [float(s) for i, _, s in rows if int(i) >= 1]
        n_dec = len(ids) - 1
        m = re.search(r"PEAK RSS for the whole run: (\S+ \S+)", o)
        return dict(steps=[sum(secs) / n_dec] * n_dec, ids=ids, passes=len(secs),
                    tokens_per_pass=round(n_dec / len(secs), 3), load=None,
                    peak_rss=m.group(1) if m else None)
    if e == "k3c":
        rows = re.findall(r"^(\d+)\s+(\d+)\s+([\d.]+)\s", o, re.M)
        steps = [float(s) for i, _, s in rows if int(i) >= 1]
        ids = json.loads(read(base + ".json") or "{}").get("generated_ids", [int(t) for _, t, _ in rows])
        m = re.search(r"trunk loaded in ([\d.]+) s", o)
        m2 = re.search(r"lm_head: [\d.]+ GB in ([\d.]+) s", o)
        load = (float(m.group(1)) if m else 0) + (float(m2.group(1)) if m2 else 0)
        return dict(steps=steps, ids=ids, load=load)
    if e == "coli":
        m = re.search(r"TUNE decode: (\d+) tokens in ([\d.]+)s", o)
        n_steps = int(m.group(1)) - 1  # the first id comes from the prompt pass
        ids = [int(x) for x in o[: m.start()].split()]
        li = re.search(r"init done in ([\d.]+)s", err)
        return dict(steps=[float(m.group(2)) / n_steps] * n_steps, ids=ids,
                    load=float(li.group(1)) if li else None)

SPEC = {"df_off", "df_spec", "k3c_spec", "k3c_serial"}  # engines on the chosen prompt, SPEC_IDS
rows, ref_ids, spec_ref = {}, None, None
for e in engines:
    for r in range(1, rounds + 1):
        base = os.path.join(out, f"{e}.r{r}")
        if not os.path.exists(base + ".rc"):
            continue
        try:
            d = parse(e, base)
        except Exception as ex:  # a failed run: report it, keep the rest
            print(f"{e} round {r}: unparsed ({ex}); rc {read(base + '.rc').strip()}")
            continue
        d["mean"] = statistics.mean(d["steps"]) if d["steps"] else float("nan")
        d["rss"] = rss_gib(base)
        d["round"] = r
        rows.setdefault(e, []).append(d)
        if e == "df" and ref_ids is None:
            ref_ids = d["ids"]
        if e in ("df_off", "df_spec") and spec_ref is None:
            spec_ref = d["ids"]

summary = {}
print(f"decode s/token = mean of {tokens} decode steps per run; min/median/max over runs")
for e, ds in rows.items():
    means = sorted(d["mean"] for d in ds)
    ref = spec_ref if e in SPEC else ref_ids
    # The speculation pair decodes the same count: its ids must be equal outright.
    same = [ref is not None and (d["ids"] == ref if e in SPEC else
            d["ids"][: len(ref)] == ref[: len(d["ids"])]) for d in ds]
    s = dict(min=means[0], median=statistics.median(means), max=means[-1],
             rss_gib=[round(d["rss"], 2) for d in ds], load_s=[d["load"] for d in ds],
             per_round={d["round"]: round(d["mean"], 3) for d in ds},
             ids=[d["ids"] for d in ds], ids_equal_deltafin=same)
    for k in ("tokens_per_pass", "passes", "drafted", "accepted", "peak_rss", "rss_within_budget"):
        if k in ds[0]:
            s[k] = [d[k] for d in ds]
    summary[e] = s
    print(f"{e:10s} {s['min']:.3f} / {s['median']:.3f} / {s['max']:.3f}  rss GiB {s['rss_gib']}  "
          f"load s {s['load_s']}  ids==deltafin {same}")
if "df" in summary:
    for e in summary:
        if e == "df":
            continue
        per = [summary[e]["per_round"][r] / summary["df"]["per_round"][r]
               for r in summary["df"]["per_round"] if r in summary[e]["per_round"]]
        summary[e]["speedup_df_per_round"] = [round(x, 2) for x in per]
        print(f"deltafin speed-up over {e}: median {summary[e]['median'] / summary['df']['median']:.2f}x"
              f", per round {[round(x, 2) for x in per]}")
for base_e in ("df_spec", "df_off"):  # the pair's ratios, per round (interleaved)
    if base_e not in summary:
        continue
    for e in [x for x in summary if x in SPEC and x != base_e]:
        b = summary[base_e]["per_round"]
        per = [summary[e]["per_round"][r] / b[r] for r in b if r in summary[e]["per_round"]]
        summary[e][f"speedup_{base_e}_per_round"] = [round(x, 2) for x in per]
        print(f"{base_e} speed-up over {e}: median {summary[e]['median'] / summary[base_e]['median']:.2f}x"
              f", per round {[round(x, 2) for x in per]}")
if SPEC & set(summary):
    summary["spec_ids"] = os.environ.get("SPEC_IDS", "")
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
