// A Hugging Face byte-level BPE tokenizer (tokenizer.json, as Qwen3 ships): added tokens matched
// first, then NFC, Split pre-tokenizers (PCRE2) and merge-rank BPE over the text's bytes.
// Tokenizer (tokenizer.h) wraps it; use tokenizer::load_hf_tokenizer rather than this directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/hf_json.h"
#include "tokenizer/merge_bpe.h"
#include "tokenizer/pretokenizer.h"

namespace deltafin::tokenizer {

class HfTokenizer {
 public:
  static HfTokenizer load(const std::string& path);
  // `source` names the origin in error messages.
  static HfTokenizer from_json(std::string_view json_text, const std::string& source);

  // allow_special=false (untrusted text): non-special added tokens (Qwen3's <think>,
  // <tool_call>, ...) are still matched, as Hugging Face does with split_special_tokens, but a
  // special token's text is ordinary text. allow_special=true: every added token is matched
  // (leftmost, then longest). A byte that is not valid UTF-8 becomes its one-byte token, so the
  // ids' bytes always reproduce NFC of the valid stretches and the invalid bytes unchanged.
  void encode_into(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;

  // Bytes of a token: vocabulary tokens through the byte-level alphabet; added tokens as
  // Hugging Face's ByteLevel decoder renders them (their content, for ASCII names).
  std::string_view token_bytes(int32_t id) const;
  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::vector<HfAddedToken>& added_tokens() const { return added_; }
  std::optional<int32_t> added_token_id(std::string_view content) const;

  // Pieces BPE runs on (after NFC and every Split stage), for verification.
  std::vector<std::string> pieces(std::string_view text) const;
  // NFC of valid UTF-8 when the normalizer asks for it, else the text unchanged.
  std::string normalize(std::string_view valid_utf8) const;

 private:
  HfTokenizer() = default;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  template <typename Fn>
  void for_each_piece(std::string_view valid_utf8, Fn fn) const;

  std::vector<std::string> bytes_;  // by id; added tokens included
  MergeBpe bpe_;
  int32_t byte_ids_[256] = {};
  bool nfc_ = false;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> whole_;  // bytes -> id, only for ignore_merges
  std::vector<PieceSplitter> splitters_;
  std::vector<HfAddedToken> added_;
  std::unordered_map<std::string, size_t> added_by_content_;  // -> index in added_
  std::vector<size_t> added_lengths_;                         // distinct lengths, longest first
  bool added_first_byte_[256] = {};
};

}  // namespace deltafin::tokenizer
