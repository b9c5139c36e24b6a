// libFuzzer target for the tokenizer.json path. First byte even: the rest is a tokenizer.json,
// which must load or fail with base::Error (never crash); a loaded one must encode losslessly.
// First byte odd: the rest is text for a fixed Qwen-style tokenizer: lossless (NFC of valid
// UTF-8, invalid bytes kept), no special ids from ordinary encoding, streaming agrees with decode.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using deltafin::tokenizer::HfTokenizer;
using deltafin::tokenizer::Tokenizer;

// Byte-level vocabulary of the 256 bytes plus a few merges (the strings are in the byte-level
// alphabet: "Ġ" is a space), NFC, Qwen's Split pattern, one special and one ordinary added token.
std::string fixed_json() {
  std::string vocab;
  std::string merges;
  int id = 0;
  const auto add = [&](const std::string& token) {
    nlohmann::json key = token;
    vocab += (vocab.empty() ? "" : ",") + key.dump() + ":" + std::to_string(id++);
  };
  for (int b = 0; b < 256; ++b) {
    const char32_t c = deltafin::tokenizer::byte_to_char(static_cast<uint8_t>(b));
    std::string s;
    if (c < 0x80) {
      s.push_back(static_cast<char>(c));
    } else {
      s.push_back(static_cast<char>(0xC0 | (c >> 6)));
      s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    add(s);
  }
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"t", "h"}, {"th", "e"}, {"Ġ", "the"}, {"i", "n"}, {"in", "g"}, {"Ġ", "Ġ"}, {"ĠĠ", "ĠĠ"},
      {"Ċ", "Ċ"}, {"a", "a"},  {"aa", "aa"}, {"1", "2"}, {"Ã", "©"},  {"ä", "¸"}, {"ä¸", "Ń"}};
  for (const auto& [a, b] : pairs) {
    add(a + b);
    merges += std::string(merges.empty() ? "" : ",") + nlohmann::json::array({a, b}).dump();
  }
  const std::string qwen =
      nlohmann::json(
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)")
          .dump();
  return R"({"added_tokens":[{"id":1000,"content":"<|im_start|>","special":true},)"
         R"({"id":1001,"content":"<think>","special":false}],"normalizer":{"type":"NFC"},)"
         R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":)"
         R"({"Regex":)" +
         qwen +
         R"(},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,)"
         R"("use_regex":false}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{)" +
         vocab + R"(},"merges":[)" + merges + "]}}";
}

void check_text(const Tokenizer& tok, const HfTokenizer& hf, const std::string& text) {
  const auto ids = tok.encode_ordinary(text);
  for (const int32_t id : ids) {
    if (tok.is_special(id)) __builtin_trap();
  }
  const std::string bytes = tok.decode_bytes(ids);
  if (deltafin::tokenizer::utf8::is_valid(text) && bytes != hf.normalize(text)) __builtin_trap();
  if (tok.decode_bytes(tok.encode_markup(text)) != bytes) __builtin_trap();
  deltafin::tokenizer::StreamingDecoder decoder(tok);
  std::string streamed;
  for (const int32_t id : ids) streamed += decoder.push(id);
  streamed += decoder.flush();
  if (streamed != tok.decode(ids)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string json = fixed_json();
  static const Tokenizer tok = Tokenizer::from_hf_json(json, "fixed.json");
  static const HfTokenizer hf = HfTokenizer::from_json(json, "fixed.json");
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 1) {
    check_text(tok, hf, rest);
    return 0;
  }
  try {
    const Tokenizer loaded = Tokenizer::from_hf_json(rest, "fuzz.json");
    const HfTokenizer loaded_hf = HfTokenizer::from_json(rest, "fuzz.json");
    // Added tokens of a fuzzed file may render differently from their text (Hugging Face's
    // ByteLevel decoder does that too), so only the invariants that hold for any file are checked.
    for (const char* s : {"the thing 12 caf\xC3\xA9 <|im_start|><think>\n\n", "e\xCC\x81\xFF x"}) {
      for (const int32_t id : loaded.encode_ordinary(s)) {
        if (loaded.is_special(id)) __builtin_trap();
      }
      loaded.decode(loaded.encode_markup(s));
      std::vector<int32_t> direct;
      loaded_hf.encode_into(s, /*allow_special=*/true, direct);
      if (direct != loaded.encode_markup(s)) __builtin_trap();
    }
  } catch (const deltafin::base::Error&) {
    // An unsupported or malformed file: the expected outcome for most inputs.
  }
  return 0;
}
