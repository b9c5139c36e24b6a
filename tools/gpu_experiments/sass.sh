#!/usr/bin/env bash
# SASS of a CUDA source's sm_90a kernels on a machine without a GPU or a disassembler, and each
# kernel's opcode counts. nvcc 13 has no cuobjdump here; Debian's non-free nvidia-cuda-toolkit
# (CUDA 11.8) has one, fetched once with apt-get download into a cache (no install, no root). It
# rejects CUDA 13's cubins by their ELF header alone (ABI version 8, new flags); sm_90's encoding
# did not change, so the copy it reads gets the 11.8 header (ABI 7, flags of sm_90). Whether the
# SASS is faithful: the constants and the instruction counts match `ptxas -v` and the source.
#   tools/gpu_experiments/sass.sh src/cuda/gemv_mxfp4_pairs.cu [KERNEL_REGEX] > pairs.sass
# Prints the SASS of the kernels whose mangled names match KERNEL_REGEX (default all) to stdout,
# each instruction with its stall count (the cycles ptxas has a warp wait after it for fixed
# latencies, from the control code's low 4 bits; summed over a loop's path, the fewest cycles a
# warp alone takes for it), and to stderr each kernel's instruction count, stall sum and most
# frequent opcodes.
set -euo pipefail
src=${1:?usage: sass.sh SOURCE.cu [KERNEL_REGEX]}
pattern=${2:-.}
cache=${SASS_CACHE:-$HOME/.cache/deltafin-sass}
root=$(git rev-parse --show-toplevel)
cuobjdump=$cache/usr/bin/cuobjdump
if [[ ! -x $cuobjdump ]]; then
  mkdir -p "$cache/lists/partial" "$cache/archives/partial"
  echo "deb http://deb.debian.org/debian bookworm non-free" >"$cache/sources.list"
  apt_opts=(-o "Dir::Etc::sourcelist=$cache/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$cache/lists" -o "Dir::Cache=$cache")
  apt-get "${apt_opts[@]}" update >&2
  (cd "$cache" && apt-get "${apt_opts[@]}" download nvidia-cuda-toolkit >&2)
  dpkg-deb -x "$cache"/nvidia-cuda-toolkit_*.deb "$cache"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --fmad=false \
  -Xcompiler=-ffp-contract=off -I"$root/src" -I"$root/include" -cubin "$src" -o "$tmp/k.cubin"
python3 - "$tmp/k.cubin" <<'EOF'
import struct, sys
path = sys.argv[1]
b = bytearray(open(path, 'rb').read())
b[8] = 7                                  # EI_ABIVERSION: CUDA 11.8's
struct.pack_into('<I', b, 48, 0x005a055a)  # e_flags: sm_90, virtual sm_90, 64-bit addresses
open(path, 'wb').write(b)
EOF
"$cuobjdump" -sass "$tmp/k.cubin" >"$tmp/all.sass"
python3 - "$tmp/all.sass" "$pattern" <<'EOF'
import collections, re, sys
text, pattern = open(sys.argv[1]).read(), re.compile(sys.argv[2])
inst = re.compile(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*/\*\s*0x[0-9a-f]+\s*\*/')
for body in re.split(r'\n\s*Function : ', text)[1:]:
    name = body.split('\n')[0].strip()
    if not pattern.search(name):
        continue
    rows, lines = [], body.split('\n')
    for i, line in enumerate(lines[:-1]):
        m = inst.match(line)
        if not m:
            continue
        # The second 64-bit word's top 23 bits are the control code; its low 4 bits are the
        # cycles ptxas has this warp wait before its next instruction (fixed latencies only).
        high = re.search(r'0x([0-9a-f]+)', lines[i + 1])
        stall = (int(high.group(1), 16) >> 41) & 15 if high else 0
        rows.append((m.group(1), m.group(2), stall))
    ops = collections.Counter(re.sub(r'^(@!?U?P\w+\s+)?', '', op).split(' ')[0] for _, op, _ in rows)
    print(f'Function {name}')
    print('\n'.join(f'/*{a}*/ {op} /* stall {s} */' for a, op, s in rows))
    top = ' '.join(f'{op} {n}' for op, n in ops.most_common(12))
    stalls = sum(s for _, _, s in rows)
    print(f'{name}: {len(rows)} instructions, {stalls} stall cycles; {top}', file=sys.stderr)
EOF
