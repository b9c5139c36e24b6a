// Hugging Face byte-level BPE tokenizer (see hf_tokenizer.h).
#include "tokenizer/hf_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace deltafin::tokenizer {
namespace {

// Hugging Face's ByteLevel decoder: a token whose characters are all in the byte-level alphabet
// becomes those bytes; any other token is kept as its UTF-8 text.
std::string byte_level_decode(const std::string& text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = utf8::sequence_length(text, i);
    const int b = len ? byte_of_char(utf8::decode_at(text, i, len)) : -1;
    if (b < 0) return text;
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return out;
}

}  // namespace

HfTokenizer HfTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) base::fail("cannot open tokenizer file ", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return from_json(text, path);
}

HfTokenizer HfTokenizer::from_json(std::string_view json_text, const std::string& source) {
  HfSpec spec = parse_hf_tokenizer_json(json_text, source);
  HfTokenizer t;
  t.bpe_ = MergeBpe(spec.byte_ids, spec.merges);
  std::copy(std::begin(spec.byte_ids), std::end(spec.byte_ids), t.byte_ids_);
  t.nfc_ = spec.nfc;
  t.ignore_merges_ = spec.ignore_merges;
  t.bytes_ = std::move(spec.token_bytes);
  if (t.ignore_merges_) {
    for (size_t id = 0; id < t.bytes_.size(); ++id) {
      if (!t.bytes_[id].empty()) t.whole_.emplace(t.bytes_[id], static_cast<int32_t>(id));
    }
  }
  for (size_t i = 0; i < spec.splits.size(); ++i) {
    t.splitters_.emplace_back(spec.splits[i].pcre2,
                              source + " pre_tokenizer Split " + std::to_string(i));
  }
  for (const HfAddedToken& a : spec.added) {
    const std::string rendered = byte_level_decode(a.content);
    if (static_cast<size_t>(a.id) >= t.bytes_.size()) t.bytes_.resize(a.id + 1);
    // An added token may reuse a vocabulary id only for the same text (then it is that token).
    if (!t.bytes_[a.id].empty() && t.bytes_[a.id] != rendered) {
      base::fail(source, ": added token \"", a.content, "\" has id ", a.id,
                 ", which model.vocab gives to another token");
    }
    t.bytes_[a.id] = rendered;
    t.added_by_content_.emplace(a.content, t.added_.size());
    t.added_.push_back(a);
    t.added_first_byte_[static_cast<uint8_t>(a.content[0])] = true;
    if (std::find(t.added_lengths_.begin(), t.added_lengths_.end(), a.content.size()) ==
        t.added_lengths_.end()) {
      t.added_lengths_.push_back(a.content.size());
    }
  }
  std::sort(t.added_lengths_.rbegin(), t.added_lengths_.rend());
  return t;
}

std::string HfTokenizer::normalize(std::string_view valid_utf8) const {
  if (!nfc_ || valid_utf8.empty()) return std::string(valid_utf8);
  if (std::all_of(valid_utf8.begin(), valid_utf8.end(),
                  [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(valid_utf8);  // ASCII is always NFC
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid_utf8.data()),
                   static_cast<utf8proc_ssize_t>(valid_utf8.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) base::fail("NFC normalization failed: ", utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
  return out;
}

template <typename Fn>
void HfTokenizer::for_each_piece(std::string_view valid_utf8, Fn fn) const {
  const std::string normalized = normalize(valid_utf8);
  std::vector<std::string_view> pieces{normalized};
  std::vector<std::string_view> next;
  for (const PieceSplitter& splitter : splitters_) {
    next.clear();
    for (const std::string_view piece : pieces) {
      splitter.split_isolated(piece, [&](std::string_view p) { next.push_back(p); });
    }
    pieces.swap(next);
  }
  for (const std::string_view piece : pieces) fn(piece);
}

void HfTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  utf8::for_each_valid_run(
      text,
      [&](std::string_view run) {
        for_each_piece(run, [&](std::string_view piece) {
          if (ignore_merges_) {
            const auto it = whole_.find(std::string(piece));
            if (it != whole_.end()) {
              out.push_back(it->second);
              return;
            }
          }
          bpe_.encode(piece, out);
        });
      },
      [&](uint8_t byte) { out.push_back(byte_ids_[byte]); });
}

void HfTokenizer::encode_into(std::string_view text, bool allow_special,
                              std::vector<int32_t>& out) const {
  size_t plain_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!added_first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    bool matched = false;
    for (const size_t len : added_lengths_) {
      if (len > text.size() - i) continue;
      const auto it = added_by_content_.find(std::string(text.substr(i, len)));
      if (it == added_by_content_.end()) continue;
      const HfAddedToken& a = added_[it->second];
      if (a.special && !allow_special) continue;
      encode_plain(text.substr(plain_start, i - plain_start), out);
      out.push_back(a.id);
      i += len;
      plain_start = i;
      matched = true;
      break;
    }
    if (!matched) ++i;
  }
  encode_plain(text.substr(plain_start), out);
}

std::string_view HfTokenizer::token_bytes(int32_t id) const {
  if (id >= 0 && static_cast<size_t>(id) < bytes_.size() && !bytes_[id].empty()) return bytes_[id];
  base::fail("token id ", id, " is outside the vocabulary (size ", bytes_.size(), ")");
}

std::optional<int32_t> HfTokenizer::added_token_id(std::string_view content) const {
  const auto it = added_by_content_.find(std::string(content));
  if (it == added_by_content_.end()) return std::nullopt;
  return added_[it->second].id;
}

std::vector<std::string> HfTokenizer::pieces(std::string_view text) const {
  std::vector<std::string> out;
  utf8::for_each_valid_run(
      text,
      [&](std::string_view run) {
        for_each_piece(run, [&](std::string_view p) { out.emplace_back(p); });
      },
      [&](uint8_t byte) { out.emplace_back(1, static_cast<char>(byte)); });
  return out;
}

}  // namespace deltafin::tokenizer
