// libFuzzer target for the tokenizer: on any bytes, encoding never crashes and is lossless
// (decode_bytes(encode(s)) == s, ordinary and markup), ordinary encoding never yields a special
// id, valid UTF-8 decodes back to itself, and the streaming decoder agrees with decode.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using deltafin::tokenizer::Pattern;
using deltafin::tokenizer::Tokenizer;

// All 256 bytes plus merges over ASCII, UTF-8 fragments and whitespace, so that BPE merges, the
// long-piece path and every pre-tokenizer branch are exercised; a few specials for markup.
Tokenizer make_tokenizer(Pattern pattern) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t :
       {"th",       "he",           "the",  " t",   " the", "in",       "ing",
        "er",       "an",           "  ",   "    ", "\n\n", "aa",       "aaaa",
        "\xE4\xB8", "\xE4\xB8\xAD", "'s",   "12",   "123",  "\xF0\x9F", "\xF0\x9F\x98",
        " a",       "ab",           "abab", "ba"}) {
    tokens.emplace_back(t);
  }
  return Tokenizer::from_parts(tokens, pattern, {{"<|open|>", 400}, {"[BOS]", 401}},
                               pattern == Pattern::kKimi ? 4 : 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer tokenizers[] = {make_tokenizer(Pattern::kKimi),
                                         make_tokenizer(Pattern::kO200k),
                                         make_tokenizer(Pattern::kCl100k)};
  if (size == 0) return 0;
  const Tokenizer& tok = tokenizers[data[0] % 3];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);

  const auto ids = tok.encode_ordinary(text);
  for (const int32_t id : ids) {
    if (tok.is_special(id)) __builtin_trap();
  }
  if (tok.decode_bytes(ids) != text) __builtin_trap();
  if (deltafin::tokenizer::utf8::is_valid(text) && tok.decode(ids) != text) __builtin_trap();
  if (tok.decode_bytes(tok.encode_markup(text)) != text) __builtin_trap();

  deltafin::tokenizer::StreamingDecoder decoder(tok);
  std::string streamed;
  for (const int32_t id : ids) streamed += decoder.push(id);
  streamed += decoder.flush();
  if (streamed != tok.decode(ids)) __builtin_trap();
  return 0;
}
