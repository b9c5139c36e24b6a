# Float64 reference outputs for the Kimi-Linear fixture from Hugging Face transformers' NATIVE kimi_linear
# (no trust_remote_code), run on the CPU. Release tensor names are mapped to transformers' internal names here,
# never in the engine. Writes reference.safetensors next to the checkpoint and a JSON report.
import importlib.util
import itertools
import json
import os
import sys
import tempfile

import numpy as np
import torch
import transformers

import st_io
from np_forward import KimiLinearNp

N_GENERATE = 16

# transformers-internal fragment -> release fragment (both orders tried; only renames seen in some versions)
RENAMES = [
    (".self_attn.forget_gate.", ".self_attn."),
    (".mlp.gate.", ".block_sparse_moe.gate."),
    (".mlp.shared_experts.", ".block_sparse_moe.shared_experts."),
    (".mlp.experts.", ".block_sparse_moe.experts."),
    ("forget_gate_down", "f_a_proj"),
    ("forget_gate_up", "f_b_proj"),
    ("beta_proj", "b_proj"),
    ("output_gate_down", "g_a_proj"),
    ("output_gate_up", "g_b_proj"),
]


def release_candidates(key):
    """Release names a transformers key may come from: every subset of RENAMES applied."""
    rules = [r for r in RENAMES if r[0] in key]
    for n in range(len(rules) + 1):
        for subset in itertools.combinations(rules, n):
            k = key
            for a, b in subset:
                k = k.replace(a, b)
            yield k


def map_to_transformers(src, target):
    """src: release name -> float64 tensor; target: transformers state_dict (shapes to fill).
    Returns (state_dict, mapping notes). Fails on any target left unfilled or source left unused."""
    out, used, notes = {}, set(), {}

    def find(key):
        for c in release_candidates(key):
            if c in src:
                return c
        return None

    for key, ref in target.items():
        shape = tuple(ref.shape)
        name = find(key)
        if name is not None:
            val = src[name]
            used.add(name)
            how = name
        elif key.endswith("experts.gate_up_proj") or key.endswith("experts.down_proj"):
            base = find(key.rsplit(".", 1)[0] + ".0.w1.weight")
            base = base[: -len("0.w1.weight")]
            n_exp = shape[0]
            if key.endswith("gate_up_proj"):  # rows: w1 (gate) then w3 (up), as `.chunk(2)` splits them
                parts = [torch.cat([src[f"{base}{j}.w1.weight"], src[f"{base}{j}.w3.weight"]], 0) for j in range(n_exp)]
                used.update(f"{base}{j}.{w}.weight" for j in range(n_exp) for w in ("w1", "w3"))
                how = f"stack_j cat({base}{{j}}.w1.weight, {base}{{j}}.w3.weight)"
            else:
                parts = [src[f"{base}{j}.w2.weight"] for j in range(n_exp)]
                used.update(f"{base}{j}.w2.weight" for j in range(n_exp))
                how = f"stack_j {base}{{j}}.w2.weight"
            val = torch.stack(parts, 0)  # [E, out, in]: the layout F.linear(x, W[e]) wants
        elif key.endswith("self_attn.conv1d.weight"):  # packed depthwise conv over [q; k; v] channels
            base = key[: -len("conv1d.weight")]
            names = [f"{base}{c}_conv1d.weight" for c in "qkv"]
            val = torch.cat([src[n] for n in names], 0)
            used.update(names)
            how = "cat(q_conv1d, k_conv1d, v_conv1d)"
        else:
            raise KeyError(f"no release tensor for transformers key {key} {shape}")
        if tuple(val.shape) != shape:
            if val.numel() != ref.numel():
                raise ValueError(f"{key}: release {how} has shape {list(val.shape)}, model wants {list(shape)}")
            how += f" reshaped {list(val.shape)}->{list(shape)}"
            val = val.reshape(shape)
        out[key] = val.to(torch.float64).contiguous()
        if how != key:
            notes[key] = how
    unused = sorted(set(src) - used)
    if unused:
        raise ValueError(f"release tensors not used: {unused[:10]} ({len(unused)})")
    return out, notes


def load_f64_module():
    """transformers' modeling_kimi_linear with its float32 islands promoted to float64 (textual, counted), so the
    reference is float64 end to end. The unpatched module is run too and its distance reported."""
    from transformers.models.kimi_linear import modeling_kimi_linear as native

    with open(native.__file__) as f:
        text = f.read()
    counts = {"torch.float32": text.count("torch.float32"), ".float()": text.count(".float()")}
    text = text.replace("torch.float32", "torch.float64").replace(".float()", ".double()")
    path = os.path.join(tempfile.mkdtemp(), "modeling_kimi_linear_f64.py")
    with open(path, "w") as f:
        f.write(text)
    name = "transformers.models.kimi_linear.modeling_kimi_linear_f64"
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "transformers.models.kimi_linear"
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return native, mod, counts


def build(module, cfg, state):
    model = module.KimiLinearForCausalLM(cfg).to(torch.float64).eval()
    model.load_state_dict(state, strict=True)
    return model


def kda_call_log(module):
    """Wraps the module-level KDA/conv functions the KDA layer calls; records (function, seq_len, dtype)."""
    log = []
    for name in ("chunk_kimi_delta_attention", "recurrent_kimi_delta_attention", "causal_conv1d_fn",
                 "causal_conv1d_update"):
        fn = getattr(module, name, None)
        if fn is None:
            log.append((name, "absent"))
            continue

        def wrapped(x, *a, _fn=fn, _name=name, **kw):
            # KDA kernels take [B, T, H, D]; the conv functions take [B, C, T]
            t = x.shape[1] if "delta" in _name else x.shape[-1]
            log.append((_name, int(t), str(x.dtype)))
            return _fn(x, *a, **kw)

        setattr(module, name, wrapped)
    return log


@torch.no_grad()
def logits_of(model, ids):
    return model(torch.tensor([ids]), use_cache=False).logits[0].double()


@torch.no_grad()
def greedy_with_cache(model, prompt, n):
    """Prefill with the model's cache, then one token per step; returns ids and the logits that chose them."""
    out = model(torch.tensor([prompt]), use_cache=True)
    greedy_with_cache.cache_class = type(out.past_key_values).__name__
    ids, rows = [], []
    for step in range(n):
        row = out.logits[0, -1].double()
        rows.append(row)
        ids.append(int(row.argmax()))
        if step + 1 < n:
            out = model(torch.tensor([[ids[-1]]]), past_key_values=out.past_key_values, use_cache=True)
    return ids, torch.stack(rows)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def main(fixture, report_dir=None):
    report_dir = report_dir or fixture
    os.makedirs(report_dir, exist_ok=True)
    torch.manual_seed(0)
    rep = {"torch": torch.__version__, "transformers": transformers.__version__, "numpy": np.__version__,
           "has_fla": importlib.util.find_spec("fla") is not None,
           "has_kernels": importlib.util.find_spec("kernels") is not None}
    with open(os.path.join(fixture, "case_spec.json")) as f:
        spec = json.load(f)
    prompt = spec["prompt_ids"]
    with open(os.path.join(fixture, "config.json")) as f:
        cfg_json = json.load(f)
    raw = st_io.read_checkpoint(fixture)
    src = {k: torch.from_numpy(st_io.stored_to_f64(dt, a)) for k, (dt, a) in raw.items()}

    from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig

    cfg = KimiLinearConfig.from_pretrained(fixture)
    cfg._attn_implementation = "eager"
    if hasattr(cfg, "_experts_implementation"):
        try:
            cfg._experts_implementation = "eager"
        except Exception as e:  # noqa: BLE001
            rep["experts_impl_error"] = repr(e)
    rep["config_layer_types"] = getattr(cfg, "layer_types", None)
    rep["config_mlp_layer_types"] = getattr(cfg, "mlp_layer_types", None)

    native, f64, counts = load_f64_module()
    rep["f64_patch_replacements"] = counts
    target = native.KimiLinearForCausalLM(cfg).state_dict()
    state, notes = map_to_transformers(src, target)
    rep["name_mapping_nontrivial"] = notes
    model = build(f64, cfg, state)
    model_native = build(native, cfg, state)

    # module facts
    facts = {}
    for i, layer in enumerate(model.model.layers):
        a = layer.self_attn
        for nm in ("o_norm", "kv_a_layernorm"):
            sub = getattr(a, nm, None)
            if sub is not None:
                facts[f"layer{i}.{nm}"] = {k: str(getattr(sub, k)) for k in ("variance_epsilon", "eps", "activation")
                                           if hasattr(sub, k)}
        facts[f"layer{i}.attn_class"] = type(a).__name__
        facts[f"layer{i}.mlp_class"] = type(getattr(layer, "mlp", getattr(layer, "block_sparse_moe", None))).__name__
    rep["module_facts"] = facts

    log = kda_call_log(f64)
    ref_logits = logits_of(model, prompt)
    rep["kda_calls_full_forward"] = sorted(set(log))
    log.clear()
    greedy, greedy_logits = greedy_with_cache(model, prompt, N_GENERATE)
    rep["kda_calls_cached_decode"] = sorted(set(log))
    rep["cache_class"] = greedy_with_cache.cache_class
    full = logits_of(model, prompt + greedy[:-1])
    rep["greedy_ids"] = greedy
    rep["cached_vs_full_rel"] = rel(greedy_logits, full[len(prompt) - 1:])
    rep["prefix_vs_full_rel"] = rel(ref_logits, full[: len(prompt)])
    rep["greedy_argmax_of_full_forward_matches"] = bool(
        (full[len(prompt) - 1:].argmax(-1).tolist() == greedy))
    top2 = torch.sort(full, -1).values[:, -2:]
    rep["min_argmax_gap"] = float((top2[:, 1] - top2[:, 0]).min())
    rep["max_abs_logit"] = float(ref_logits.abs().max())

    try:  # transformers' own generate loop (greedy, no EOS stop)
        g = model.generate(torch.tensor([prompt]), max_new_tokens=N_GENERATE, min_new_tokens=N_GENERATE,
                           do_sample=False, output_logits=True, return_dict_in_generate=True)
        gen_ids = g.sequences[0, len(prompt):].tolist()
        rep["generate_ids_match"] = gen_ids == greedy
        gen_logits = torch.stack([x[0].double() for x in g.logits])  # generate hands back float32 logits
        rep["generate_logits_vs_manual_rel_generate_returns_f32"] = rel(gen_logits, greedy_logits)
    except Exception as e:  # noqa: BLE001
        rep["generate_error"] = repr(e)[:500]

    nat = logits_of(model_native, prompt)
    rep["native_unpatched_f64_vs_patched_rel"] = rel(nat, ref_logits)
    # what a plain float32 run of the same code gives (scale for an fp32 engine's error)
    model32 = native.KimiLinearForCausalLM(cfg).to(torch.float32).eval()
    model32.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    rep["native_f32_vs_reference_rel"] = rel(logits_of(model32, prompt), ref_logits)
    ids32, rows32 = greedy_with_cache(model32, prompt, N_GENERATE)
    rep["native_f32_greedy_ids_match"] = ids32 == greedy
    rep["native_f32_greedy_logits_vs_reference_rel"] = rel(rows32, greedy_logits)

    # transformers' own loader on the release-layout folder (its conversion mapping, if any)
    try:
        auto, info = native.KimiLinearForCausalLM.from_pretrained(
            fixture, dtype=torch.float64, attn_implementation="eager", output_loading_info=True)
        rep["from_pretrained_loading_info"] = {k: sorted(map(str, v))[:20] for k, v in info.items()}
        sd = auto.state_dict()
        diffs = {k: float((sd[k].double() - v).abs().max()) for k, v in state.items() if k in sd}
        rep["from_pretrained_max_param_diff"] = max(diffs.values()) if diffs else None
        rep["from_pretrained_params_differing"] = sorted(k for k, d in diffs.items() if d > 0)[:20]
    except Exception as e:  # noqa: BLE001
        rep["from_pretrained_error"] = repr(e)[:800]

    # independent numpy float64 forward, and its variants that isolate the known semantic switches
    w = {k: v.numpy() for k, v in src.items()}
    npm = KimiLinearNp(cfg_json, w)
    rep["numpy_vs_hf_rel"] = rel(npm.forward(prompt)[0], ref_logits)
    rep["numpy_biased_router_weights_vs_hf_rel"] = rel(npm.forward(prompt, biased_weights=True)[0], ref_logits)
    rep["numpy_kv_a_eps_1e-5_vs_hf_rel"] = rel(npm.forward(prompt, latent_eps=1e-5)[0], ref_logits)
    margins = npm.forward(prompt + greedy[:-1])[1]
    rep["min_router_margin"] = float(margins.min())

    tensors = [
        ("prompt_ids", "I32", np.array(prompt, np.int32)),
        ("logits", "F32", ref_logits.numpy().astype(np.float32)),
        ("greedy_ids", "I32", np.array(greedy, np.int32)),
        ("greedy_logits", "F32", greedy_logits.numpy().astype(np.float32)),
    ]
    st_io.write_file(os.path.join(report_dir, "reference.safetensors"), tensors)
    with open(os.path.join(report_dir, "reference_report.json"), "w") as f:
        json.dump(rep, f, indent=1, default=str)
    print(json.dumps(rep, indent=1, default=str))
