# End-to-end checks of `deltafin synth`: determinism per seed, the release layout checked by an
# independent reader (tools/synth_check.py, numpy), a float64 forward pass on the demo model, the
# engine's own inspect / tokenize / logits on it, and a K3-sized expert layout.
# Usage: bash tests/e2e/synth.sh path/to/deltafin path/to/repo/tests
set -euo pipefail
DF="$1"
REPO="$(cd "$2/.." && pwd)"
PY=/usr/bin/python3
CHECK="$REPO/tools/synth_check.py"
TMP="$(mktemp -d /tmp/deltafin_synth_e2e.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT

fail() { echo "synth.sh: FAILED: $*" >&2; exit 1; }
has_command() { "$DF" --help 2>&1 | grep -qE "^  $1 "; }
hashes() { (cd "$1" && find . -type f -print0 | xargs -0 sha256sum | sort -k2); }

# Same seed, byte-identical folders; another seed, other weights.
"$DF" synth --out "$TMP/a" --preset demo --seed 11 > "$TMP/a.json"
"$DF" synth --out "$TMP/b" --preset demo --seed 11 > /dev/null
"$DF" synth --out "$TMP/c" --preset demo --seed 12 > /dev/null
[ "$(hashes "$TMP/a")" = "$(hashes "$TMP/b")" ] || fail "same seed gave different files"
cmp -s "$TMP/a/model-00001-of-000004.safetensors" "$TMP/c/model-00001-of-000004.safetensors" \
  && fail "different seeds gave identical shards"
cmp -s "$TMP/a/config.json" "$TMP/c/config.json" || fail "config.json depends on the seed"

# The demo's drafters: DSpark's embedding is the model's own, bit for bit; Qwen3 ties its lm_head.
[ -f "$TMP/a/drafters/dspark/model.safetensors" ] && [ -f "$TMP/a/drafters/qwen3-0.6b-base/tokenizer.json" ] \
  || fail "synth wrote no drafters"
$PY - "$TMP/a" <<'EOF' || fail "drafter layout"
import json, struct, sys
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}, h
d = sys.argv[1]
k3, _ = load(d + "/model-00001-of-000004.safetensors")
ds, dh = load(d + "/drafters/dspark/model.safetensors")
qw, qh = load(d + "/drafters/qwen3-0.6b-base/model.safetensors")
assert ds["embed_tokens.weight"] == k3["language_model.model.embed_tokens.weight"]
assert len(ds) == 68 and dh["__metadata__"] == {"torchspec_version": "0.1.0"}
assert not any("lm_head" in k for k in list(ds) + list(qw)) and "model.norm.weight" in qw
c = json.load(open(d + "/drafters/dspark/config.json"))
assert c["target_hidden_size"] == 256 and c["vocab_size"] == 1024 and c["target_layer_ids"] == [1, 3, 4, 7, 11]
t = json.load(open(d + "/drafters/qwen3-0.6b-base/tokenizer.json"))
assert t["model"]["type"] == "BPE" and t["added_tokens"][0]["content"] == "<|endoftext|>"
EOF

# Independent layout check plus a float64 forward (activations sane, greedy output varied).
$PY "$CHECK" "$TMP/a" --forward > "$TMP/a.check" || fail "synth_check on the demo model"

# The engine's tools on the demo model, where they exist.
if has_command inspect; then
  "$DF" inspect --model "$TMP/a" > "$TMP/inspect.txt" 2>&1 || {
    cat "$TMP/inspect.txt" >&2
    fail "deltafin inspect rejected the demo model"
  }
fi
if has_command tokenize; then
  printf 'The harbor town woke slowly, and the boats came in.' > "$TMP/text.txt"
  got="$("$DF" tokenize --vocab "$TMP/a/tiktoken.model" --pattern kimi --input "$TMP/text.txt")"
  want="$(cd "$REPO/tools" && $PY -c "
import sys, synth_check as s
ranks = s.check_tokenizer(sys.argv[1], __import__('json').load(open(sys.argv[1] + '/config.json')))
print(s.encode(ranks, open(sys.argv[2]).read()))" "$TMP/a" "$TMP/text.txt")"
  [ "$(echo "$got" | tr -d ' ')" = "$(echo "$want" | tr -d ' ')" ] \
    || fail "engine tokenizer $got != reference $want"
  printf 'a <|open|> b' > "$TMP/markup.txt"
  got="$("$DF" tokenize --vocab "$TMP/a/tiktoken.model" --pattern kimi --input "$TMP/markup.txt" \
    --special-config "$TMP/a/tokenizer_config.json" --markup | tr -d ' ')"
  case "$got" in *",771,"*) ;; *) fail "<|open|> is not id 768+3 in $got" ;; esac
fi
if has_command logits; then
  "$DF" logits --model "$TMP/a" --ids 315,497,617,453 --out "$TMP/logits.safetensors" 2> "$TMP/logits.err" || {
    cat "$TMP/logits.err" >&2
    fail "deltafin logits on the demo model"
  }
  $PY - "$TMP/logits.safetensors" <<'EOF' || fail "demo logits are not finite and varied"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
e = json.loads(raw[8:8 + n])["logits"]
a = np.frombuffer(raw, np.float32, offset=8 + n + e["data_offsets"][0], count=int(np.prod(e["shape"])))
a = a.reshape(e["shape"])
assert a.shape == (4, 1024) and np.isfinite(a).all() and a.std() > 0.1, (a.shape, a.std())
EOF
fi

# Bad options are user errors (exit 1 with a message), not crashes.
for bad in "--preset huge" "--preset demo --experts 0" "--preset k3-scale --layers 0" "--preset demo --layers x"; do
  set +e
  # shellcheck disable=SC2086
  "$DF" synth --out "$TMP/bad" $bad > /dev/null 2> "$TMP/bad.err"
  rc=$?
  set -e
  [ "$rc" = 1 ] && grep -q "error" "$TMP/bad.err" || fail "synth $bad: exit $rc, $(cat "$TMP/bad.err")"
done

# K3's real sizes with 4 experts: the release's expert record (17,547,264 bytes, six tensors back
# to back) and one contiguous run per layer; ~8 GB, mostly the 163,840-row embedding and lm_head.
# (--no-drafters: K3-scale drafters are the published 7.1 GB DSpark and 1.2 GB Qwen3-0.6B, whose
# sizes src/synth/drafters_test.cc checks without writing them.)
"$DF" synth --out "$TMP/k3" --preset k3-scale --layers 2 --experts 4 --no-drafters > "$TMP/k3.json"
[ ! -e "$TMP/k3/drafters" ] || fail "--no-drafters wrote drafters"
$PY "$CHECK" "$TMP/k3" > "$TMP/k3.check" || fail "synth_check on k3-scale"
$PY - "$TMP/k3.check" "$TMP/k3/config.json" <<'EOF' || fail "k3-scale sizes"
import json, sys
c = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))["text_config"]
assert c["expert_bytes"] == 17547264 and c["expert_bytes"] == 4284 * 4096, c
assert c["expert_runs"] == 1 and c["shards"] == 2, c
assert (t["hidden_size"], t["vocab_size"], t["num_experts"], t["num_experts_per_token"]) == (7168, 163840, 4, 4), t
assert t["linear_attn_config"]["full_attn_layers"] == [2] and t["linear_attn_config"]["kda_layers"] == [1], t
EOF
rm -rf "$TMP/k3"
echo "synth.sh: ok"
