#!/usr/bin/env bash
# Installs the Debian packages deltafin's build and tests need. Idempotent: runs `apt-get update`
# once, and only when a package is missing. Nothing comes from anywhere but Debian's registry.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang-14 clang-format-14 libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev liburing-dev libcurl4-openssl-dev libcpp-httplib-dev
  python3 python3-numpy python3-regex
  curl ca-certificates
)
if [[ "${1:-}" == "--tests" ]]; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm may come from outside Debian on a developer machine; accept any working node >= 18.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]}")
fi

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
