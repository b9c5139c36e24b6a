#!/usr/bin/env bash
# tools/peers/k3_to_gguf.py, the GGUF export the llama.cpp comparison runs on, must carry every
# value bit for bit: test_k3_to_gguf.py converts the K3 and Kimi-Linear fixtures and reads each GGUF
# back with its own reader (MXFP4 codes and scales, BF16 bits, the kv_b split, the metadata).
set -euo pipefail
tests=$2
root=$(cd "$tests/.." && pwd)
/usr/bin/python3 "$root/tools/peers/test_k3_to_gguf.py" "$tests/fixtures/k3-tiny-a" \
  "$tests/fixtures/kimi-linear-tiny"
