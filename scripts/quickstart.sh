#!/usr/bin/env bash
# From a fresh machine: installs what is needed, builds deltafin (release) and runs the main job.
# The main job is a chat turn on the installed model, or on the built-in demo model when no real
# model is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
# The main job: a chat turn on the installed model (where `deltafin setup` puts it, or
# $DELTAFIN_MODEL), else on the demo model, made on first use.
home=${DELTAFIN_HOME:-${XDG_DATA_HOME:+$XDG_DATA_HOME/deltafin}}
home=${home:-$HOME/.local/share/deltafin}
if [[ -n ${DELTAFIN_MODEL:-} || -f $home/models/moonshotai/Kimi-K3/config.json ]]; then
  exec ./build/release/deltafin run --chat --prompt "Hello! What can you do?" --max-new 256 --stats
fi
exec ./build/release/deltafin demo --stats
