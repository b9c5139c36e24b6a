#!/usr/bin/python3
"""Checks deltafin's Kimi pre-tokenizer against Python's `regex` module, an independent engine
that implements the pattern's original syntax (V1 flag: `[A&&[^B]]` class intersection, `\\p{Han}`
as the Script property, `\\s` as White_Space), including tokenization_kimi.py's slicing of long
inputs into 400,000-character slices and 25,000-character whitespace / non-whitespace runs.

usage: kimi_pieces.py TEXT_FILE PIECES.json
PIECES.json is the output of `deltafin tokenize --pattern kimi --pieces --input TEXT_FILE`.
Exits 1 with the first differing piece on a mismatch.
"""

import json
import sys

import regex

KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
MAX_ENCODE_CHARS = 400_000
MAX_RUN_CHARS = 25_000


def runs(s, limit):
    """Cuts `s` where a run of str.isspace() or of non-space characters would exceed `limit`."""
    if not s:
        return
    run_len, run_is_space, start = 0, s[0].isspace(), 0
    for i, c in enumerate(s):
        is_space = c.isspace()
        if is_space != run_is_space:
            run_len, run_is_space = 1, is_space
        else:
            run_len += 1
            if run_len > limit:
                yield s[start:i]
                start, run_len = i, 1
    yield s[start:]


def reference_pieces(text):
    # Full case folding (V1's default) is turned off: Rust's regex folds case one code point at a
    # time, which is what the `(?-f)` scoped flag gives here.
    pattern = regex.compile("(?-f)" + KIMI_PATTERN, regex.V1)
    for i in range(0, len(text), MAX_ENCODE_CHARS):
        for chunk in runs(text[i:i + MAX_ENCODE_CHARS], MAX_RUN_CHARS):
            yield from pattern.findall(chunk)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8", newline="") as f:
        text = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        ours = json.load(f)
    theirs = list(reference_pieces(text))
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            context = "".join(theirs[max(0, i - 3):i])
            print(f"FAIL: piece {i} differs after {context!r}:\n  python regex: {b!r}\n"
                  f"  deltafin:     {a!r}", file=sys.stderr)
            sys.exit(1)
    if len(ours) != len(theirs):
        print(f"FAIL: deltafin gave {len(ours)} pieces, python regex {len(theirs)}", file=sys.stderr)
        sys.exit(1)
    print(f"kimi pattern: {len(ours)} pieces identical to python regex over {len(text)} characters")


if __name__ == "__main__":
    main()
