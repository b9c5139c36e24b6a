// Python-compatible JSON text and scalar formatting (see py_json.h).
#include "chat/py_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace deltafin::chat {
namespace {

// Python's recursion limit stops json.dumps near this depth too; it also bounds our stack use.
constexpr int kMaxDepth = 900;

// repr(float): the shortest digits that round-trip, in positional notation when the decimal
// exponent is in [-4, 16), otherwise as d.ddde+XX with at least two exponent digits.
std::string py_float_repr(double v) {
  if (std::isnan(v)) return "NaN";  // json.dumps spelling; JSON input cannot carry these
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // [-]d[.ddd]e(+|-)XX
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int n_digits = static_cast<int>(digits.size());
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (n_digits > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  if (n_digits <= exponent + 1)
    return sign + digits + std::string(exponent + 1 - n_digits, '0') + ".0";
  return sign + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void dump(const Json& v, bool compact, std::string& out, int depth) {
  if (depth > kMaxDepth) base::fail("JSON value nested deeper than ", kMaxDepth, " levels");
  const char* item_sep = compact ? "," : ", ";
  const char* key_sep = compact ? ":" : ": ";
  switch (v.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += item_sep;
        first = false;
        dump_string(key, out);
        out += key_sep;
        dump(item, compact, out, depth + 1);
      }
      out += '}';
      break;
    }
    case Json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += item_sep;
        dump(v[i], compact, out, depth + 1);
      }
      out += ']';
      break;
    }
    case Json::value_t::string:
      dump_string(v.get_ref<const std::string&>(), out);
      break;
    case Json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      break;
    case Json::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      break;
    case Json::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      break;
    case Json::value_t::number_float:
      out += py_float_repr(v.get<double>());
      break;
    default:  // null (and discarded, which parsing never yields)
      out += "null";
  }
}

}  // namespace

std::string py_json_dumps(const Json& value, bool compact) {
  std::string out;
  dump(value, compact, out, 0);
  return out;
}

std::optional<std::string> py_str(const Json& value) {
  switch (value.type()) {
    case Json::value_t::string:
      return value.get<std::string>();
    case Json::value_t::boolean:
      return std::string(value.get<bool>() ? "True" : "False");
    case Json::value_t::null:
      return std::string("None");
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return py_json_dumps(value, true);
    default:
      return std::nullopt;
  }
}

bool py_truthy(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return value.get<bool>();
    case Json::value_t::number_integer:
      return value.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return value.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return value.get<double>() != 0.0;
    case Json::value_t::string:
    case Json::value_t::array:
    case Json::value_t::object:
      return !value.empty() && !(value.is_string() && value.get_ref<const std::string&>().empty());
    default:
      return false;
  }
}

namespace {

// Byte offsets of the first and one-past-last character that is not str.isspace().
std::pair<size_t, size_t> non_space_span(const std::string& text) {
  size_t first = text.size();
  size_t last = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t len = tokenizer::utf8::sequence_length(text, i);
    bool space = false;
    if (len == 0) {
      len = 1;
    } else {
      space = tokenizer::utf8::python_isspace(tokenizer::utf8::decode_at(text, i, len));
    }
    if (!space) {
      first = std::min(first, i);
      last = i + len;
    }
    i += len;
  }
  return {first, last};
}

}  // namespace

bool py_is_blank(const std::string& text) { return non_space_span(text).first == text.size(); }

std::string py_strip(const std::string& text) {
  const auto [first, last] = non_space_span(text);
  if (first >= last) return {};
  return text.substr(first, last - first);
}

namespace {

Json deep_sort_at(const Json& value, int depth) {
  if (depth > kMaxDepth) base::fail("JSON value nested deeper than ", kMaxDepth, " levels");
  if (value.is_object()) {
    std::vector<std::pair<std::string, const Json*>> items;
    for (const auto& [key, item] : value.items()) items.emplace_back(key, &item);
    // Byte order of UTF-8 is code point order, which is how Python sorts str keys.
    std::sort(items.begin(), items.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    Json out = Json::object();
    for (const auto& [key, item] : items) out.emplace(key, deep_sort_at(*item, depth + 1));
    return out;
  }
  if (value.is_array()) {
    Json out = Json::array();
    for (const auto& item : value) out.push_back(deep_sort_at(item, depth + 1));
    return out;
  }
  return value;
}

}  // namespace

Json deep_sort(const Json& value) { return deep_sort_at(value, 0); }

}  // namespace deltafin::chat
