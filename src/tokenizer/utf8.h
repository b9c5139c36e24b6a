// UTF-8 helpers the tokenizer needs to behave like Python's str: strict validation (what PCRE2
// accepts), decoding with errors="replace", and the code-point predicates tokenization_kimi.py
// uses.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace deltafin::tokenizer::utf8 {

// Length (1-4) of the well-formed UTF-8 sequence starting at s[i], or 0 when the bytes there are
// not one: a stray continuation byte, an overlong form, a surrogate, a value above U+10FFFF, or a
// sequence cut short by the end of `s`.
size_t sequence_length(std::string_view s, size_t i);

// The code point of the well-formed sequence of `len` bytes at s[i] (see sequence_length).
char32_t decode_at(std::string_view s, size_t i, size_t len);

bool is_valid(std::string_view s);

// Appends `bytes` decoded as Python's bytes.decode("utf-8", errors="replace") does: each maximal
// ill-formed subpart becomes one U+FFFD. With final=false it stops in front of a trailing sequence
// that is incomplete but could still become valid, and returns how many bytes it consumed, so a
// caller can hold those back until more bytes arrive. With final=true it consumes everything.
size_t decode_replace(std::string_view bytes, std::string& out, bool final);

// Calls on_valid(run) for each maximal run of valid UTF-8 in `text` and on_byte(b) for each byte
// outside one, in order (both tokenizers encode the runs and give the other bytes byte tokens).
template <typename OnValid, typename OnByte>
void for_each_valid_run(std::string_view text, OnValid on_valid, OnByte on_byte) {
  size_t run_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = sequence_length(text, i);
    if (len > 0) {
      i += len;
      continue;
    }
    if (i > run_start) on_valid(text.substr(run_start, i - run_start));
    on_byte(static_cast<unsigned char>(text[i]));
    run_start = ++i;
  }
  if (i > run_start) on_valid(text.substr(run_start, i - run_start));
}

// Python's str.isspace(): general category Zs or bidirectional class WS, B or S.
bool python_isspace(char32_t c);

}  // namespace deltafin::tokenizer::utf8
