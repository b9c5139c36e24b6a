// The tokenizer runtime holds: tiktoken-compatible (vocabulary + pre-tokenizer + special tokens)
// or a Hugging Face tokenizer.json (HfTokenizer), with encoding of untrusted text (never special
// ids), of trusted markup (special ids allowed), and decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace deltafin::tokenizer {

class HfTokenizer;

class Tokenizer {
 public:
  // vocab_path: a tiktoken.model file. special_config: a tokenizer_config.json whose
  // `added_tokens_decoder` names special ids ("" = none). The ids right after the base vocabulary
  // (256 of them for kKimi, none otherwise) are special tokens too; those without a name in the
  // config are called <|reserved_token_{id}|>, as tokenization_kimi.py does.
  static Tokenizer load(const std::string& vocab_path, Pattern pattern,
                        const std::string& special_config = "");
  // In-memory construction (tests, fuzzing): tokens[rank] = bytes, specials by name.
  static Tokenizer from_parts(std::vector<std::string> tokens, Pattern pattern,
                              const std::map<std::string, int32_t>& specials,
                              int32_t n_reserved = 0);

  // A Hugging Face tokenizer.json (byte-level BPE, e.g. Qwen3's; see hf_tokenizer.h). Its
  // special added tokens are this tokenizer's specials; non-special added tokens (<think>, ...)
  // are ordinary tokens that encode_ordinary matches too, as Hugging Face does.
  static Tokenizer load_hf_json(const std::string& path);
  static Tokenizer from_hf_json(std::string_view json_text, const std::string& source);

  // Untrusted text: special-token strings in it are ordinary text. Valid UTF-8 follows the
  // reference exactly; a byte that is not valid UTF-8 becomes its own single-byte token, so
  // decode_bytes(encode_ordinary(s)) == s for any bytes.
  std::vector<int32_t> encode_ordinary(std::string_view text) const;
  // Trusted markup: every special-token string becomes its id (the longest one where several
  // start at the same byte); the text between is encoded as by encode_ordinary.
  std::vector<int32_t> encode_markup(std::string_view text) const;
  void encode_ordinary_into(std::string_view text, std::vector<int32_t>& out) const;
  void encode_markup_into(std::string_view text, std::vector<int32_t>& out) const;

  // Concatenated token bytes (specials as their names) decoded like Python's errors="replace".
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode_bytes(const std::vector<int32_t>& ids) const;
  // Bytes of one token: its vocabulary bytes, or a special token's name. base::Error for an id
  // outside the vocabulary.
  std::string_view token_bytes(int32_t id) const;

  std::optional<int32_t> special_id(std::string_view name) const;
  bool is_special(int32_t id) const { return specials_by_id_.count(id) > 0; }
  // A special's name, or the token's raw bytes (not necessarily valid UTF-8).
  std::string token_text(int32_t id) const { return std::string(token_bytes(id)); }
  int32_t vocab_size() const { return vocab_size_; }
  // The tiktoken pattern; meaningless when is_hf_json() (the file's own Split stages apply).
  Pattern pattern() const { return pattern_; }
  bool is_hf_json() const { return hf_ != nullptr; }
  // "kimi", "o200k", "cl100k" or "tokenizer.json", for logs.
  const char* kind_name() const;

  // The pre-tokenizer's pieces of `text` (after Kimi's slicing for kKimi), for verification
  // against other regex engines. Bytes that are not valid UTF-8 come out as one-byte pieces.
  std::vector<std::string> pieces(std::string_view text) const;
  static std::vector<std::string> pieces(Pattern pattern, std::string_view text);

 private:
  Tokenizer(Vocab vocab, Pattern pattern);
  explicit Tokenizer(std::shared_ptr<const HfTokenizer> hf);
  void add_special(const std::string& name, int32_t id, const std::string& source);
  void encode_chunk(std::string_view text, std::vector<int32_t>& out) const;
  void encode_markup_chunk(std::string_view text, std::vector<int32_t>& out) const;

  Vocab vocab_;
  Pattern pattern_;
  PieceSplitter splitter_;
  // Transparent hashing so that lookups by string_view do not allocate.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, NameHash, std::equal_to<>> specials_by_name_;
  std::unordered_map<int32_t, std::string> specials_by_id_;
  std::vector<size_t> special_lengths_;  // distinct name lengths, longest first
  bool special_first_byte_[256] = {};
  int32_t vocab_size_ = 0;
  std::shared_ptr<const HfTokenizer> hf_;  // set for tokenizer.json; then vocab_ is unused
};

// Qwen3's (or any byte-level BPE) tokenizer.json, e.g. "<model dir>/tokenizer.json": the same as
// Tokenizer::load_hf_json. base::Error naming the file and JSON path for unsupported content.
Tokenizer load_hf_tokenizer(const std::string& path);

// Turns ids into text one id at a time without ever emitting part of a UTF-8 character: bytes of
// an incomplete character are held until the id that completes it (or flush). The concatenation
// of all push() results and flush() equals Tokenizer::decode of all the ids.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  std::string push(int32_t id);
  // Appends raw bytes as if they were a token's (for callers that split ids themselves).
  std::string push_bytes(std::string_view bytes);
  // Emits what is held back (an incomplete character becomes U+FFFD) and resets.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
};

}  // namespace deltafin::tokenizer
