# Safetensors reading/writing and BF16 rounding with numpy alone, for the Kimi-Linear fixture tools.
# Writes tensors in the order given (the safetensors library reorders them; the fixture wants release order).
import json
import os
import struct

import numpy as np

NP_DTYPE = {
    "BF16": np.uint16,  # raw bfloat16 bits
    "F32": np.float32,
    "F64": np.float64,
    "I32": np.int32,
    "I64": np.int64,
    "U8": np.uint8,
}


def bf16_bits(x):
    """Round to bfloat16 (nearest, ties to even) and return the uint16 bit patterns."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    assert np.all(np.isfinite(x)), "non-finite value"
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f64(bits):
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def stored_to_f64(dtype, array):
    """Exact float64 value of a stored tensor."""
    return bf16_to_f64(array) if dtype == "BF16" else np.asarray(array, dtype=np.float64)


def write_file(path, tensors, metadata=None):
    """tensors: list of (name, dtype, array already in storage dtype). Returns the payload size in bytes.
    The header is padded with spaces to a multiple of 8 bytes so that every tensor's data stays aligned."""
    header = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name, dtype, array in tensors:
        assert name not in header, name
        assert array.dtype == NP_DTYPE[dtype], (name, dtype, array.dtype)
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, _, array in tensors:
            f.write(np.ascontiguousarray(array).tobytes())
    return offset


def read_file(path):
    """Returns an ordered dict name -> (dtype, array) in file order."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        start, end = info["data_offsets"]
        dt = np.dtype(NP_DTYPE[info["dtype"]])
        array = np.frombuffer(raw, dtype=dt, count=(end - start) // dt.itemsize, offset=8 + n + start)
        out[name] = (info["dtype"], array.reshape(info["shape"]))
    return out


def read_checkpoint(folder):
    """Reads model.safetensors.index.json and its shards: dict name -> (dtype, array)."""
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        for name, value in read_file(os.path.join(folder, shard)).items():
            assert weight_map[name] == shard, (name, shard)
            tensors[name] = value
    assert set(tensors) == set(weight_map), "index and shards disagree"
    return tensors
