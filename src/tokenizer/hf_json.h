// Reading a Hugging Face `tokenizer.json` (byte-level BPE, as Qwen2/Qwen3 and GPT-2 use) into the
// parts HfTokenizer runs on. Every field that would change ids is checked; a configuration this
// reader does not implement is an error naming its JSON path, never a silent difference.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/merge_bpe.h"

namespace deltafin::tokenizer {

struct HfAddedToken {
  std::string content;  // matched in the raw (not normalized) text
  int32_t id = 0;
  bool special = false;
};

// One Split pre-tokenizer stage (behavior Isolated: matches and the gaps between them are pieces).
struct HfSplitStage {
  std::string original;  // the pattern as the file has it (Oniguruma syntax)
  std::string pcre2;     // hf_regex_to_pcre2(original)
};

struct HfSpec {
  std::vector<std::string> token_bytes;  // model vocabulary: bytes by id ("" = id unused)
  std::vector<MergeBpe::Merge> merges;   // rank order
  int32_t byte_ids[256] = {};            // id of each one-byte token
  bool ignore_merges = false;            // a piece that is itself a token is taken whole
  std::vector<HfAddedToken> added;
  bool nfc = false;
  std::vector<HfSplitStage> splits;  // applied in order, before the byte-level mapping
};

// Parses the text of a tokenizer.json; `source` (usually the path) prefixes every error.
HfSpec parse_hf_tokenizer_json(std::string_view json_text, const std::string& source);

// Rewrites a Hugging Face (Oniguruma) pre-tokenizer regex for PCRE2: `\s` becomes Unicode
// White_Space spelled out and `\S` its complement, because PCRE2's `\s` under UCP also matches
// U+180E. Escapes whose meaning differs between the engines (\w \W \b \B \h \H \X \R \K) are
// rejected; everything else (\p{..}, (?i:..), lookahead, classes) means the same in both.
// `where` names the JSON path in errors.
std::string hf_regex_to_pcre2(std::string_view pattern, const std::string& where);

// GPT-2's pre-tokenizer regex, which ByteLevel applies when `use_regex` is true.
extern const char* const kGpt2Pattern;

// GPT-2's bytes_to_unicode: the code point (below 512) that stands for each byte in vocabularies.
char32_t byte_to_char(uint8_t byte);
// The byte a code point stands for, or -1 for a code point outside the alphabet.
int byte_of_char(char32_t c);

}  // namespace deltafin::tokenizer
