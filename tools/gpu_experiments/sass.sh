#!/usr/bin/env bash
# SASS of a CUDA source's sm_90a kernels on a machine without a GPU or a disassembler, and each
# kernel's opcode counts. nvcc 13 has no cuobjdump here; Debian's non-free nvidia-cuda-toolkit
# (CUDA 11.8) has one, fetched once with apt-get download into a cache (no install, no root). It
# rejects CUDA 13's cubins by their ELF header alone (ABI version 8, new flags); sm_90's encoding
# did not change, so the copy it reads gets the 11.8 header (ABI 7, flags of sm_90). Whether the
# SASS is faithful: the constants and the instruction counts match `ptxas -v` and the source.
#   tools/gpu_experiments/sass.sh src/cuda/gemv_mxfp4_pairs.cu [KERNEL_REGEX] > pairs.sass
# Prints the SASS of the kernels whose mangled names match KERNEL_REGEX (default all) to stdout
# and, to stderr, each one's instruction count and most frequent opcodes.
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
for body in re.split(r'\n\s*Function : ', text)[1:]:
    name = body.split('\n')[0].strip()
    if not pattern.search(name):
        continue
    lines = [l.strip() for l in body.split('\n') if re.search(r'/\*[0-9a-f]{4,}\*/\s', l)]
    ops = collections.Counter(
        re.sub(r'^/\*\w+\*/\s+(@!?U?P\w+\s+)?', '', l).split(' ')[0] for l in lines)
    print(f'Function {name}')
    print('\n'.join(re.sub(r'\s*/\*\s*0x[0-9a-f]+\s*\*/', '', l) for l in lines))
    top = ' '.join(f'{op} {n}' for op, n in ops.most_common(12))
    print(f'{name}: {len(lines)} instructions; {top}', file=sys.stderr)
EOF
