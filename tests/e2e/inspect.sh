#!/usr/bin/env bash
# End-to-end test of `deltafin inspect`: accepts the fixture checkpoints and refuses damaged copies of
# the K3 one (truncated shard, wrong dtype, missing tensor, broken JSON, non-contiguous expert), each
# with a non-zero exit and a message that names the problem.
#   bash tests/e2e/inspect.sh path/to/deltafin path/to/tests
set -uo pipefail
deltafin=$1
tests=$2
fixture=$tests/fixtures/k3-tiny-a
shard1=model-00001-of-000002.safetensors
shard2=model-00002-of-000002.safetensors
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_ok NAME DIR
expect_ok() {
  local out rc
  out=$("$deltafin" inspect --model "$2" 2>&1)
  rc=$?
  if [[ $rc != 0 ]]; then
    fail "$1: exit $rc, expected 0"
    echo "$out" | tail -20
  elif ! grep -q "^check        OK" <<<"$out"; then
    fail "$1: no OK line"
  else
    echo "ok: $1"
  fi
}

# expect_refused NAME DIR TEXT... : non-zero exit, and the output holds every TEXT (fixed strings).
expect_refused() {
  local name=$1 dir=$2 out rc
  shift 2
  out=$("$deltafin" inspect --model "$dir" 2>&1)
  rc=$?
  if [[ $rc == 0 ]]; then
    fail "$name: exit 0, expected a refusal"
    return
  fi
  for text in "$@"; do
    if ! grep -qF -- "$text" <<<"$out"; then
      fail "$name: output lacks '$text'"
      echo "$out" | tail -20
      return
    fi
  done
  echo "ok: $name (exit $rc)"
}

# fresh NAME: a writable copy of the fixture, printed.
fresh() {
  local dir=$work/$1
  cp -r "$fixture" "$dir"
  chmod -R u+w "$dir"
  echo "$dir"
}

# edit_header FILE PYTHON: runs PYTHON with `h` bound to the header dict, then rewrites the header
# (data section unchanged).
edit_header() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, code = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
exec(code)
text = json.dumps(h).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
}

# edit_json FILE PYTHON: runs PYTHON with `j` bound to the parsed file, then writes it back.
edit_json() {
  python3 - "$1" "$2" <<'PY'
import json, sys
path, code = sys.argv[1], sys.argv[2]
j = json.load(open(path))
exec(code)
json.dump(j, open(path, "w"), indent=1)
PY
}

expect_ok "k3-tiny-a" "$fixture"
[[ -d $tests/fixtures/kimi-linear-tiny ]] && expect_ok "kimi-linear-tiny" "$tests/fixtures/kimi-linear-tiny"

d=$(fresh truncated)
python3 -c "import os,sys; p=sys.argv[1]; os.truncate(p, os.path.getsize(p) - 100)" "$d/$shard2"
expect_refused "truncated shard" "$d" "$shard2" "tensor language_model.model.output_attn_res_proj.weight" \
  "run past the end of the data section"

d=$(fresh truncated_header)
python3 -c "import os,sys; os.truncate(sys.argv[1], 4096)" "$d/$shard1"
expect_refused "shard truncated inside its header" "$d" "$shard1" "runs past the end of the file"

d=$(fresh wrong_dtype)
edit_header "$d/$shard1" 'h["language_model.model.layers.0.mlp.up_proj.weight"]["dtype"] = "F16"'
expect_refused "wrong dtype" "$d" "$shard1" \
  "tensor language_model.model.layers.0.mlp.up_proj.weight has dtype F16, expected BF16"

d=$(fresh wrong_shape)
edit_header "$d/$shard1" 'h["language_model.model.layers.0.self_attn.q_proj.weight"]["shape"] = [32, 128]'
expect_refused "wrong shape" "$d" "q_proj.weight has shape [32, 128], expected [64, 64]"

d=$(fresh size_mismatch)
edit_header "$d/$shard1" 'h["language_model.model.layers.0.mlp.up_proj.weight"]["dtype"] = "F32"'
expect_refused "dtype that disagrees with the byte count" "$d" "$shard1" \
  "tensor language_model.model.layers.0.mlp.up_proj.weight: F32 [128, 64] needs"

t=language_model.model.layers.2.self_attn.o_norm.weight
d=$(fresh missing_tensor)
edit_header "$d/$shard1" "h['${t}_renamed'] = h.pop('$t')"
edit_json "$d/model.safetensors.index.json" "j['weight_map']['${t}_renamed'] = j['weight_map'].pop('$t')"
expect_refused "missing tensor" "$d" "missing tensor $t (expected F32 or BF16 [16])"

d=$(fresh unlisted_tensor)
edit_json "$d/model.safetensors.index.json" "del j['weight_map']['$t']"
expect_refused "tensor missing from the index" "$d" "holds tensor $t, which model.safetensors.index.json does not list"

d=$(fresh missing_shard)
rm "$d/$shard2"
expect_refused "missing shard" "$d" "names shard $shard2, which does not exist"

d=$(fresh broken_header_json)
python3 - "$d/$shard1" <<'PY'
import struct, sys
p = sys.argv[1]
data = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
end = data.rindex(b"}", 8, 8 + n)
data[end] = ord(" ")  # the header object never closes
open(p, "wb").write(data)
PY
expect_refused "broken header JSON" "$d" "$shard1" "invalid JSON"

d=$(fresh broken_config_json)
head -c 300 "$fixture/config.json" >"$d/config.json"
expect_refused "broken config.json" "$d" "config.json: invalid JSON"

d=$(fresh config_field)
edit_json "$d/config.json" 'del j["text_config"]["hidden_size"]'
expect_refused "config missing a field" "$d" "config.json: field text_config.hidden_size: missing"

d=$(fresh config_quant)
edit_json "$d/config.json" 'j["text_config"]["quantization_config"]["quant_method"] = "gptq"'
expect_refused "unsupported quantization" "$d" \
  'field text_config.quantization_config.quant_method: expected "compressed-tensors", got "gptq"'

d=$(fresh broken_index_json)
head -c 1000 "$fixture/model.safetensors.index.json" >"$d/model.safetensors.index.json"
expect_refused "broken index JSON" "$d" "model.safetensors.index.json: invalid JSON"

d=$(fresh non_contiguous)
p=language_model.model.layers.1.block_sparse_moe.experts.3.
edit_header "$d/$shard1" "h['${p}w1.weight_packed']['data_offsets'], h['${p}w2.weight_packed']['data_offsets'] = h['${p}w2.weight_packed']['data_offsets'], h['${p}w1.weight_packed']['data_offsets']"
expect_refused "non-contiguous expert" "$d" "layer 1 expert 3" "${p}w1.weight_scale starts at byte" "back to back"

d=$(fresh overlap)
edit_header "$d/$shard1" "h['${p}w1.weight_scale']['data_offsets'] = h['${p}w1.weight_packed']['data_offsets'][:1] + [h['${p}w1.weight_packed']['data_offsets'][0] + 32]"
expect_refused "overlapping ranges" "$d" "$shard1" "overlap"

# --values reads every floating-point tensor and names each that holds NaN or Inf, with counts and
# the first element; the report is bounded by --max-problems; without --values only headers are
# read (issue #22).
out=$("$deltafin" inspect --model "$fixture" --values 2>&1) && grep -q "^values .*: 0 hold NaN or Inf" <<<"$out" &&
  echo "ok: --values on a clean checkpoint" || fail "--values on the fixture: $(tail -5 <<<"$out")"
d=$(fresh bad_values)
python3 - "$d/$shard1" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
def at(name, element, width):
    return 8 + n + h[name]["data_offsets"][0] + element * width
# BF16: a NaN at element 5 and an Inf at 9; F32 norm: +Inf at element 0; a third BF16 tensor: -Inf.
bf16 = [k for k, v in h.items() if k != "__metadata__" and v["dtype"] == "BF16"]
f32 = [k for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F32"]
data[at(bf16[0], 5, 2):at(bf16[0], 5, 2) + 2] = struct.pack("<H", 0x7fc1)
data[at(bf16[0], 9, 2):at(bf16[0], 9, 2) + 2] = struct.pack("<H", 0x7f80)
data[at(f32[0], 0, 4):at(f32[0], 0, 4) + 4] = struct.pack("<I", 0x7f800000)
data[at(bf16[1], 3, 2):at(bf16[1], 3, 2) + 2] = struct.pack("<H", 0xff80)
open(path, "wb").write(data)
print(bf16[0], f32[0], bf16[1], file=open(path + ".names", "w"))
PY
read -r bad_bf16 bad_f32 bad_bf16b <"$d/$shard1.names"
rm "$d/$shard1.names"
expect_ok "bad values without --values (headers only)" "$d"
out=$("$deltafin" inspect --model "$d" --values 2>&1) && fail "--values accepted NaN/Inf weights"
grep -qF "tensor $bad_bf16 (BF16) holds 1 NaN and 1 Inf values, the first at element 5" <<<"$out" &&
  grep -qF "tensor $bad_f32 (F32) holds 0 NaN and 1 Inf values, the first at element 0" <<<"$out" &&
  grep -qF "tensor $bad_bf16b (BF16) holds 0 NaN and 1 Inf values, the first at element 3" <<<"$out" &&
  grep -q "^values .*: 3 hold NaN or Inf" <<<"$out" && echo "ok: --values names each bad tensor" ||
  fail "--values report: $(grep -E 'values|NaN' <<<"$out")"
out=$("$deltafin" inspect --model "$d" --values --max-problems 2 2>&1)
[[ $(grep -c "NaN and" <<<"$out") == 2 ]] && grep -q "and 1 more (--max-problems" <<<"$out" &&
  echo "ok: --values output is bounded" || fail "--values --max-problems 2: $(tail -5 <<<"$out")"

expect_refused "no such folder" "$work/absent" "not a directory"
out=$("$deltafin" inspect 2>&1)
[[ $? != 0 ]] && grep -qF "missing required option --model" <<<"$out" && echo "ok: no --model" || fail "no --model: $out"

if [[ $failures != 0 ]]; then
  echo "inspect.sh: $failures failure(s)"
  exit 1
fi
echo "inspect.sh: all passed"
