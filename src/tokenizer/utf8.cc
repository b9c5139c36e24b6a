// UTF-8 validation and Python-compatible lossy decoding (see utf8.h).
#include "tokenizer/utf8.h"

#include <cstdint>

namespace deltafin::tokenizer::utf8 {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// For a lead byte: how many bytes its sequence has (0 = never a lead byte) and the allowed range
// of the second byte, which is where overlongs, surrogates and values above U+10FFFF are excluded
// (Unicode Table 3-7, the same rule CPython's decoder applies).
struct Lead {
  int n_bytes;
  uint8_t second_lo;
  uint8_t second_hi;
};

Lead lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes at s[i] form a valid prefix of a sequence (>= 1 only for a valid lead byte), and
// the sequence's full length.
size_t valid_prefix(std::string_view s, size_t i, int* n_bytes) {
  const Lead lead = lead_info(static_cast<uint8_t>(s[i]));
  *n_bytes = lead.n_bytes;
  if (lead.n_bytes <= 1) return lead.n_bytes;
  size_t k = 1;
  for (; k < static_cast<size_t>(lead.n_bytes) && i + k < s.size(); ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    const uint8_t lo = k == 1 ? lead.second_lo : 0x80;
    const uint8_t hi = k == 1 ? lead.second_hi : 0xBF;
    if (b < lo || b > hi) break;
  }
  return k;
}

}  // namespace

size_t sequence_length(std::string_view s, size_t i) {
  int n_bytes = 0;
  const size_t k = valid_prefix(s, i, &n_bytes);
  return k == static_cast<size_t>(n_bytes) ? k : 0;
}

char32_t decode_at(std::string_view s, size_t i, size_t len) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = sequence_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

size_t decode_replace(std::string_view bytes, std::string& out, bool final) {
  size_t i = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes, copied in one append
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    int n_bytes = 0;
    const size_t k = valid_prefix(bytes, i, &n_bytes);
    if (n_bytes > 0 && k == static_cast<size_t>(n_bytes)) {
      i += k;
      continue;
    }
    out.append(bytes.data() + run_start, i - run_start);
    if (k > 0 && i + k == bytes.size() && !final) return i;  // may still complete
    out.append(kReplacement);
    i += k > 0 ? k : 1;
    run_start = i;
  }
  out.append(bytes.data() + run_start, i - run_start);
  return i;
}

bool python_isspace(char32_t c) {
  if (c <= 0x20) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  if (c < 0x85) return false;
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

}  // namespace deltafin::tokenizer::utf8
