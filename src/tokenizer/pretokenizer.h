// Splitting text into the pieces BPE runs on: the tiktoken-style regex of each supported pattern,
// compiled for PCRE2 (UTF, Unicode properties, JIT), and Kimi's slicing of long inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace deltafin::tokenizer {

enum class Pattern { kKimi, kO200k, kCl100k };

// "kimi", "o200k", "cl100k" (base::Error for anything else).
Pattern parse_pattern(std::string_view name);
const char* pattern_name(Pattern pattern);

// The pattern as its owners publish it (Rust regex syntax, `&&` intersections), for documentation
// and for tools that compare against an independent engine.
const char* original_pattern(Pattern pattern);
// The PCRE2 rewrite that matches exactly the same pieces (docs/TOKENIZER.md explains each change).
std::string pcre2_pattern(Pattern pattern);

class PieceSplitter {
 public:
  // An empty splitter (split() must not be called): a placeholder for tokenizers that do not
  // split with one of the patterns above.
  PieceSplitter();
  explicit PieceSplitter(Pattern pattern);
  // Any PCRE2 pattern (compiled with UTF and UCP, JIT where available); `name` labels errors.
  PieceSplitter(std::string_view pcre2_source, std::string_view name);
  ~PieceSplitter();
  PieceSplitter(PieceSplitter&&) noexcept;
  PieceSplitter& operator=(PieceSplitter&&) noexcept;

  // Calls fn(piece) for each regex match in `text`, which must be valid UTF-8, in order. Any
  // text the regex skipped would be dropped, as in tiktoken; the supported patterns match every
  // character.
  void split(std::string_view text, const std::function<void(std::string_view)>& fn) const;
  // Like split, but the text between matches comes out as pieces too (Hugging Face's Split with
  // behavior "Isolated"), so the pieces always concatenate to `text`.
  void split_isolated(std::string_view text, const std::function<void(std::string_view)>& fn) const;

 private:
  struct Compiled;
  void compile(const std::string& source, std::string_view name);
  void each_match(std::string_view text, bool with_gaps,
                  const std::function<void(std::string_view)>& fn) const;
  std::unique_ptr<Compiled> compiled_;
};

// tokenization_kimi.py's guard for long inputs, applied before the regex: cut the text into
// slices of 400,000 characters, then cut each slice wherever a run of whitespace (str.isspace) or
// of non-whitespace would exceed 25,000 characters. Characters are code points; a byte that is not
// valid UTF-8 counts as one non-whitespace character. Calls fn for each resulting substring.
void kimi_slices(std::string_view text, const std::function<void(std::string_view)>& fn);

inline constexpr size_t kKimiMaxEncodeChars = 400'000;
inline constexpr size_t kKimiMaxRunChars = 25'000;

}  // namespace deltafin::tokenizer
