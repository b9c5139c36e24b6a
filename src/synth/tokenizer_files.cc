// BPE training on built-in text, tiktoken.model text and the release's tokenizer_config.json.
#include "synth/tokenizer_files.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "base/error.h"

namespace deltafin::synth {
namespace {

bool is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
bool is_letter(unsigned char c) { return is_upper(c) || is_lower(c); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool is_newline(unsigned char c) { return c == '\n' || c == '\r'; }
// [^\r\n\p{L}\p{N}]: the optional one-character prefix of a word piece.
bool is_word_prefix(unsigned char c) { return !is_newline(c) && !is_letter(c) && !is_digit(c); }
// [^\s\p{L}\p{N}]: punctuation and symbols.
bool is_symbol(unsigned char c) { return !is_space(c) && !is_letter(c) && !is_digit(c); }

class Splitter {
 public:
  explicit Splitter(std::string_view text) : s_(text) {}

  // Length of the piece starting at i: the first alternative of the K3 regex that matches.
  size_t piece_length(size_t i) const {
    if (size_t n = word(i, true)) return n;
    if (size_t n = word(i, false)) return n;
    if (is_digit(at(i))) {
      size_t j = i;
      while (j < s_.size() && j - i < 3 && is_digit(at(j))) ++j;
      return j - i;
    }
    if (size_t n = symbols(i)) return n;
    if (is_space(at(i))) {
      size_t run = i;
      while (run < s_.size() && is_space(at(run))) ++run;
      for (size_t j = run; j > i; --j) {  // \s*[\r\n]+ ends at the run's last newline
        if (is_newline(at(j - 1))) return j - i;
      }
      if (run == s_.size() || run - i == 1) return run - i;  // \s+(?!\S), else \s+
      return run - i - 1;  // leave one space to start the next word
    }
    return 1;
  }

 private:
  unsigned char at(size_t i) const { return i < s_.size() ? static_cast<unsigned char>(s_[i]) : 0; }

  // [prefix]?[A-Z]*[a-z]+(contraction)?  (lower_tail) or  [prefix]?[A-Z]+[a-z]*(contraction)?
  size_t word(size_t i, bool lower_tail) const {
    for (int with_prefix = 1; with_prefix >= 0; --with_prefix) {
      if (with_prefix && (i >= s_.size() || !is_word_prefix(at(i)))) continue;
      size_t j = i + with_prefix;
      const size_t upper_begin = j;
      while (j < s_.size() && is_upper(at(j))) ++j;
      const size_t lower_begin = j;
      while (j < s_.size() && is_lower(at(j))) ++j;
      const bool ok = lower_tail ? j > lower_begin : lower_begin > upper_begin;
      if (ok) return j + contraction(j) - i;
    }
    return 0;
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  size_t contraction(size_t j) const {
    if (at(j) != '\'') return 0;
    const auto lc = [&](size_t k) { return static_cast<char>(at(k) | 0x20); };
    const char a = lc(j + 1), b = lc(j + 2);
    if (!is_letter(at(j + 1))) return 0;
    if (a == 's' || a == 't') return 2;
    if ((a == 'r' || a == 'v') && b == 'e' && is_letter(at(j + 2))) return 3;
    if (a == 'm') return 2;
    if (a == 'l' && b == 'l' && is_letter(at(j + 2))) return 3;
    if (a == 'd') return 2;
    return 0;
  }

  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t symbols(size_t i) const {
    size_t j = i;
    if (at(j) == ' ' && is_symbol(at(j + 1))) ++j;
    if (j >= s_.size() || !is_symbol(at(j))) return 0;
    while (j < s_.size() && is_symbol(at(j))) ++j;
    while (j < s_.size() && is_newline(at(j))) ++j;
    return j - i;
  }

  std::string_view s_;
};

std::string base64(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) |
                       (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

}  // namespace

const std::vector<NamedToken>& k3_named_tokens() {
  static const std::vector<NamedToken> kTokens = {
      {0, "[BOS]", true},
      {1, "[EOS]", true},
      {2, "<|end_of_msg|>", true},
      {3, "<|open|>", false},
      {4, "<|close|>", false},
      {5, "<|sep|>", false},
      {6, "[start_header_id]", true},
      {7, "[end_header_id]", true},
      {9, "[EOT]", true},
      {18, "<|media_begin|>", true},
      {19, "<|media_content|>", true},
      {20, "<|media_end|>", true},
      {21, "<|media_pad|>", true},
      {65, "<osagent_mode>", true},
      {254, "[UNK]", true},
      {255, "[PAD]", true},
  };
  return kTokens;
}

std::vector<unsigned char> byte_rank_order() {
  std::vector<unsigned char> order;
  std::vector<bool> used(256, false);
  auto take = [&](int lo, int hi) {
    for (int b = lo; b <= hi; ++b) {
      order.push_back(static_cast<unsigned char>(b));
      used[b] = true;
    }
  };
  take('!', '~');
  take(0xA1, 0xAC);
  take(0xAE, 0xFF);
  for (int b = 0; b < 256; ++b) {
    if (!used[b]) order.push_back(static_cast<unsigned char>(b));
  }
  return order;
}

bool is_text_byte_rank(int rank) {
  static const std::vector<bool> kText = [] {
    std::vector<bool> text(256);
    const std::vector<unsigned char> order = byte_rank_order();
    for (int r = 0; r < 256; ++r) {
      const unsigned char b = order[r];
      text[r] = (b >= ' ' && b <= '~') || b == '\t' || b == '\n';
    }
    return text;
  }();
  return rank >= 0 && rank < 256 && kText[rank];
}

std::vector<std::string_view> pretokenize_ascii(std::string_view text) {
  Splitter splitter(text);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < text.size();) {
    const size_t n = splitter.piece_length(i);
    pieces.push_back(text.substr(i, n));
    i += n;
  }
  return pieces;
}

std::vector<std::string> train_bpe(std::string_view text, int n_tokens) {
  return train_bpe_pieces(pretokenize_ascii(text), n_tokens).tokens;
}

BpeVocab train_bpe_pieces(const std::vector<std::string_view>& pieces, int n_tokens) {
  BpeVocab result;
  std::vector<std::string>& tokens = result.tokens;
  std::map<std::string, int> rank_of;
  int byte_rank[256];
  for (unsigned char b : byte_rank_order()) {
    byte_rank[b] = static_cast<int>(tokens.size());
    rank_of[std::string(1, static_cast<char>(b))] = byte_rank[b];
    tokens.emplace_back(1, static_cast<char>(b));
  }
  std::map<std::string_view, int64_t> piece_counts;
  for (std::string_view piece : pieces) ++piece_counts[piece];
  struct Word {
    std::vector<int> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [piece, count] : piece_counts) {
    Word w{{}, count};
    for (char c : piece) w.symbols.push_back(byte_rank[static_cast<unsigned char>(c)]);
    words.push_back(std::move(w));
  }

  while (static_cast<int>(tokens.size()) < n_tokens) {
    std::map<std::pair<int, int>, int64_t> pair_counts;
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        pair_counts[{w.symbols[i], w.symbols[i + 1]}] += w.count;
      }
    }
    if (pair_counts.empty()) {
      base::fail("synth: the built-in text yields only ", tokens.size(), " BPE tokens, ", n_tokens,
                 " wanted");
    }
    std::pair<int, int> best{};
    int64_t best_count = 0;
    for (const auto& [pair, count] : pair_counts) {  // ascending pairs: ties keep the smallest
      if (count > best_count) {
        best = pair;
        best_count = count;
      }
    }
    // Two different splits can spell the same bytes; then the merge reuses the existing rank.
    const std::string merged = tokens[best.first] + tokens[best.second];
    auto [it, inserted] = rank_of.emplace(merged, static_cast<int>(tokens.size()));
    if (inserted) tokens.push_back(merged);
    const int id = it->second;
    result.merges.push_back(best);
    for (Word& w : words) {
      size_t out = 0;
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == best.first &&
            w.symbols[i + 1] == best.second) {
          w.symbols[out++] = id;
          ++i;
        } else {
          w.symbols[out++] = w.symbols[i];
        }
      }
      w.symbols.resize(out);
    }
  }
  return result;
}

std::vector<std::string> synth_tokenizer_ranks(int base_vocab) {
  constexpr int kLearned = 768;
  std::vector<std::string> tokens = train_bpe(english_corpus(), std::min(base_vocab, kLearned));
  for (int len = 2; len <= 3 && static_cast<int>(tokens.size()) < base_vocab; ++len) {
    const int count = len == 2 ? 128 * 128 : 128 * 128 * 128;
    for (int i = 0; i < count && static_cast<int>(tokens.size()) < base_vocab; ++i) {
      std::string t;
      for (int k = len - 1; k >= 0; --k) t += static_cast<char>(0x80 + ((i >> (7 * k)) & 127));
      tokens.push_back(std::move(t));
    }
  }
  if (static_cast<int>(tokens.size()) != base_vocab) {
    base::fail("synth: cannot make a tokenizer of ", base_vocab, " ranks");
  }
  return tokens;
}

std::string tiktoken_model_text(const std::vector<std::string>& tokens) {
  std::string out;
  for (size_t rank = 0; rank < tokens.size(); ++rank) {
    out += base64(tokens[rank]);
    out += ' ';
    out += std::to_string(rank);
    out += '\n';
  }
  return out;
}

// The release file has no final newline (3,478 bytes for K3's ids).
std::string tokenizer_config_json(int base_vocab) {
  std::string out = "{\n  \"added_tokens_decoder\": {\n";
  const auto& named = k3_named_tokens();
  for (size_t i = 0; i < named.size(); ++i) {
    out += "    \"" + std::to_string(base_vocab + named[i].offset) + "\": {\n";
    out += "      \"content\": \"" + std::string(named[i].content) + "\",\n";
    out +=
        "      \"lstrip\": false,\n      \"normalized\": false,\n      \"rstrip\": false,\n"
        "      \"single_word\": false,\n";
    out += std::string("      \"special\": ") + (named[i].special ? "true" : "false") + "\n";
    out += i + 1 < named.size() ? "    },\n" : "    }\n";
  }
  out += R"(  },
  "additional_special_tokens": [
    "<|end_of_msg|>",
    "[start_header_id]",
    "[end_header_id]",
    "[EOT]",
    "<|media_begin|>",
    "<|media_content|>",
    "<|media_end|>",
    "<|media_pad|>",
    "<osagent_mode>"
  ],
  "bos_token": "[BOS]",
  "clean_up_tokenization_spaces": false,
  "eos_token": "[EOS]",
  "extra_special_tokens": {},
  "model_max_length": 1000000000000000019884624838656,
  "pad_token": "[PAD]",
  "tokenizer_class": "TikTokenTokenizer",
  "unk_token": "[UNK]",
  "auto_map": {
    "AutoTokenizer": [
      "tokenization_kimi.TikTokenTokenizer",
      null
    ]
  }
})";
  return out;
}

}  // namespace deltafin::synth
