// Pre-tokenizer regexes and Kimi's long-input slicing (see pretokenizer.h, docs/TOKENIZER.md).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace deltafin::tokenizer {
namespace {

// The published patterns, verbatim (one alternative per line for reading).
constexpr const char* kKimiOriginal =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

constexpr const char* kO200kOriginal =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n/]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

constexpr const char* kCl100kOriginal = R"((?i:'s|'t|'re|'ve|'m|'ll|'d))"
                                        R"(|[^\r\n\p{L}\p{N}]?\p{L}+)"
                                        R"(|\p{N}{1,3})"
                                        R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
                                        R"(|\s*[\r\n]+)"
                                        R"(|\s+(?!\S))"
                                        R"(|\s+)";

// Unicode White_Space, which is what `\s` means in Rust's regex crate. PCRE2's `\s` under UCP is
// \p{Z} plus \h and \v, and \h still lists U+180E, which left White_Space in Unicode 6.3.
constexpr const char* kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string build_pcre2(Pattern pattern) {
  const std::string ws = kWhiteSpace;
  const std::string s = "[" + ws + "]";
  const std::string not_s = "[^" + ws + "]";
  const std::string punct = "[^" + ws + R"(\p{L}\p{N}])";
  const std::string contractions = R"((?i:'s|'t|'re|'ve|'m|'ll|'d))";
  const std::string tail = "|" + s + "*[\\r\\n]+|" + s + "+(?!" + not_s + ")|" + s + "+";
  switch (pattern) {
    case Pattern::kKimi: {
      // `[X&&[^\p{Han}]]` (class intersection, which PCRE2 10.42 lacks) becomes "a character that
      // is not Han, then X". `\p{Han}` must be the Script property: PCRE2 >= 10.40 reads a bare
      // script name as Script_Extensions, which would also exclude e.g. U+3001 and U+30FC.
      const std::string upper = R"((?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]))";
      const std::string lower = R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}]))";
      return R"([\p{sc:Han}]+|[^\r\n\p{L}\p{N}]?)" + upper + "*" + lower + "+" + contractions +
             R"(?|[^\r\n\p{L}\p{N}]?)" + upper + "+" + lower + "*" + contractions +
             R"(?|\p{N}{1,3}| ?)" + punct + "+[\\r\\n]*" + tail;
    }
    case Pattern::kO200k:
      return R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" +
             contractions + R"(?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+)" +
             R"([\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" + contractions + R"(?|\p{N}{1,3}| ?)" + punct +
             "+[\\r\\n/]*" + tail;
    case Pattern::kCl100k:
      return contractions + R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?)" + punct + "+[\\r\\n]*" +
             tail;
  }
  return {};
}

// Per-thread match state: PCRE2 match data is not shareable between concurrent matches, and the
// JIT stack must be large enough for Kimi's lookahead-per-letter groups on 25,000-letter runs.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    DF_ASSERT(data && context && jit_stack);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
    pcre2_set_heap_limit(context, 1024 * 1024);  // KiB, for the interpreter when JIT is missing
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

Pattern parse_pattern(std::string_view name) {
  if (name == "kimi") return Pattern::kKimi;
  if (name == "o200k") return Pattern::kO200k;
  if (name == "cl100k") return Pattern::kCl100k;
  base::fail("unknown tokenizer pattern '", name, "', expected kimi, o200k or cl100k");
}

const char* pattern_name(Pattern pattern) {
  switch (pattern) {
    case Pattern::kKimi:
      return "kimi";
    case Pattern::kO200k:
      return "o200k";
    case Pattern::kCl100k:
      return "cl100k";
  }
  return "?";
}

const char* original_pattern(Pattern pattern) {
  switch (pattern) {
    case Pattern::kKimi:
      return kKimiOriginal;
    case Pattern::kO200k:
      return kO200kOriginal;
    case Pattern::kCl100k:
      return kCl100kOriginal;
  }
  return "";
}

std::string pcre2_pattern(Pattern pattern) { return build_pcre2(pattern); }

struct PieceSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

PieceSplitter::PieceSplitter() = default;

PieceSplitter::PieceSplitter(Pattern pattern) {
  compile(build_pcre2(pattern), pattern_name(pattern));
}

PieceSplitter::PieceSplitter(std::string_view pcre2_source, std::string_view name) {
  compile(std::string(pcre2_source), name);
}

void PieceSplitter::compile(const std::string& source, std::string_view name) {
  compiled_ = std::make_unique<Compiled>();
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    base::fail("pre-tokenizer pattern ", name, " does not compile at offset ", offset, ": ",
               reinterpret_cast<const char*>(message));
  }
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

PieceSplitter::~PieceSplitter() = default;
PieceSplitter::PieceSplitter(PieceSplitter&&) noexcept = default;
PieceSplitter& PieceSplitter::operator=(PieceSplitter&&) noexcept = default;

void PieceSplitter::each_match(std::string_view text, bool with_gaps,
                               const std::function<void(std::string_view)>& fn) const {
  DF_ASSERT(compiled_);
  MatchState& state = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  size_t pos = 0;
  size_t gap_start = 0;  // end of the previous match
  while (pos < text.size()) {
    const int rc = compiled_->jit ? pcre2_jit_match(compiled_->code, subject, text.size(), pos, 0,
                                                    state.data, state.context)
                                  : pcre2_match(compiled_->code, subject, text.size(), pos,
                                                PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      base::fail("pre-tokenizer failed at byte ", pos, ": ",
                 reinterpret_cast<const char*>(message));
    }
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {  // no supported pattern matches empty; step over one character anyway
      const size_t len = utf8::sequence_length(text, begin);
      pos = begin + (len > 0 ? len : 1);
      continue;
    }
    if (with_gaps && begin > gap_start) fn(text.substr(gap_start, begin - gap_start));
    fn(text.substr(begin, end - begin));
    pos = gap_start = end;
  }
  if (with_gaps && text.size() > gap_start) fn(text.substr(gap_start));
}

void PieceSplitter::split(std::string_view text,
                          const std::function<void(std::string_view)>& fn) const {
  each_match(text, /*with_gaps=*/false, fn);
}

void PieceSplitter::split_isolated(std::string_view text,
                                   const std::function<void(std::string_view)>& fn) const {
  each_match(text, /*with_gaps=*/true, fn);
}

void kimi_slices(std::string_view text, const std::function<void(std::string_view)>& fn) {
  size_t i = 0;
  while (i < text.size()) {
    // One 400,000-character slice, cut further at over-long runs.
    size_t slice_start = i;
    size_t n_chars = 0;
    bool run_is_space = false;
    size_t run_chars = 0;
    while (i < text.size() && n_chars < kKimiMaxEncodeChars) {
      const size_t len = utf8::sequence_length(text, i);
      const bool is_space = len > 0 && utf8::python_isspace(utf8::decode_at(text, i, len));
      if (n_chars == 0 || is_space != run_is_space) {
        run_is_space = is_space;
        run_chars = 1;
      } else if (++run_chars > kKimiMaxRunChars) {
        fn(text.substr(slice_start, i - slice_start));
        slice_start = i;
        run_chars = 1;
      }
      i += len > 0 ? len : 1;
      ++n_chars;
    }
    fn(text.substr(slice_start, i - slice_start));
  }
}

}  // namespace deltafin::tokenizer
