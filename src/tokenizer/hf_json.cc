// tokenizer.json reader (see hf_json.h): vocabulary, merges, added tokens, normalizer and
// pre-tokenizer checks, and the Oniguruma-to-PCRE2 regex rewrite.
#include "tokenizer/hf_json.h"

#include <array>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace deltafin::tokenizer {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using Json = nlohmann::json;

// Unicode White_Space (what Oniguruma's `\s` matches in UTF-8 mode: 0009-000D, 0085 and the
// Zs/Zl/Zp categories), without U+180E, which PCRE2's `\s` still includes.
constexpr const char* kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

struct Alphabet {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};
  Alphabet() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the others get 256, 257, ... in byte order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

// Ids may leave gaps, but not so many that a small file could make the tables huge.
int64_t max_id(size_t n_tokens) { return 2 * static_cast<int64_t>(n_tokens) + 1024; }

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    base::fail(source_, ": ", args...);
  }

  const Json& field(const Json& obj, const char* key, const std::string& path) const {
    const auto it = obj.find(key);
    if (it == obj.end()) fail(path, ".", key, " is missing");
    return *it;
  }
  std::string string_field(const Json& obj, const char* key, const std::string& path) const {
    const Json& v = field(obj, key, path);
    if (!v.is_string()) fail(path, ".", key, " is not a string");
    return v.get<std::string>();
  }
  // A field that must be absent or equal one of the accepted values (the ones that do not
  // change ids).
  void require(const Json& obj, const char* key, const std::string& path,
               std::initializer_list<Json> accepted) const {
    const auto it = obj.find(key);
    if (it == obj.end()) return;
    for (const Json& a : accepted) {
      if (*it == a) return;
    }
    fail(path, ".", key, " = ", it->dump(), " is not supported");
  }
  void only_keys(const Json& obj, const std::string& path,
                 std::initializer_list<const char*> keys) const {
    if (!obj.is_object()) fail(path, " is not an object");
    for (const auto& [key, value] : obj.items()) {
      bool known = false;
      for (const char* k : keys) known = known || key == k;
      if (!known) fail(path, ".", key, " is not a supported field");
    }
  }

  // A vocabulary string in the byte-level alphabet, as bytes.
  std::string token_to_bytes(const std::string& token, const std::string& path) const {
    std::string out;
    size_t i = 0;
    while (i < token.size()) {
      const size_t len = utf8::sequence_length(token, i);
      const char32_t c = len ? utf8::decode_at(token, i, len) : 0xFFFFFFFF;
      const int b = byte_of_char(c);
      if (b < 0)
        fail(path, " token \"", token, "\" has a character outside the byte-level alphabet");
      out.push_back(static_cast<char>(b));
      i += len;
    }
    if (out.empty()) fail(path, " has an empty token");
    return out;
  }

  void read_model(const Json& model, HfSpec& spec) const {
    only_keys(model, "model",
              {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
               "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"});
    if (string_field(model, "type", "model") != "BPE") {
      fail("model.type '", model["type"].get<std::string>(), "' is not supported (only BPE)");
    }
    require(model, "dropout", "model", {nullptr});
    require(model, "unk_token", "model", {nullptr});
    require(model, "continuing_subword_prefix", "model", {nullptr, ""});
    require(model, "end_of_word_suffix", "model", {nullptr, ""});
    require(model, "fuse_unk", "model", {false});
    require(model, "byte_fallback", "model", {false});
    require(model, "ignore_merges", "model", {false, true});
    spec.ignore_merges = model.value("ignore_merges", false);

    const Json& vocab = field(model, "vocab", "model");
    if (!vocab.is_object()) fail("model.vocab is not an object");
    bool have_byte[256] = {};
    for (const auto& [token, value] : vocab.items()) {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() >= max_id(vocab.size())) {
        fail("model.vocab[\"", token, "\"] is not a token id below ", max_id(vocab.size()));
      }
      const auto id = value.get<int32_t>();
      if (static_cast<size_t>(id) >= spec.token_bytes.size()) spec.token_bytes.resize(id + 1);
      if (!spec.token_bytes[id].empty()) fail("model.vocab: id ", id, " is used twice");
      spec.token_bytes[id] = token_to_bytes(token, "model.vocab");
      if (spec.token_bytes[id].size() == 1)
        have_byte[static_cast<uint8_t>(spec.token_bytes[id][0])] = true;
    }
    for (int b = 0; b < 256; ++b) {
      if (!have_byte[b]) {
        std::string ch;
        utf8_append(byte_to_char(static_cast<uint8_t>(b)), ch);
        fail("model.vocab lacks the one-byte token for byte ", b, " (\"", ch, "\")");
      }
    }
    // The tiktoken vocabulary's hash table, over bytes, serves the merge lookups (the alphabet is
    // a bijection, so distinct token strings are distinct bytes).
    const Vocab ids = Vocab::from_tokens(spec.token_bytes, source_ + ": model.vocab");
    for (int b = 0; b < 256; ++b) spec.byte_ids[b] = static_cast<int32_t>(ids.byte_rank(b));

    const Json& merges = field(model, "merges", "model");
    if (!merges.is_array()) fail("model.merges is not an array");
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const Json& m = merges[i];
      const std::string path = "model.merges[" + std::to_string(i) + "]";
      std::string left, right;
      if (m.is_string()) {  // "a b"; byte-level tokens never contain a space
        const std::string& s = m.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          fail(path, " \"", s, "\" is not two tokens separated by one space");
        }
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        fail(path, " is neither \"a b\" nor [\"a\", \"b\"]");
      }
      const std::string left_bytes = token_to_bytes(left, path);
      const std::string right_bytes = token_to_bytes(right, path);
      const auto find = [&](const std::string& bytes, const std::string& token) {
        const Rank r = ids.find(bytes);
        if (r == kNoRank) fail(path, ": \"", token, "\" is not in model.vocab");
        return static_cast<int32_t>(r);
      };
      spec.merges.push_back({find(left_bytes, left), find(right_bytes, right),
                             find(left_bytes + right_bytes, left + right)});
    }
  }

  void read_added(const Json& added, HfSpec& spec) const {
    if (added.is_null()) return;
    if (!added.is_array()) fail("added_tokens is not an array");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      const Json& t = added[i];
      only_keys(t, path,
                {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
      const Json& id = field(t, "id", path);
      const int64_t limit = max_id(spec.token_bytes.size() + added.size());
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limit) {
        fail(path, ".id is not a token id below ", limit);
      }
      HfAddedToken token{string_field(t, "content", path), id.get<int32_t>(), false};
      if (token.content.empty()) fail(path, ".content is empty");
      if (!utf8::is_valid(token.content)) fail(path, ".content is not valid UTF-8");
      for (const char* key : {"single_word", "lstrip", "rstrip", "normalized"}) {
        require(t, key, path, {false});
      }
      const Json& special = field(t, "special", path);
      if (!special.is_boolean()) fail(path, ".special is not a boolean");
      token.special = special.get<bool>();
      for (const HfAddedToken& other : spec.added) {
        if (other.id == token.id) fail(path, ": id ", token.id, " is already added");
        if (other.content == token.content)
          fail(path, ": \"", token.content, "\" is already added");
      }
      spec.added.push_back(std::move(token));
    }
  }

  void read_normalizer(const Json& n, const std::string& path, HfSpec& spec) const {
    if (n.is_null()) return;
    if (!n.is_object()) fail(path, " is not an object");
    const std::string type = string_field(n, "type", path);
    if (type == "NFC") {
      only_keys(n, path, {"type"});
      spec.nfc = true;  // NFC is idempotent, so NFC twice is NFC once
    } else if (type == "Sequence") {
      only_keys(n, path, {"type", "normalizers"});
      const Json& list = field(n, "normalizers", path);
      if (!list.is_array()) fail(path, ".normalizers is not an array");
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string sub = path + ".normalizers[" + std::to_string(i) + "]";
        // Only NFC is supported, and NFC commutes with itself, so order cannot matter here.
        read_normalizer(list[i], sub, spec);
      }
    } else {
      fail(path, ".type '", type, "' is not supported (NFC or Sequence)");
    }
  }

  // bytelevel_seen: a ByteLevel stage was read; nothing may follow it (later stages would see the
  // mapped characters, which this tokenizer never materializes).
  void read_pre_tokenizer(const Json& p, const std::string& path, HfSpec& spec,
                          bool& bytelevel_seen) const {
    if (!p.is_object()) fail(path, " is not an object");
    const std::string type = string_field(p, "type", path);
    if (type != "Sequence" && bytelevel_seen) {
      fail(path, ": a pre-tokenizer after ByteLevel is not supported");
    }
    if (type == "Sequence") {
      only_keys(p, path, {"type", "pretokenizers"});
      const Json& list = field(p, "pretokenizers", path);
      if (!list.is_array()) fail(path, ".pretokenizers is not an array");
      for (size_t i = 0; i < list.size(); ++i) {
        read_pre_tokenizer(list[i], path + ".pretokenizers[" + std::to_string(i) + "]", spec,
                           bytelevel_seen);
      }
    } else if (type == "Split") {
      only_keys(p, path, {"type", "pattern", "behavior", "invert"});
      const Json& pattern = field(p, "pattern", path);
      HfSplitStage stage;
      if (pattern.is_object() && pattern.size() == 1 && pattern.contains("Regex") &&
          pattern["Regex"].is_string()) {
        stage.original = pattern["Regex"].get<std::string>();
        stage.pcre2 = hf_regex_to_pcre2(stage.original, source_ + ": " + path + ".pattern.Regex");
      } else if (pattern.is_object() && pattern.size() == 1 && pattern.contains("String") &&
                 pattern["String"].is_string() && !pattern["String"].get<std::string>().empty()) {
        stage.original = pattern["String"].get<std::string>();
        stage.pcre2 = "\\Q" + stage.original + "\\E";
        if (stage.original.find("\\E") != std::string::npos) {
          fail(path, ".pattern.String contains \\E, which is not supported");
        }
      } else {
        fail(path, ".pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
      }
      if (string_field(p, "behavior", path) != "Isolated") {
        fail(path, ".behavior '", p["behavior"].get<std::string>(),
             "' is not supported (Isolated)");
      }
      require(p, "invert", path, {false});
      spec.splits.push_back(std::move(stage));
    } else if (type == "ByteLevel") {
      only_keys(p, path, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
      require(p, "add_prefix_space", path, {false});
      if (p.value("use_regex", true)) {
        spec.splits.push_back({kGpt2Pattern, hf_regex_to_pcre2(kGpt2Pattern, "GPT-2 pattern")});
      }
      bytelevel_seen = true;
    } else {
      fail(path, ".type '", type, "' is not supported (Sequence, Split or ByteLevel)");
    }
  }

  // Stages that only touch offsets or decoding are accepted when they are ByteLevel.
  void require_byte_level(const Json& obj, const char* key, bool allow_null) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (allow_null) return;
      fail(key, " is missing; only ByteLevel is supported");
    }
    if (!it->is_object() || !it->contains("type") || (*it)["type"] != "ByteLevel") {
      fail(key, " = ", it->dump().substr(0, 200), " is not supported (only ByteLevel)");
    }
  }

  static void utf8_append(char32_t c, std::string& out) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }

 private:
  const std::string& source_;
};

}  // namespace

char32_t byte_to_char(uint8_t byte) { return alphabet().to_char[byte]; }

int byte_of_char(char32_t c) { return c < 512 ? alphabet().to_byte[c] : -1; }

std::string hf_regex_to_pcre2(std::string_view pattern, const std::string& where) {
  const std::string ws = kWhiteSpace;
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      if (i + 1 == pattern.size()) base::fail(where, ": the pattern ends in a backslash");
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? ws : "[" + ws + "]";
      } else if (e == 'S') {
        if (in_class) base::fail(where, ": \\S inside a character class is not supported");
        out += "[^" + ws + "]";
      } else if (std::string_view("wWbBhHXRKGzZA").find(e) != std::string_view::npos) {
        base::fail(where, ": \\", e,
                   " is not supported (its meaning differs between regex engines)");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal in both engines.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[') {
      base::fail(where, ": nested character classes are not supported");
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  if (in_class) base::fail(where, ": unterminated character class");
  return out;
}

HfSpec parse_hf_tokenizer_json(std::string_view json_text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {
    base::fail(source, ": not valid JSON: ", e.what());
  }
  const Reader r(source);
  r.only_keys(root, "tokenizer.json",
              {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
               "model", "post_processor", "decoder"});
  r.require(root, "truncation", "tokenizer.json", {nullptr});
  r.require(root, "padding", "tokenizer.json", {nullptr});
  HfSpec spec;
  r.read_model(r.field(root, "model", "tokenizer.json"), spec);
  r.read_added(root.value("added_tokens", Json()), spec);
  r.read_normalizer(root.value("normalizer", Json()), "normalizer", spec);
  bool bytelevel_seen = false;
  const Json pre = root.value("pre_tokenizer", Json());
  if (!pre.is_null()) r.read_pre_tokenizer(pre, "pre_tokenizer", spec, bytelevel_seen);
  if (!bytelevel_seen)
    r.fail("pre_tokenizer has no ByteLevel stage; only byte-level BPE is supported");
  r.require_byte_level(root, "post_processor", /*allow_null=*/true);
  r.require_byte_level(root, "decoder", /*allow_null=*/false);
  return spec;
}

}  // namespace deltafin::tokenizer
