#!/usr/bin/env bash
# Drafter installs against the local HF-style server (tools/hfserver): `deltafin synth`'s DSpark and
# Qwen3 drafters served as their own repositories, installed by `setup` (DSpark with the model,
# Qwen3 with --include-qwen) and `setup-qwen`, under transient faults, after a persistent fault
# and a resume. DSpark's embed_tokens bytes must never be requested; every other tensor (DSpark)
# and every file (Qwen3) must equal what synth wrote.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

"$DF" synth --out "$WORK/repo" --preset demo --layers 6 --experts 16 >/dev/null 2>"$WORK/synth.err" ||
  fail "synth: $(tail -2 "$WORK/synth.err")"
DS="$WORK/repo/drafters/dspark"
QW="$WORK/repo/drafters/qwen3-0.6b-base"
[[ -f "$DS/model.safetensors" && -f "$QW/tokenizer.json" ]] || fail "synth wrote no drafters"
hf_start "test/model=$WORK/repo" --repo "test/dspark=$DS" --repo "test/qwen=$QW"
CDN_DS="/cdn/test/dspark/$COMMIT/model.safetensors"
CDN_QW="/cdn/test/qwen/$COMMIT/model.safetensors"
BIG=1000000
QFILES="config.json generation_config.json tokenizer.json tokenizer_config.json model.safetensors"

setup_all() {  # setup_all DIR [args]: K3 (full) + DSpark + Qwen3
  local dir=$1
  shift
  "$DF" setup --full --repo test/model --revision main --endpoint "$HF_URL" --dir "$dir" \
    --dspark-repo test/dspark --dspark-revision main \
    --include-qwen --qwen-repo test/qwen --qwen-revision main "$@"
}

# check_dspark INSTALLED: every tensor but embed_tokens, byte for byte, the metadata kept, and no
# request ever touched the embedding's byte range (or asked for the whole file).
check_dspark() {
  python3 - "$1/model.safetensors" "$DS/model.safetensors" "$WORK/requests.jsonl" "$CDN_DS" <<'PY'
import json, struct, sys
def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    meta = h.pop("__metadata__", None)
    return n, h, meta
def data(path, n, h, k):
    a, b = h[k]["data_offsets"]
    with open(path, "rb") as f:
        f.seek(8 + n + a)
        return f.read(b - a)
got_path, want_path, log, cdn = sys.argv[1:]
gn, got, gmeta = header(got_path)
wn, want, wmeta = header(want_path)
assert "embed_tokens.weight" in want and "embed_tokens.weight" not in got, "embedding present"
assert set(got) == set(want) - {"embed_tokens.weight"}, "tensor sets differ"
assert gmeta == wmeta == {"torchspec_version": "0.1.0"}, (gmeta, wmeta)
assert list(got) == sorted(got), "not in lexicographic order"
for k in got:
    assert got[k]["dtype"] == want[k]["dtype"] and got[k]["shape"] == want[k]["shape"], k
    assert data(got_path, gn, got, k) == data(want_path, wn, want, k), k
ea, eb = [8 + wn + x for x in want["embed_tokens.weight"]["data_offsets"]]
n = 0
for line in open(log):
    r = json.loads(line)
    if not r["path"].startswith(cdn) or r["method"] != "GET":
        continue
    rng = r.get("range")
    assert rng and rng.startswith("bytes="), "a whole-file GET of the DSpark checkpoint"
    a, b = [int(x) for x in rng[6:].split("-")]
    assert b < ea or a >= eb, "embedding bytes requested: %s (embedding %d-%d)" % (rng, ea, eb - 1)
    n += 1
assert n > 0, "no DSpark body request logged"
print(n)
PY
}

# 1. Everything under transient faults: a reset and a truncation in DSpark's tensor ranges, 503s
#    and a corrupted byte (sha256 catches it) on the Qwen3 checkpoint.
hf_faults "[{\"match\": \"$CDN_DS\", \"kind\": \"truncate\", \"after_bytes\": 300000, \"min_range\": $BIG, \"times\": 1},
            {\"match\": \"$CDN_DS\", \"kind\": \"reset\", \"after_bytes\": 0, \"times\": 1},
            {\"match\": \"$CDN_QW\", \"kind\": \"status\", \"status\": 503, \"times\": 2},
            {\"match\": \"$CDN_QW\", \"kind\": \"corrupt\", \"at\": 4000, \"min_range\": $BIG, \"times\": 1}]"
setup_all "$WORK/m" >"$WORK/m.out" 2>"$WORK/m.err" || fail "setup with drafters: $(tail -5 "$WORK/m.err")"
[[ $(hf_count '"fault" in r') -ge 4 ]] || fail "the faults did not all fire: $(cat "$WORK/server.err")"
expect_in "$WORK/m.err" "embed_tokens.weight"
expect_in "$WORK/m.err" "downloading it again from the start"
n=$(check_dspark "$WORK/m/drafters/dspark") || fail "DSpark install"
same_files "$QW" "$WORK/m/drafters/qwen3-0.6b-base" $QFILES
same_files "$DS" "$WORK/m/drafters/dspark" config.json
ls -R "$WORK/m/drafters" | grep -q partial && fail "partial files left behind"
grep -q '"embed_tokens.weight"' "$WORK/m/drafters/dspark/.deltafin/drafter.json" || fail "drafter.json"
echo "ok  setup --include-qwen under faults ($n DSpark range requests, none on the embedding)"
hf_faults '[]'

# 2. A rerun of a complete install sends no GET for the drafters' files (HEADs and the DSpark
#    header only).
hf_log_reset
setup_all "$WORK/m" >/dev/null 2>"$WORK/m2.err" || fail "rerun: $(tail -3 "$WORK/m2.err")"
[[ $(hf_count "r['method'] == 'GET' and '/qwen/' in r['path']") == 0 ]] || fail "rerun fetched Qwen3 files"
[[ $(hf_count "r['method'] == 'GET' and r['path'].startswith('$CDN_DS') and start(r) > 8") -le 1 ]] ||
  fail "rerun fetched DSpark tensors"
echo "ok  rerun of a complete install downloads nothing"

# 3. Persistent faults, then a resume from the partial files.
hf_faults "[{\"match\": \"$CDN_DS\", \"kind\": \"truncate\", \"after_bytes\": 200000, \"min_range\": $BIG, \"times\": 1},
            {\"match\": \"$CDN_DS\", \"kind\": \"status\", \"status\": 500, \"min_range\": $BIG, \"times\": -1}]"
expect_fail "$WORK/r1.err" setup_all "$WORK/r"
expect_in "$WORK/r1.err" "gave up"
[[ ! -e "$WORK/r/drafters/dspark/model.safetensors" ]] || fail "a DSpark file under its final name after a failure"
[[ ! -e "$WORK/r/drafters/dspark/.deltafin/drafter.json" ]] || fail "drafter.json after a failure"
part=$(stat -c %s "$WORK/r/drafters/dspark/model.safetensors.partial") || fail "no partial DSpark file kept"
hf_faults "[{\"match\": \"$CDN_QW\", \"kind\": \"truncate\", \"after_bytes\": 150000, \"min_range\": $BIG, \"times\": 1},
            {\"match\": \"$CDN_QW\", \"kind\": \"status\", \"status\": 500, \"min_range\": $BIG, \"times\": -1}]"
hf_log_reset
expect_fail "$WORK/r2.err" setup_all "$WORK/r"
expect_in "$WORK/r2.err" "gave up"
# The partial file's end, as an offset in the remote file (the local file lacks the embedding).
remote_at=$(python3 - "$WORK/r/drafters/dspark/model.safetensors" "$DS/model.safetensors" "$part" <<'PY'
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: 8 + n + v["data_offsets"][0] for k, v in h.items()}, {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items()}
local, size = tensors(sys.argv[1])
remote, _ = tensors(sys.argv[2])
p = int(sys.argv[3])
k = next(k for k in local if local[k] <= p < local[k] + size[k])
print(remote[k] + p - local[k])
PY
)
[[ $(hf_count "r['path'].startswith('$CDN_DS') and start(r) == $remote_at") -ge 1 ]] ||
  fail "DSpark did not resume at local byte $part (remote byte $remote_at)"
check_dspark "$WORK/r/drafters/dspark" >/dev/null || fail "DSpark after the resume"
[[ -s "$WORK/r/drafters/qwen3-0.6b-base/model.safetensors.partial" ]] || fail "no partial Qwen3 file kept"
hf_faults '[]'
hf_log_reset
"$DF" setup-qwen --model "$WORK/r" --qwen-repo test/qwen --qwen-revision main --endpoint "$HF_URL" \
  >"$WORK/r3.out" 2>"$WORK/r3.err" || fail "setup-qwen resume: $(tail -3 "$WORK/r3.err")"
[[ "$(cat "$WORK/r3.out")" == "$WORK/r/drafters/qwen3-0.6b-base" ]] || fail "setup-qwen should print the folder"
[[ $(hf_count "r['path'].startswith('$CDN_QW') and start(r) == 150000") -ge 1 ]] || fail "Qwen3 did not resume at byte 150000"
same_files "$QW" "$WORK/r/drafters/qwen3-0.6b-base" $QFILES
echo "ok  persistent faults, then both drafters resumed and finished"

# 4. --no-dspark: the DSpark repository is never asked.
hf_log_reset
"$DF" setup --full --repo test/model --revision main --endpoint "$HF_URL" --dir "$WORK/n" \
  --dspark-repo test/dspark --no-dspark >/dev/null 2>"$WORK/n.err" || fail "--no-dspark: $(tail -3 "$WORK/n.err")"
[[ $(hf_count "'/dspark/' in r['path']") == 0 ]] || fail "--no-dspark still asked the DSpark repository"
[[ ! -e "$WORK/n/drafters" ]] || fail "--no-dspark made a drafters folder"
echo "ok  --no-dspark"
echo "setup_drafters: ok"
