#!/usr/bin/env bash
# deltafin's BPE against the tiktoken npm package (WASM build of tiktoken's Rust core): the ids of
# a few MB of generated text must be identical for the cl100k and o200k vocabularies, which the
# test writes out in tiktoken.model format from the package itself. Also logs encode speed.
# usage: tokenizer_tiktoken.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
npm_dir=$tests/npm
if [[ ! -d $npm_dir/node_modules/tiktoken ]]; then
  echo "FAIL: $npm_dir/node_modules/tiktoken is missing: run the test setup first" \
    "(npm ci --prefix tests/npm)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

/usr/bin/python3 "$tests/../tools/tokenizer/make_corpus.py" "$tests/fixtures/tokenizer" "$tmp"
for pattern in cl100k o200k; do
  encoding=${pattern}_base
  node "$npm_dir/tiktoken_check.mjs" vocab "$encoding" "$tmp/$pattern.tiktoken"
  "$deltafin" tokenize --vocab "$tmp/$pattern.tiktoken" --pattern "$pattern" \
    --input "$tmp/corpus.txt" > "$tmp/ids.json"
  node "$npm_dir/tiktoken_check.mjs" compare "$encoding" "$tmp/corpus.txt" "$tmp/ids.json"
  # Speed on English prose (logged, not asserted: sanitizer builds run this test too).
  "$deltafin" tokenize --vocab "$tmp/$pattern.tiktoken" --pattern "$pattern" \
    --input "$tmp/english.txt" --timing-runs 5 > /dev/null
done
echo "tokenizer_tiktoken: PASS"
