#!/usr/bin/env bash
# `deltafin inspect` on a checkpoint with the full Kimi K3 layout (kimi-k3.md §1-2): 96 shards,
# 497,220 tensors (vision included), 82,432 MXFP4 experts, the published config. The shards are
# sparse files (1.56 TB apparent, a few MB on disk): only headers are ever read. Proves the roster
# matches K3's real inventory and prints how long the headers, the index and the check take.
#   bash tests/e2e/inspect_k3_scale.sh path/to/deltafin path/to/tests
set -uo pipefail
deltafin=$1
tests=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$work" "$tests/fixtures/k3-tiny-a/config.json" <<'PY'
import json, os, struct, sys
out, tiny_config = sys.argv[1], sys.argv[2]

# The shards need sparse files (1.56 TB apparent size); without them there is nothing to test here.
probe = os.path.join(out, "probe")
with open(probe, "wb") as f:
    f.truncate(1 << 30)
if os.stat(probe).st_blocks * 512 > (1 << 20):
    sys.exit(3)
os.remove(probe)

# The published text_config on the oracle's field set.
config = json.load(open(tiny_config))
t = config["text_config"]
t.update(hidden_size=7168, vocab_size=163840, num_hidden_layers=93, num_attention_heads=96,
         num_key_value_heads=96, intermediate_size=33792, moe_intermediate_size=3072,
         routed_expert_hidden_size=3584, num_experts=896, num_experts_per_token=16, q_lora_rank=1536,
         kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
         attn_res_block_size=12, bos_token_id=163584, eos_token_id=163586, pad_token_id=163839)
full = [l for l in range(1, 94) if l % 4 == 0 or l == 93]
t["linear_attn_config"].update(num_heads=96, head_dim=128, full_attn_layers=full,
                               kda_layers=[l for l in range(1, 94) if l not in full])
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)

d, V, H, D = 7168, 163840, 96, 128
P = H * D
SIZE = {"BF16": 2, "F32": 4, "U8": 1}
shards = {}  # shard number -> {name: (dtype, shape)}
def add(shard, name, dtype, shape):
    shards.setdefault(shard, {})["language_model." + name] = (dtype, shape)

add(1, "model.embed_tokens.weight", "BF16", [V, d])
for name, shape in [("model.norm.weight", [d]), ("model.output_attn_res_norm.weight", [d]),
                    ("model.output_attn_res_proj.weight", [1, d]), ("lm_head.weight", [V, d])]:
    add(94, name, "BF16", shape)
for l in range(93):
    s, p = l + 1, f"model.layers.{l}."
    for n in ["input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"]:
        add(s, p + n + ".weight", "BF16", [d])
    for n in ["self_attention_res_proj", "mlp_res_proj"]:
        add(s, p + n + ".weight", "BF16", [1, d])
    a = p + "self_attn."
    if (l + 1) in full:
        for n, shape in [("q_a_proj", [1536, d]), ("q_a_layernorm", [1536]), ("q_b_proj", [18432, 1536]),
                         ("kv_a_proj_with_mqa", [576, d]), ("kv_a_layernorm", [512]),
                         ("kv_b_proj", [24576, 512]), ("g_proj", [P, d]), ("o_proj", [d, P])]:
            add(s, a + n + ".weight", "BF16", shape)
    else:
        for n, shape in [("q_proj", [P, d]), ("k_proj", [P, d]), ("v_proj", [P, d]), ("g_proj", [P, d]),
                         ("f_a_proj", [D, d]), ("f_b_proj", [P, D]), ("b_proj", [H, d]), ("o_proj", [d, P])]:
            add(s, a + n + ".weight", "BF16", shape)
        for n in ["q_conv1d", "k_conv1d", "v_conv1d"]:
            add(s, a + n + ".weight", "F32", [P, 1, 4])
        add(s, a + "A_log", "F32", [128])
        add(s, a + "dt_bias", "F32", [P])
        add(s, a + "o_norm.weight", "F32", [D])
    if l == 0:
        for n, shape in [("gate_proj", [33792, d]), ("up_proj", [33792, d]), ("down_proj", [d, 33792])]:
            add(s, p + "mlp." + n + ".weight", "BF16", shape)
        continue
    m = p + "block_sparse_moe."
    add(s, m + "gate.weight", "BF16", [896, d])
    add(s, m + "gate.e_score_correction_bias", "F32", [896])
    for n, shape in [("routed_expert_down_proj", [3584, d]), ("routed_expert_up_proj", [d, 3584]),
                     ("routed_expert_norm", [3584]), ("shared_experts.gate_proj", [6144, d]),
                     ("shared_experts.up_proj", [6144, d]), ("shared_experts.down_proj", [d, 6144])]:
        add(s, m + n + ".weight", "BF16", shape)
    for e in range(896):
        x = f"{m}experts.{e}."
        for w, rows, cols in [("w1", 3072, 3584), ("w2", 3584, 3072), ("w3", 3072, 3584)]:
            add(s, x + w + ".weight_packed", "U8", [rows, cols // 2])
            add(s, x + w + ".weight_scale", "U8", [rows, cols // 32])
# The vision tower and projector (168 tensors K3 ships; deltafin does not read them).
for i in range(165):
    shards.setdefault(95 + i % 2, {})[f"vision_tower.blocks.{i}.weight"] = ("BF16", [1152])
for i in range(3):
    shards.setdefault(96, {})[f"mm_projector.{i}.weight"] = ("BF16", [1024])

weight_map = {}
for s, tensors in shards.items():
    fname = f"model-{s:05d}-of-000096.safetensors"
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(tensors):  # lexicographic, as in the release
        dtype, shape = tensors[name]
        n = SIZE[dtype]
        for x in shape:
            n *= x
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
        weight_map[name] = fname
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out, fname), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + offset)  # sparse: the data is never read
total = sum(SIZE[dt] * __import__("math").prod(sh) for t in shards.values() for dt, sh in t.values())
json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
print(f"generated {len(weight_map)} tensors in {len(shards)} shards, {total} bytes")
PY
status=$?
if [[ $status == 3 ]]; then
  echo "SKIP: $work does not support sparse files"
  exit 0
elif [[ $status != 0 ]]; then
  echo "FAIL: generator"
  exit 1
fi

out=$("$deltafin" inspect --model "$work" 2>&1)
rc=$?
echo "$out" | grep -vE "^ +[0-9]+  (KDA|MLA) " # the per-layer table is long
failures=0
check() {
  grep -qF -- "$1" <<<"$out" || { echo "FAIL: output lacks '$1'"; failures=$((failures + 1)); }
}
[[ $rc == 0 ]] || { echo "FAIL: exit $rc"; failures=$((failures + 1)); }
check "shards       96 files, 497,220 tensors"
check "layers       93: 69 KDA + 24 MLA attention; 1 dense MLP + 92 MoE"
check "  MLA        3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63, 67, 71, 75, 79, 83, 87, 91-92"
check "82432 routed in all"
check "expert span  17,547,264 B"
check "routed experts 1,446,456,066,048 B"
check "unused       168 tensors"
check "expert spans 82432 found whole and contiguous"
check "check        OK"
[[ $failures == 0 ]] && echo "inspect_k3_scale.sh: all passed" || exit 1
