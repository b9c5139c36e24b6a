#!/usr/bin/env python3
"""Compares `deltafin logits` output with an oracle's reference logits (numpy only, no torch).

    compare_logits.py REFERENCE.safetensors MINE.safetensors [--bound 5e-4]

REFERENCE holds `logits` [T, vocab] (an oracle's reference.safetensors); MINE holds `logits` from
`deltafin logits`. Passes when max|mine - ref| / max|ref| <= bound at every position and the argmax
agrees at every position. Prints the relative error and exits 0 on pass, 1 on failure.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "I8": np.int8, "U8": np.uint8,
          "BF16": np.uint16}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        out[name] = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=dt).reshape(info["shape"])
    return out


def main(argv):
    bound = 5e-4
    args = list(argv)
    if "--bound" in args:
        i = args.index("--bound")
        bound = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ref = read_safetensors(args[0])["logits"].astype(np.float64)
    mine = read_safetensors(args[1])["logits"].astype(np.float64)
    if ref.shape != mine.shape:
        print(f"FAIL: shape {mine.shape}, expected {ref.shape}")
        return 1
    scale = np.abs(ref).max()
    per_pos = np.abs(mine - ref).max(axis=1) / scale
    rel = per_pos.max()
    argmax_bad = np.nonzero(mine.argmax(-1) != ref.argmax(-1))[0]
    print(f"max relative logit error {rel:.3e} (bound {bound:g}) at position {per_pos.argmax()}; "
          f"argmax differs at {len(argmax_bad)} of {ref.shape[0]} positions")
    if rel > bound or len(argmax_bad):
        if len(argmax_bad):
            print(f"FAIL: argmax differs at positions {argmax_bad.tolist()}")
        if rel > bound:
            print("FAIL: relative error above the bound")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
