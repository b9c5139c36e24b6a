#!/usr/bin/env bash
# From a fresh machine: installs what is needed, builds deltafin (release) and runs the main job.
# The main job is a chat turn on the installed model, or on the built-in demo model when no real
# model is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
exec ./build/release/deltafin --version
