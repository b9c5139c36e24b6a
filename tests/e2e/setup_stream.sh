#!/usr/bin/env bash
# `deltafin setup --stream` and `deltafin fetch-experts` against a local HF-style server: the spine
# shards hold exactly the non-expert tensors, the expert cache files are the experts' verbatim
# spans, fetch-experts fills the pool layer by layer (resumable, --dry-run exact), and a streaming
# install upgrades to a full one.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

make_repo "$WORK/repo"
hf_start "test/model=$WORK/repo"
S="$WORK/stream"

# 1. The streaming install: spine shards, their index, the manifest, an empty cache.
"$DF" setup --stream --repo test/model --revision main --endpoint "$HF_URL" --dir "$S" \
  >/dev/null 2>"$WORK/err" || fail "setup --stream: $(tail -5 "$WORK/err")"
grep -q '"kind": "stream"' "$S/.deltafin/install.json" || fail "install.json is not kind stream"
ls "$S" | grep -q '^model-' && fail "a streaming install must not hold remote shards"
python3 - "$S" "$WORK/repo" <<'PY' || fail "spine check"
import json, os, struct, sys
root, repo = sys.argv[1], sys.argv[2]
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: (path, 8 + n + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0]) for k, v in h.items()}
def read(t):
    with open(t[0], "rb") as f:
        f.seek(t[1]); return f.read(t[2])
orig = {}
for f in os.listdir(repo):
    if f.startswith("model-") and f.endswith(".safetensors"):
        orig.update(tensors(os.path.join(repo, f)))
index = json.load(open(os.path.join(root, "model.safetensors.index.json")))["weight_map"]
spine = {}
for f in set(index.values()):
    assert f.startswith("spine-"), f
    spine.update(tensors(os.path.join(root, f)))
assert set(spine) == set(index), "index and spine shards disagree"
experts = {k for k in orig if ".block_sparse_moe.experts." in k}
assert set(spine) == set(orig) - experts, "the spine must be every non-expert tensor"
for k, t in spine.items():
    assert read(t) == read(orig[k]), k
m = json.load(open(os.path.join(root, ".deltafin/experts.json")))
n = sum(len(l["experts"]) for l in m["layers"])
assert n * 6 == len(experts), (n, len(experts))
print("spine: %d tensors identical, %d experts in the manifest" % (len(spine), n))
PY

# 2. --dry-run tells exactly what is missing.
"$DF" fetch-experts --model "$S" --dry-run >"$WORK/dry" 2>"$WORK/err" || fail "dry-run: $(tail -3 "$WORK/err")"
total_bytes=$(python3 -c "
import json; m = json.load(open('$S/.deltafin/experts.json'))
print(sum(l['span_bytes'] * len(l['experts']) for l in m['layers']))")
expect_in "$WORK/dry" "($total_bytes bytes)"
[[ $(find "$S/experts" -type f | wc -l) == 0 ]] || fail "--dry-run fetched something"

# 3. Part of the pool, then the rest; every cache file is its expert's verbatim span.
hf_log_reset
"$DF" fetch-experts --model "$S" --layers 1-2 >/dev/null 2>"$WORK/err" || fail "fetch 1-2: $(tail -3 "$WORK/err")"
ls "$S/experts" | sort | tr '\n' ' ' | grep -qx "L001 L002 " || fail "--layers 1-2 fetched $(ls "$S/experts")"
n12=$(check_expert_cache "$S" "$WORK/repo") || fail "cache check after --layers 1-2"
# One range request per expert, over keep-alive connections (at most --jobs of them).
n_req=$(hf_count 'r["method"] == "GET" and r["status"] == 206')
[[ "$n_req" == "$n12" ]] || fail "$n12 experts took $n_req range requests"
ports=$(python3 -c "import json; print(len({json.loads(l)['port'] for l in open('$WORK/requests.jsonl')}))")
((ports <= 4)) || fail "the fetches used $ports connections, expected at most 4"
"$DF" fetch-experts --model "$S" --dry-run >"$WORK/dry2" 2>/dev/null
grep -q "layer   1: 0 of" "$WORK/dry2" || fail "dry-run after a partial fetch: $(head -2 "$WORK/dry2")"
"$DF" fetch-experts --model "$S" >/dev/null 2>"$WORK/err" || fail "fetch all: $(tail -3 "$WORK/err")"
n_all=$(check_expert_cache "$S" "$WORK/repo") || fail "cache check after fetching all"
n_manifest=$(python3 -c "import json; print(sum(len(l['experts']) for l in json.load(open('$S/.deltafin/experts.json'))['layers']))")
[[ "$n_all" == "$n_manifest" ]] || fail "pool has $n_all of $n_manifest experts"
expect_in "$WORK/err" "0 B still remote"
hf_log_reset
"$DF" fetch-experts --model "$S" >/dev/null 2>"$WORK/err"
[[ $(hf_count 'True') == 0 ]] || fail "a complete pool still sent requests"

# 4. Bad --layers and a folder that is not a streaming install.
expect_fail "$WORK/e1" "$DF" fetch-experts --model "$S" --layers 3-x
expect_in "$WORK/e1" "not a layer or a range"
"$DF" fetch-experts --model "$WORK/repo" >"$WORK/o2" 2>&1 || fail "fetch-experts on a full folder"
expect_in "$WORK/o2" "not a streaming install"

# 5. A streaming install upgrades in place to a full one, and --stream then changes nothing.
"$DF" setup --full --repo test/model --revision main --endpoint "$HF_URL" --dir "$S" \
  >/dev/null 2>"$WORK/err" || fail "upgrade to --full: $(tail -5 "$WORK/err")"
same_files "$WORK/repo" "$S" $(cd "$WORK/repo" && ls model-*.safetensors) model.safetensors.index.json
[[ -z "$(ls "$S" | grep -E '^spine-|^experts$' || true)" ]] || fail "spine or cache left after the upgrade: $(ls "$S")"
"$DF" setup --stream --repo test/model --revision main --endpoint "$HF_URL" --dir "$S" >/dev/null 2>"$WORK/err"
expect_in "$WORK/err" "already a full install"
echo "setup_stream: ok"
