#!/usr/bin/env bash
# `deltafin setup --full` against a local HF-style server (tools/hfserver): shards byte-identical
# and checked against the sha256 the server publishes, a rerun that downloads nothing, HF_ENDPOINT
# honoured, the automatic choice with ample disk, and the same greedy ids from the install as from
# the original folder.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

make_repo "$WORK/repo"
hf_start "test/model=$WORK/repo"
shards=$(cd "$WORK/repo" && ls model-*.safetensors)
smalls="config.json generation_config.json"
[[ -f "$WORK/repo/tiktoken.model" ]] && smalls="$smalls tiktoken.model tokenizer_config.json"

# 1. A full install is the repository, byte for byte.
"$DF" setup --full --repo test/model --revision main --endpoint "$HF_URL" --dir "$WORK/full" \
  >"$WORK/out" 2>"$WORK/err" || fail "setup --full: $(tail -5 "$WORK/err")"
[[ "$(cat "$WORK/out")" == "$WORK/full" ]] || fail "setup should print the install folder on stdout"
same_files "$WORK/repo" "$WORK/full" $shards $smalls model.safetensors.index.json
grep -q '"kind": "full"' "$WORK/full/.deltafin/install.json" || fail "install.json is not kind full"
expect_in "$WORK/err" "download: 100%"
ls "$WORK/full" | grep -q partial && fail "partial files left behind"
# The record holds the sha256 the server published (X-Linked-Etag), which the download was
# verified against.
python3 - "$WORK/full" <<'PY' || fail "install.json sha256 values do not match the shards"
import hashlib, json, os, sys
rec = json.load(open(os.path.join(sys.argv[1], ".deltafin/install.json")))
for s in rec["shards"]:
    data = open(os.path.join(sys.argv[1], s["name"]), "rb").read()
    assert s["sha256"] == hashlib.sha256(data).hexdigest(), s["name"]
    assert s["size"] == len(data)
PY

# 2. A rerun finds everything in place: HEADs only, no body bytes.
hf_log_reset
"$DF" setup --full --repo test/model --revision main --endpoint "$HF_URL" --dir "$WORK/full" \
  >/dev/null 2>"$WORK/err2" || fail "rerun: $(tail -5 "$WORK/err2")"
n_get=$(hf_count 'r["method"] == "GET"')
[[ "$n_get" == 0 ]] || fail "a rerun of a complete install sent $n_get GET requests"

# 3. HF_ENDPOINT is the default endpoint; with ample disk and no flag, setup picks a full install.
HF_ENDPOINT="$HF_URL" "$DF" setup --repo test/model --revision main --dir "$WORK/auto" \
  >/dev/null 2>"$WORK/err3" || fail "setup with HF_ENDPOINT: $(tail -5 "$WORK/err3")"
expect_in "$WORK/err3" ": full install"
same_files "$WORK/repo" "$WORK/auto" $shards

# 4. A revision that does not exist is a clear error.
expect_fail "$WORK/err4" "$DF" setup --full --repo test/model --revision v9 --endpoint "$HF_URL" --dir "$WORK/bad"
expect_in "$WORK/err4" "RevisionNotFound"

# 5. Inference from the install equals inference from the original folder.
commands=$("$DF" --help 2>&1 || true)
if grep -q "^  generate " <<<"$commands"; then
  ids="5,17,42,7,99,3"
  a=$("$DF" generate --model "$WORK/repo" --ids "$ids" --max-new 8 --ignore-eos 2>/dev/null) || fail "generate on the original"
  b=$("$DF" generate --model "$WORK/full" --ids "$ids" --max-new 8 --ignore-eos 2>/dev/null) || fail "generate on the install"
  [[ "$a" == "$b" ]] || fail "ids differ: original $a, install $b"
  echo "generate: identical ids $a"
else
  echo "generate not built: inference comparison skipped"
fi
echo "setup_full: ok"
