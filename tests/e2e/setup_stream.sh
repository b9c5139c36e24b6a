#!/usr/bin/env bash
# `deltafin setup --stream` and `deltafin fetch-experts` against a local HF-style server: the spine
# shards hold exactly the non-expert tensors, the expert cache files are the experts' verbatim
# spans, fetch-experts fills the pool layer by layer (resumable, --dry-run exact), and a streaming
# install upgrades to a full one.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

S="$WORK/stream"

# 1. The streaming install: spine shards, their index, the manifest, an empty cache.
stream_install "$S"
grep -q '"kind": "stream"' "$S/.deltafin/install.json" || fail "install.json is not kind stream"
ls "$S" | grep -q '^model-' && fail "a streaming install must not hold remote shards"
spine_out=$(check_spine "$S" "$WORK/repo") || fail "spine check"
read -r n_spine n_experts <<<"$spine_out"
echo "spine: $n_spine tensors identical, $n_experts experts in the manifest"

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

# 3b. --verify reassembles each shard from the spine and the cache and checks its sha256.
"$DF" fetch-experts --model "$S" --verify >"$WORK/v1" 2>"$WORK/err" || fail "verify: $(cat "$WORK/v1" "$WORK/err")"
[[ $(grep -c "ok (sha256 matches)" "$WORK/v1") == $(echo "$(cd "$WORK/repo" && ls model-*.safetensors)" | wc -l) ]] ||
  fail "verify: $(cat "$WORK/v1")"
victim=$(find "$S/experts" -name 'E0003.bin' | head -1)
cp "$victim" "$WORK/victim.bak"
python3 -c "
import sys; f = open(sys.argv[1], 'r+b'); f.seek(100); b = f.read(1); f.seek(100); f.write(bytes([b[0] ^ 1]))" "$victim"
expect_fail "$WORK/v2.err" "$DF" fetch-experts --model "$S" --verify
grep -q "MISMATCH" "$WORK/v2.err.out" || fail "verify missed a corrupted expert: $(cat "$WORK/v2.err.out")"
cp "$WORK/victim.bak" "$victim"
echo "verify: $(grep -c ok "$WORK/v1") shards match their sha256; a flipped byte is found"

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
