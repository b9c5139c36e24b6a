#!/usr/bin/env python3
# Dumps what the installed transformers' native kimi_linear is: versions, module sources, the model's own
# parameter names/shapes for the fixture's config, and the names save_pretrained writes. Usage:
#   python3 tools/kimi_linear_ref/inspect_hf.py FIXTURE_DIR OUT_DIR
import importlib.util
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers


def main(fixture, out):
    os.makedirs(os.path.join(out, "src"), exist_ok=True)
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0]}
    for mod in ("fla", "kernels", "causal_conv1d", "numpy", "safetensors"):
        spec = importlib.util.find_spec(mod)
        info["has_" + mod] = spec is not None
    import numpy
    info["numpy"] = numpy.__version__
    tdir = os.path.dirname(transformers.__file__)
    for rel in ("models/kimi_linear", "conversion_mapping.py", "core_model_loading.py", "integrations/moe.py",
                "integrations/hub_kernels.py", "masking_utils.py"):
        src = os.path.join(tdir, rel)
        if os.path.isdir(src):
            for f in os.listdir(src):
                if f.endswith(".py"):
                    shutil.copy(os.path.join(src, f), os.path.join(out, "src", f))
        elif os.path.exists(src):
            shutil.copy(src, os.path.join(out, "src", os.path.basename(src)))
        else:
            info["missing_" + rel] = True
    from transformers.models.kimi_linear import configuration_kimi_linear as cfgmod
    from transformers.models.kimi_linear import modeling_kimi_linear as modmod

    cfg = cfgmod.KimiLinearConfig.from_pretrained(fixture)
    info["config"] = cfg.to_dict()
    for attr in ("layer_types", "mlp_layer_types", "_attn_implementation", "_experts_implementation"):
        info["config_attr_" + attr] = str(getattr(cfg, attr, "<absent>"))
    cfg._attn_implementation = "eager"
    model = modmod.KimiLinearForCausalLM(cfg).to(torch.float64)
    with open(os.path.join(out, "state_dict.txt"), "w") as f:
        for k, v in model.state_dict().items():
            f.write(f"{k}\t{list(v.shape)}\t{v.dtype}\n")
    with open(os.path.join(out, "module_tree.txt"), "w") as f:
        f.write(repr(model))
    tmp = tempfile.mkdtemp()
    try:
        model.save_pretrained(tmp)
        from safetensors import safe_open
        with open(os.path.join(out, "saved_keys.txt"), "w") as f:
            for fn in sorted(os.listdir(tmp)):
                if fn.endswith(".safetensors"):
                    with safe_open(os.path.join(tmp, fn), "pt") as st:
                        for k in st.keys():
                            f.write(f"{fn}\t{k}\t{list(st.get_slice(k).get_shape())}\t{st.get_slice(k).get_dtype()}\n")
                else:
                    f.write(f"file {fn}\n")
    except Exception as e:  # noqa: BLE001 - report, don't stop the inspection
        info["save_pretrained_error"] = repr(e)
    with open(os.path.join(out, "inspect.json"), "w") as f:
        json.dump(info, f, indent=1, default=str)
    print(json.dumps({k: v for k, v in info.items() if k != "config"}, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
