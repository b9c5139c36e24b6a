#!/usr/bin/env bash
# deltafin's PCRE2 rewrite of the Kimi pre-tokenizer pattern against Python's `regex` module,
# which implements the original syntax (class intersection), with tokenization_kimi.py's
# 400,000 / 25,000-character slicing, on the generated corpus and on runs long enough to be cut.
# usage: tokenizer_kimi_pattern.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
tools=$tests/../tools/tokenizer
if ! /usr/bin/python3 -c 'import regex' 2>/dev/null; then
  echo "FAIL: /usr/bin/python3 lacks the regex module (Debian package python3-regex)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

/usr/bin/python3 "$tools/make_corpus.py" "$tests/fixtures/tokenizer" "$tmp"
for name in corpus long_runs; do
  "$deltafin" tokenize --pattern kimi --pieces --input "$tmp/$name.txt" > "$tmp/$name.json"
  /usr/bin/python3 "$tools/kimi_pieces.py" "$tmp/$name.txt" "$tmp/$name.json"
done
echo "tokenizer_kimi_pattern: PASS"
