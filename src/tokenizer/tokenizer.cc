// Tokenizer loading, encoding and decoding (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <charconv>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/utf8.h"

namespace deltafin::tokenizer {
namespace {

constexpr int32_t kKimiReservedSpecials = 256;

std::map<int32_t, std::string> read_added_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) base::fail("cannot open tokenizer config ", path);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    base::fail("file ", path, ": not valid JSON: ", e.what());
  }
  std::map<int32_t, std::string> names;
  if (!config.is_object() || !config.contains("added_tokens_decoder")) return names;
  const auto& decoder = config["added_tokens_decoder"];
  if (!decoder.is_object()) base::fail("file ", path, ": added_tokens_decoder is not an object");
  for (const auto& [key, entry] : decoder.items()) {
    int32_t id = -1;
    const auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || ptr != key.data() + key.size() || id < 0) {
      base::fail("file ", path, ": added_tokens_decoder key '", key, "' is not a token id");
    }
    if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string()) {
      base::fail("file ", path, ": added_tokens_decoder[", key, "] has no string 'content'");
    }
    names[id] = entry["content"].get<std::string>();
  }
  return names;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab, Pattern pattern)
    : vocab_(std::move(vocab)), pattern_(pattern), splitter_(pattern) {
  vocab_size_ = vocab_.size();
}

Tokenizer::Tokenizer(std::shared_ptr<const HfTokenizer> hf)
    : pattern_(Pattern::kCl100k), hf_(std::move(hf)) {
  vocab_size_ = hf_->vocab_size();
  for (const HfAddedToken& a : hf_->added_tokens()) {
    if (!a.special) continue;
    specials_by_name_.emplace(a.content, a.id);
    specials_by_id_.emplace(a.id, a.content);
  }
}

Tokenizer Tokenizer::load_hf_json(const std::string& path) {
  return Tokenizer(std::make_shared<const HfTokenizer>(HfTokenizer::load(path)));
}

Tokenizer Tokenizer::from_hf_json(std::string_view json_text, const std::string& source) {
  return Tokenizer(std::make_shared<const HfTokenizer>(HfTokenizer::from_json(json_text, source)));
}

Tokenizer load_hf_tokenizer(const std::string& path) { return Tokenizer::load_hf_json(path); }

const char* Tokenizer::kind_name() const { return hf_ ? "tokenizer.json" : pattern_name(pattern_); }

void Tokenizer::add_special(const std::string& name, int32_t id, const std::string& source) {
  if (name.empty()) base::fail(source, ": special token ", id, " has an empty name");
  if (id < vocab_.size() && vocab_.has(id)) {
    base::fail(source, ": special token ", name, " has id ", id, ", which the vocabulary uses");
  }
  if (specials_by_id_.count(id)) base::fail(source, ": special id ", id, " is named twice");
  if (!specials_by_name_.emplace(name, id).second) {
    base::fail(source, ": special token name ", name, " is used twice");
  }
  specials_by_id_.emplace(id, name);
  special_first_byte_[static_cast<uint8_t>(name[0])] = true;
  if (std::find(special_lengths_.begin(), special_lengths_.end(), name.size()) ==
      special_lengths_.end()) {
    special_lengths_.push_back(name.size());
    std::sort(special_lengths_.rbegin(), special_lengths_.rend());
  }
  vocab_size_ = std::max(vocab_size_, id + 1);
}

Tokenizer Tokenizer::from_parts(std::vector<std::string> tokens, Pattern pattern,
                                const std::map<std::string, int32_t>& specials,
                                int32_t n_reserved) {
  Tokenizer t(Vocab::from_tokens(std::move(tokens), "in-memory vocabulary"), pattern);
  std::map<int32_t, std::string> by_id;
  for (const auto& [name, id] : specials) by_id[id] = name;
  const int32_t base = t.vocab_.size();
  for (int32_t id = base; id < base + n_reserved; ++id) {
    if (!by_id.count(id)) by_id[id] = "<|reserved_token_" + std::to_string(id) + "|>";
  }
  for (const auto& [id, name] : by_id) t.add_special(name, id, "in-memory vocabulary");
  return t;
}

Tokenizer Tokenizer::load(const std::string& vocab_path, Pattern pattern,
                          const std::string& special_config) {
  Tokenizer t(Vocab::load_tiktoken_file(vocab_path), pattern);
  std::map<int32_t, std::string> by_id;
  if (!special_config.empty()) by_id = read_added_tokens(special_config);
  const int32_t base = t.vocab_.size();
  const int32_t n_reserved = pattern == Pattern::kKimi ? kKimiReservedSpecials : 0;
  for (int32_t id = base; id < base + n_reserved; ++id) {
    if (!by_id.count(id)) by_id[id] = "<|reserved_token_" + std::to_string(id) + "|>";
  }
  const std::string source = special_config.empty() ? vocab_path : "file " + special_config;
  for (const auto& [id, name] : by_id) t.add_special(name, id, source);
  return t;
}

void Tokenizer::encode_chunk(std::string_view text, std::vector<int32_t>& out) const {
  utf8::for_each_valid_run(
      text,
      [&](std::string_view run) {
        splitter_.split(run, [&](std::string_view piece) { byte_pair_encode(vocab_, piece, out); });
      },
      [&](uint8_t byte) { out.push_back(static_cast<int32_t>(vocab_.byte_rank(byte))); });
}

void Tokenizer::encode_ordinary_into(std::string_view text, std::vector<int32_t>& out) const {
  if (hf_) return hf_->encode_into(text, /*allow_special=*/false, out);
  if (pattern_ == Pattern::kKimi) {
    kimi_slices(text, [&](std::string_view slice) { encode_chunk(slice, out); });
  } else {
    encode_chunk(text, out);
  }
}

void Tokenizer::encode_markup_chunk(std::string_view text, std::vector<int32_t>& out) const {
  size_t plain_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!special_first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    bool matched = false;
    for (const size_t len : special_lengths_) {
      if (len > text.size() - i) continue;
      const auto it = specials_by_name_.find(text.substr(i, len));
      if (it == specials_by_name_.end()) continue;
      encode_chunk(text.substr(plain_start, i - plain_start), out);
      out.push_back(it->second);
      i += len;
      plain_start = i;
      matched = true;
      break;
    }
    if (!matched) ++i;
  }
  encode_chunk(text.substr(plain_start), out);
}

void Tokenizer::encode_markup_into(std::string_view text, std::vector<int32_t>& out) const {
  if (hf_) return hf_->encode_into(text, /*allow_special=*/true, out);
  // tokenization_kimi.py slices before tiktoken looks for specials, so a special cut by a slice
  // boundary stays text there too.
  if (pattern_ == Pattern::kKimi) {
    kimi_slices(text, [&](std::string_view slice) { encode_markup_chunk(slice, out); });
  } else {
    encode_markup_chunk(text, out);
  }
}

std::vector<int32_t> Tokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  encode_ordinary_into(text, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_markup(std::string_view text) const {
  std::vector<int32_t> out;
  encode_markup_into(text, out);
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (hf_) return hf_->token_bytes(id);
  if (vocab_.has(id)) return vocab_.bytes(id);
  const auto it = specials_by_id_.find(id);
  if (it != specials_by_id_.end()) return it->second;
  base::fail("token id ", id, " is outside the vocabulary (size ", vocab_size_, ")");
}

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) out += token_bytes(id);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  utf8::decode_replace(decode_bytes(ids), out, /*final=*/true);
  return out;
}

std::optional<int32_t> Tokenizer::special_id(std::string_view name) const {
  const auto it = specials_by_name_.find(name);
  if (it == specials_by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Tokenizer::pieces(Pattern pattern, std::string_view text) {
  const PieceSplitter splitter(pattern);
  std::vector<std::string> out;
  const auto chunk = [&](std::string_view slice) {
    utf8::for_each_valid_run(
        slice,
        [&](std::string_view run) {
          splitter.split(run, [&](std::string_view piece) { out.emplace_back(piece); });
        },
        [&](uint8_t byte) { out.emplace_back(1, static_cast<char>(byte)); });
  };
  if (pattern == Pattern::kKimi) {
    kimi_slices(text, chunk);
  } else {
    chunk(text);
  }
  return out;
}

std::vector<std::string> Tokenizer::pieces(std::string_view text) const {
  if (hf_) return hf_->pieces(text);
  return pieces(pattern_, text);
}

std::string StreamingDecoder::push_bytes(std::string_view bytes) {
  pending_ += bytes;
  std::string out;
  const size_t consumed = utf8::decode_replace(pending_, out, /*final=*/false);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamingDecoder::push(int32_t id) { return push_bytes(tokenizer_->token_bytes(id)); }

std::string StreamingDecoder::flush() {
  std::string out;
  utf8::decode_replace(pending_, out, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace deltafin::tokenizer
