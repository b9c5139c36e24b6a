#!/usr/bin/env bash
# Real client libraries against `deltafin serve` on the demo model (tests/npm/server/*.test.mjs):
# the official openai npm SDK (chat, completions and responses, whole and streamed, reasoning,
# usage, tools, seeded sampling, stop strings, every error class), the Vercel ai SDK with
# @ai-sdk/openai (Responses API) and @ai-sdk/openai-compatible, and @langchain/openai. The files
# run one at a time: the server runs one generation at a time and answers the rest with 429.
# usage: server_openai.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
npm_dir=$tests/npm
if [[ ! -d $npm_dir/node_modules/openai ]]; then
  echo "FAIL: $npm_dir/node_modules/openai is missing: run the test setup first" \
    "(npm ci --prefix tests/npm)" >&2
  exit 1
fi
tmp=$(mktemp -d)
source "$tests/e2e/lib/server.sh"
trap 'server_cleanup; rm -rf "$tmp"' EXIT

"$deltafin" synth --out "$tmp/demo" --preset demo >/dev/null
start_server openai --model "$tmp/demo" --api-key test-key --max-request-bytes 200000 \
  --max-tokens-limit 200000
if ! DELTAFIN_BASE_URL="http://127.0.0.1:$port/v1" DELTAFIN_API_KEY=test-key \
  DELTAFIN_MODEL_ID=demo DELTAFIN_BIN="$deltafin" DELTAFIN_MODEL_DIR="$tmp/demo" \
  node --test --test-concurrency=1 --test-reporter=spec "$npm_dir/server/"*.test.mjs; then
  echo "--- server log" >&2
  tail -40 "$tmp/openai.log" >&2
  exit 1
fi
echo "server_openai: PASS"
