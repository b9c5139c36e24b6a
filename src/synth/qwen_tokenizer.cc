// Qwen-style pre-tokenization for training, BPE with fillers, and the two tokenizer files.
#include "synth/qwen_tokenizer.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deltafin::synth {
namespace {

using Json = nlohmann::ordered_json;

bool is_letter(unsigned char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool is_newline(unsigned char c) { return c == '\n' || c == '\r'; }
bool is_symbol(unsigned char c) { return !is_space(c) && !is_letter(c) && !is_digit(c); }

size_t lower(std::string_view s, size_t i) {
  return i < s.size() ? static_cast<unsigned char>(s[i]) | 0x20 : 0;
}

// Length of the piece at i: the first alternative of kQwenPattern that matches there.
size_t qwen_piece_length(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0; };
  if (at(i) == '\'') {  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    const size_t a = lower(s, i + 1), b = lower(s, i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' || a == 'v') && b == 'e') return 3;
    if (a == 'l' && b == 'l') return 3;
  }
  {  // [^\r\n\p{L}\p{N}]?\p{L}+
    size_t j = i;
    if (i < s.size() && !is_newline(at(i)) && !is_letter(at(i)) && !is_digit(at(i)) &&
        is_letter(at(i + 1)))
      ++j;
    if (is_letter(at(j))) {
      while (j < s.size() && is_letter(at(j))) ++j;
      return j - i;
    }
  }
  if (is_digit(at(i))) return 1;  // \p{N}
  {                               //  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t j = i;
    if (at(j) == ' ' && j + 1 < s.size() && is_symbol(at(j + 1))) ++j;
    if (j < s.size() && is_symbol(at(j))) {
      while (j < s.size() && is_symbol(at(j))) ++j;
      while (j < s.size() && is_newline(at(j))) ++j;
      return j - i;
    }
  }
  if (is_space(at(i))) {
    size_t run = i;
    while (run < s.size() && is_space(at(run))) ++run;
    for (size_t j = run; j > i; --j) {  // \s*[\r\n]+ ends after the run's last newline
      if (is_newline(at(j - 1))) return j - i;
    }
    if (run == s.size() || run - i == 1) return run - i;  // \s+(?!\S), else \s+
    return run - i - 1;
  }
  return 1;
}

}  // namespace

std::vector<std::string_view> pretokenize_qwen_ascii(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < text.size();) {
    const size_t n = qwen_piece_length(text, i);
    pieces.push_back(text.substr(i, n));
    i += n;
  }
  return pieces;
}

const std::vector<QwenAddedToken>& qwen_added_tokens() {
  static const std::vector<QwenAddedToken> kTokens = {
      {"<|endoftext|>", true},      {"<|im_start|>", true},
      {"<|im_end|>", true},         {"<|object_ref_start|>", true},
      {"<|object_ref_end|>", true}, {"<|box_start|>", true},
      {"<|box_end|>", true},        {"<|quad_start|>", true},
      {"<|quad_end|>", true},       {"<|vision_start|>", true},
      {"<|vision_end|>", true},     {"<|vision_pad|>", true},
      {"<|image_pad|>", true},      {"<|video_pad|>", true},
      {"<tool_call>", false},       {"</tool_call>", false},
      {"<|fim_prefix|>", false},    {"<|fim_middle|>", false},
      {"<|fim_suffix|>", false},    {"<|fim_pad|>", false},
      {"<|repo_name|>", false},     {"<|file_sep|>", false},
      {"<tool_response>", false},   {"</tool_response>", false},
      {"<think>", false},           {"</think>", false},
  };
  return kTokens;
}

BpeVocab qwen_bpe(int base_vocab) {
  constexpr int kLearned = 640;
  BpeVocab v =
      train_bpe_pieces(pretokenize_qwen_ascii(english_corpus()), std::min(base_vocab, kLearned));
  // Fillers: every two-byte string of 0x80..0xFF (merge of two bytes), then three-byte ones
  // (merge of a two-byte filler and a byte). The single bytes sit at their rank (byte_rank_order).
  int byte_id[256];
  const std::vector<unsigned char> order = byte_rank_order();
  for (int r = 0; r < 256; ++r) byte_id[order[r]] = r;
  const int two_base = static_cast<int>(v.tokens.size());
  for (int len = 2; len <= 3 && static_cast<int>(v.tokens.size()) < base_vocab; ++len) {
    const int count = len == 2 ? 128 * 128 : 128 * 128 * 128;
    for (int i = 0; i < count && static_cast<int>(v.tokens.size()) < base_vocab; ++i) {
      std::string t;
      for (int k = len - 1; k >= 0; --k) t += static_cast<char>(0x80 + ((i >> (7 * k)) & 127));
      const int last = byte_id[static_cast<unsigned char>(t.back())];
      const int head = len == 2 ? byte_id[static_cast<unsigned char>(t[0])] : two_base + (i >> 7);
      v.merges.push_back({head, last});
      v.tokens.push_back(std::move(t));
    }
  }
  if (static_cast<int>(v.tokens.size()) != base_vocab)
    base::fail("synth: cannot make a Qwen tokenizer of ", base_vocab, " tokens");
  return v;
}

std::string byte_level_encode(std::string_view bytes) {
  static const std::vector<std::string> kChar = [] {
    std::vector<std::string> out(256);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : next++;
      std::string u;
      if (cp < 0x80) {
        u += static_cast<char>(cp);
      } else {  // all code points here are below U+0800: two UTF-8 bytes
        u += static_cast<char>(0xC0 | (cp >> 6));
        u += static_cast<char>(0x80 | (cp & 0x3F));
      }
      out[b] = u;
    }
    return out;
  }();
  std::string out;
  for (char c : bytes) out += kChar[static_cast<unsigned char>(c)];
  return out;
}

std::string qwen_tokenizer_json(const BpeVocab& bpe) {
  const int base_vocab = static_cast<int>(bpe.tokens.size());
  Json added = Json::array();
  const auto& extra = qwen_added_tokens();
  for (size_t i = 0; i < extra.size(); ++i) {
    added.push_back({{"id", base_vocab + static_cast<int>(i)},
                     {"content", extra[i].content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", extra[i].special}});
  }
  const Json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  // vocab and merges are written by hand: an ordered_json object looks keys up linearly, which
  // for Qwen3's 151,643 tokens would take minutes.
  std::vector<std::string> encoded;
  encoded.reserve(bpe.tokens.size());
  std::string vocab = "{";
  for (size_t id = 0; id < bpe.tokens.size(); ++id) {
    encoded.push_back(Json(byte_level_encode(bpe.tokens[id])).dump());  // quoted, escaped
    vocab += (id ? ",\n      " : "\n      ") + encoded.back() + ": " + std::to_string(id);
  }
  vocab += "\n    }";
  std::string merges = "[";
  for (size_t m = 0; m < bpe.merges.size(); ++m) {
    merges += (m ? ",\n      [" : "\n      [") + encoded[bpe.merges[m].first] + ", " +
              encoded[bpe.merges[m].second] + "]";
  }
  merges += "\n    ]";
  const std::string kVocabMark = "@@vocab@@", kMergesMark = "@@merges@@";
  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", kVocabMark},
                {"merges", kMergesMark}};
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", kQwenPattern}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json t;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = std::move(added);
  t["normalizer"] = {{"type", "NFC"}};
  t["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
  t["post_processor"] = byte_level;
  t["decoder"] = byte_level;
  t["model"] = std::move(model);
  std::string out = t.dump(2) + "\n";
  out.replace(out.find('"' + kVocabMark + '"'), kVocabMark.size() + 2, vocab);
  out.replace(out.find('"' + kMergesMark + '"'), kMergesMark.size() + 2, merges);
  return out;
}

std::string qwen_tokenizer_config_json(int base_vocab) {
  Json decoder = Json::object();
  const auto& extra = qwen_added_tokens();
  for (size_t i = 0; i < extra.size(); ++i) {
    decoder[std::to_string(base_vocab + static_cast<int>(i))] = {
        {"content", extra[i].content}, {"lstrip", false},
        {"normalized", false},         {"rstrip", false},
        {"single_word", false},        {"special", extra[i].special}};
  }
  Json c;
  c["add_bos_token"] = false;
  c["add_prefix_space"] = false;
  c["added_tokens_decoder"] = std::move(decoder);
  Json specials = Json::array();
  for (size_t i = 1; i < 14; ++i) specials.push_back(extra[i].content);
  c["additional_special_tokens"] = std::move(specials);
  c["bos_token"] = nullptr;
  c["clean_up_tokenization_spaces"] = false;
  c["eos_token"] = "<|endoftext|>";
  c["errors"] = "replace";
  c["model_max_length"] = 131072;
  c["pad_token"] = "<|endoftext|>";
  c["split_special_tokens"] = false;
  c["tokenizer_class"] = "Qwen2Tokenizer";
  c["unk_token"] = nullptr;
  return c.dump(2) + "\n";
}

}  // namespace deltafin::synth
