// The strict JSON pull reader: grammar, escapes, UTF-8 validation and error positions.
#include "format/json_reader.h"

#include "base/error.h"

namespace deltafin::format::detail {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Length of the well-formed UTF-8 sequence at s[0..n) (Unicode table 3-7), or 0.
size_t utf8_sequence_length(const unsigned char* s, size_t n) {
  const unsigned char c = s[0];
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && s[i] >= lo && s[i] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

}  // namespace

const char* JsonReader::type_name(Type type) {
  switch (type) {
    case Type::kObject:
      return "an object";
    case Type::kArray:
      return "an array";
    case Type::kString:
      return "a string";
    case Type::kNumber:
      return "a number";
    case Type::kBool:
      return "a boolean";
    case Type::kNull:
      return "null";
  }
  return "a value";
}

JsonReader::JsonReader(std::string_view text, std::string what)
    : text_(text), what_(std::move(what)) {}

void JsonReader::fail(const std::string& message) const {
  base::fail(what_, ": invalid JSON at byte ", pos_, ": ", message);
}

void JsonReader::skip_ws() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
    ++pos_;
  }
}

char JsonReader::next_char_or_fail(const char* expected) {
  skip_ws();
  if (pos_ >= text_.size()) fail(std::string("unexpected end of input, expected ") + expected);
  return text_[pos_];
}

void JsonReader::expect(char c) {
  const char expected[] = {'\'', c, '\'', '\0'};
  if (next_char_or_fail(expected) != c) fail(std::string("expected ") + expected);
  ++pos_;
}

JsonReader::Type JsonReader::peek() {
  switch (next_char_or_fail("a value")) {
    case '{':
      return Type::kObject;
    case '[':
      return Type::kArray;
    case '"':
      return Type::kString;
    case 't':
    case 'f':
      return Type::kBool;
    case 'n':
      return Type::kNull;
    default:
      if (text_[pos_] == '-' || is_digit(text_[pos_])) return Type::kNumber;
      fail("expected a value");
  }
}

void JsonReader::open_container(uint8_t kind_bit) {
  if (stack_.size() >= kMaxDepth) fail("nesting deeper than 256 levels");
  ++pos_;
  stack_.push_back(kFirstBit | kind_bit);
}

void JsonReader::begin_object() {
  if (peek() != Type::kObject) fail("expected an object");
  open_container(kObjectBit);
}

void JsonReader::begin_array() {
  if (peek() != Type::kArray) fail("expected an array");
  open_container(0);
}

bool JsonReader::next_key(std::string_view* key) {
  const char c = next_char_or_fail("'\"' or '}'");
  if (c == '}') {
    ++pos_;
    stack_.pop_back();
    return false;
  }
  if (!(stack_.back() & kFirstBit)) {
    if (c != ',') fail("expected ',' or '}'");
    ++pos_;
    if (next_char_or_fail("'\"'") != '"') fail("expected '\"' after ','");
  } else if (c != '"') {
    fail("expected '\"' or '}'");
  }
  stack_.back() &= ~kFirstBit;
  *key = read_string_into(key_scratch_);
  expect(':');
  return true;
}

bool JsonReader::next_element() {
  const char c = next_char_or_fail("a value or ']'");
  if (c == ']') {
    ++pos_;
    stack_.pop_back();
    return false;
  }
  if (!(stack_.back() & kFirstBit)) {
    if (c != ',') fail("expected ',' or ']'");
    ++pos_;
  }
  stack_.back() &= ~kFirstBit;
  return true;
}

std::string_view JsonReader::read_string() {
  if (peek() != Type::kString) fail("expected a string");
  return read_string_into(value_scratch_);
}

std::string_view JsonReader::read_string_into(std::string& scratch) {
  ++pos_;  // the opening quote
  const size_t start = pos_;
  // Fast path: printable ASCII without escapes is returned as a view into the input.
  while (pos_ < text_.size()) {
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') return text_.substr(start, pos_++ - start);
    if (c == '\\' || c < 0x20 || c >= 0x80) break;
    ++pos_;
  }
  scratch.assign(text_.data() + start, pos_ - start);
  while (true) {
    if (pos_ >= text_.size()) fail("unterminated string");
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return scratch;
    }
    if (c == '\\') {
      append_escape(scratch);
    } else if (c < 0x20) {
      fail("control character in a string");
    } else if (c < 0x80) {
      scratch += static_cast<char>(c);
      ++pos_;
    } else {
      const size_t n = utf8_sequence_length(
          reinterpret_cast<const unsigned char*>(text_.data()) + pos_, text_.size() - pos_);
      if (n == 0) fail("invalid UTF-8 in a string");
      scratch.append(text_.data() + pos_, n);
      pos_ += n;
    }
  }
}

void JsonReader::append_escape(std::string& out) {
  ++pos_;  // the backslash
  if (pos_ >= text_.size()) fail("unterminated string");
  const char c = text_[pos_++];
  switch (c) {
    case '"':
    case '\\':
    case '/':
      out += c;
      return;
    case 'b':
      out += '\b';
      return;
    case 'f':
      out += '\f';
      return;
    case 'n':
      out += '\n';
      return;
    case 'r':
      out += '\r';
      return;
    case 't':
      out += '\t';
      return;
    case 'u':
      break;
    default:
      fail("invalid escape in a string");
  }
  auto hex4 = [&]() {
    if (text_.size() - pos_ < 4) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex_value(text_[pos_++]);
      if (h < 0) fail("invalid \\u escape");
      v = v << 4 | static_cast<uint32_t>(h);
    }
    return v;
  };
  uint32_t cp = hex4();
  if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    if (text_.substr(pos_, 2) != "\\u") fail("high surrogate not followed by a low surrogate");
    pos_ += 2;
    const uint32_t lo = hex4();
    if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate not followed by a low surrogate");
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  append_utf8(out, cp);
}

std::string_view JsonReader::read_number() {
  if (peek() != Type::kNumber) fail("expected a number");
  const size_t start = pos_;
  auto digits = [&]() {
    const size_t from = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    return pos_ > from;
  };
  if (text_[pos_] == '-') ++pos_;
  if (pos_ < text_.size() && text_[pos_] == '0') {
    ++pos_;
  } else if (!digits()) {
    fail("invalid number");
  }
  if (pos_ < text_.size() && text_[pos_] == '.') {
    ++pos_;
    if (!digits()) fail("invalid number: no digits after '.'");
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (!digits()) fail("invalid number: no digits in the exponent");
  }
  return text_.substr(start, pos_ - start);
}

bool JsonReader::read_bool() {
  if (peek() != Type::kBool) fail("expected true or false");
  if (text_.substr(pos_, 4) == "true") {
    pos_ += 4;
    return true;
  }
  if (text_.substr(pos_, 5) == "false") {
    pos_ += 5;
    return false;
  }
  fail("invalid literal");
}

void JsonReader::read_null() {
  if (peek() != Type::kNull || text_.substr(pos_, 4) != "null") fail("invalid literal");
  pos_ += 4;
}

void JsonReader::skip_value() {
  // Iterative over containers, so nesting is bounded by kMaxDepth and not by the stack.
  const size_t base_depth = stack_.size();
  std::string_view key;
  while (true) {
    switch (peek()) {
      case Type::kObject:
        begin_object();
        break;
      case Type::kArray:
        begin_array();
        break;
      case Type::kString:
        read_string();
        break;
      case Type::kNumber:
        read_number();
        break;
      case Type::kBool:
        read_bool();
        break;
      case Type::kNull:
        read_null();
        break;
    }
    // A value ended (or a container opened): move to the next value inside the skipped part.
    while (stack_.size() > base_depth) {
      const bool more = (stack_.back() & kObjectBit) ? next_key(&key) : next_element();
      if (more) break;
    }
    if (stack_.size() == base_depth) return;
  }
}

void JsonReader::expect_end() {
  skip_ws();
  if (pos_ != text_.size()) fail("unexpected data after the end of the JSON value");
}

bool json_number_to_u64(std::string_view token, uint64_t* value) {
  if (token.empty() || (token.size() > 1 && token[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : token) {
    if (!is_digit(c)) return false;
    if (__builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v)) {
      return false;
    }
  }
  *value = v;
  return true;
}

}  // namespace deltafin::format::detail
