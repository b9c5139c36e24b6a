#!/usr/bin/python3
"""Deterministic tokenizer test corpus, built from the seed texts in tests/fixtures/tokenizer/.

Writes OUT_DIR/corpus.txt (a few MB of mixed text: prose, code, CJK, other scripts, emoji with
joiners, numbers, whitespace runs, long words, a soup of code points), OUT_DIR/english.txt
(prose only, for speed figures) and OUT_DIR/long_runs.txt (runs that Kimi's slicing cuts). The same seed always gives the same bytes: the generator uses
its own xorshift PRNG, not Python's `random`, so the output does not depend on the Python version.

Code points are drawn from blocks whose characters kept their general category and script from
Unicode 12 through 15, so PCRE2 (Unicode 14), Python's regex module and the Rust regex crate in
tiktoken (Unicode 15) all agree on them.

usage: make_corpus.py SEED_DIR OUT_DIR [--scale N]   (N = corpus size multiplier, default 1)
"""

import os
import sys


class Rng:
    def __init__(self, seed):
        self.state = seed or 0x9E3779B97F4A7C15

    def next(self):
        x = self.state
        x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 7
        x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
        self.state = x
        return x

    def below(self, n):
        return self.next() % n

    def pick(self, items):
        return items[self.below(len(items))]


# Blocks whose assignments are stable across the Unicode versions involved (12.0 .. 15.0).
SOUP_RANGES = [
    (0x0020, 0x007E), (0x00A0, 0x00FF), (0x0100, 0x017F), (0x0180, 0x024F), (0x0300, 0x036F),
    (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x05F4), (0x0600, 0x06FF), (0x0900, 0x097F),
    (0x0E01, 0x0E5B), (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x20A0, 0x20BF), (0x2100, 0x214F),
    (0x2190, 0x23FF), (0x2500, 0x27BF), (0x3000, 0x303F), (0x3041, 0x3096), (0x30A0, 0x30FF),
    (0x3400, 0x4DB5), (0x4E00, 0x9FEF), (0xAC00, 0xD7A3), (0xF900, 0xFA6D), (0xFF01, 0xFFEE),
    (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x20000, 0x2A6D6),
]
WHITESPACE = [" ", " ", " ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2003", "\r", "\x0b",
              "\x0c", "\u2028", "\x1c", "\u180e", "\u200b"]


def read_lines(seed_dir, name):
    with open(os.path.join(seed_dir, name), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def prose(rng, sentences, n_bytes):
    out, size = [], 0
    while size < n_bytes:
        paragraph = " ".join(rng.pick(sentences) for _ in range(2 + rng.below(6)))
        out.append(paragraph)
        size += len(paragraph.encode()) + 2
    return "\n\n".join(out) + "\n"


def code(rng, lines, n_bytes):
    out, size = [], 0
    names = ["value", "count", "x1", "tmpBuffer", "_private", "HTTPServer", "snake_case_name"]
    while size < n_bytes:
        line = rng.pick(lines)
        if rng.below(4) == 0:
            line = line.replace("values", rng.pick(names)).replace("counts", rng.pick(names))
        indent = rng.pick(["", "    ", "        ", "\t", "\t\t", "  "])
        out.append(indent + line.lstrip())
        size += len(out[-1].encode()) + 1
    return "\n".join(out) + "\n"


def numbers(rng, n_bytes):
    out, size = [], 0
    while size < n_bytes:
        kind = rng.below(6)
        if kind == 0:
            s = str(rng.below(10 ** (1 + rng.below(12))))
        elif kind == 1:
            s = "%d.%0*d" % (rng.below(100000), 1 + rng.below(6), rng.below(10 ** 6) % 10 ** 6)
        elif kind == 2:
            s = "%04d-%02d-%02d" % (1900 + rng.below(200), 1 + rng.below(12), 1 + rng.below(28))
        elif kind == 3:
            s = "+1 (%03d) %03d-%04d" % (rng.below(1000), rng.below(1000), rng.below(10000))
        elif kind == 4:
            s = "".join(rng.pick("0123456789٠١٢٣٤٥٦٧٨٩१२३") for _ in range(1 + rng.below(40)))
        else:
            s = "%de%+d" % (rng.below(1000), rng.below(40) - 20)
        out.append(s)
        size += len(s) + 1
        out.append(rng.pick([" ", ", ", "\n", "; ", "x", "%", "$"]))
    return "".join(out) + "\n"


def whitespace_runs(rng, words, n_bytes):
    out, size = [], 0
    while size < n_bytes:
        out.append(rng.pick(words))
        run = "".join(rng.pick(WHITESPACE) for _ in range(rng.below(3) and 1 + rng.below(40)))
        if rng.below(10) == 0:
            run = " " * (1 + rng.below(300))
        out.append(run)
        size += len(out[-2].encode()) + len(run.encode())
    return "".join(out) + "\n"


def long_words(rng):
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [
        "a" * 3000,
        "".join(rng.pick(letters) for _ in range(4000)),
        "ab" * 1500,
        "Supercalifragilisticexpialidocious" * 40,
        "".join(rng.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                for _ in range(3000)) + "==",
        "https://example.com/" + "/".join("seg%d" % i for i in range(300)) + "?q=" + "x" * 500,
        "9" * 2000,
        "!" * 1500 + "\n" * 20,
        "字" * 1200,
        "é" * 1000 + "e\u0301" * 500,
        "👍" * 400,
        "\u200d".join(["👩"] * 300),
    ]
    return "\n".join(words) + "\n"


def long_runs(rng):
    """Runs past Kimi's 25,000-character limit and a text past its 400,000-character slices.

    Kept out of corpus.txt: tiktoken's BPE is quadratic in the piece length, and these pieces
    would make the reference run take minutes.
    """
    parts = ["x" * 30_000, " " * 26_000, "y" * 10, "\u3000" * 25_001, "z", "\n" * 25_002,
             "".join(rng.pick("abcXYZ\u00e9\u5b57") for _ in range(60_000))]
    words = []
    size = sum(len(p) for p in parts)
    while size < 2 * 400_000 + 1234:
        words.append(rng.pick(["word", "Wort", "\u5b57\u5b57", "it's", "12345", "  ", ".\n"]))
        size += len(words[-1])
    return "".join(parts) + " ".join(words)


def soup(rng, n_chars):
    out = []
    for _ in range(n_chars):
        lo, hi = rng.pick(SOUP_RANGES)
        out.append(chr(lo + rng.below(hi - lo + 1)))
        if rng.below(8) == 0:
            out.append(rng.pick([" ", "'s", "'T", "'ll", "'\u017f", "'RE", "\n", "'"]))
    return "".join(out) + "\n"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    seed_dir, out_dir = sys.argv[1], sys.argv[2]
    scale = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--scale" else 1
    rng = Rng(20250611)
    english = read_lines(seed_dir, "english.txt")
    code_lines = read_lines(seed_dir, "code.txt")
    cjk = read_lines(seed_dir, "cjk.txt")
    scripts = read_lines(seed_dir, "scripts.txt")
    emoji = read_lines(seed_dir, "emoji.txt")
    words = " ".join(english + scripts + cjk).split()

    english_text = prose(rng, english, 900_000 * scale)
    sections = [
        english_text,
        code(rng, code_lines, 450_000 * scale),
        prose(rng, cjk + english[:5], 350_000 * scale),
        prose(rng, scripts, 300_000 * scale),
        prose(rng, emoji + english[:3], 150_000 * scale),
        numbers(rng, 150_000 * scale),
        whitespace_runs(rng, words, 250_000 * scale),
        long_words(rng),
        soup(rng, 120_000 * scale),
    ]
    # Interleave short cuts of every section too, so transitions between kinds of text occur.
    mixed = []
    for _ in range(2000 * scale):
        s = rng.pick(sections)
        start = rng.below(max(1, len(s) - 200))
        mixed.append(s[start:start + 1 + rng.below(200)])
    sections.append("".join(mixed))

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        f.write("".join(sections))
    with open(os.path.join(out_dir, "english.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(english_text)
    with open(os.path.join(out_dir, "long_runs.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(long_runs(rng))


if __name__ == "__main__":
    main()
