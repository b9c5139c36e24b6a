// Pre-tokenizer splits against expectations computed with Python's `regex` module (V1, which
// implements the original `&&` syntax), and Kimi's long-input slicing.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deltafin::tokenizer {
namespace {

std::vector<std::string> split(Pattern pattern, const std::string& text) {
  return Tokenizer::pieces(pattern, text);
}

using Pieces = std::vector<std::string>;

TEST(Pretokenizer, EnglishContractionsAndWhitespace) {
  const std::string text = "Hello world's  test\n\n  x";
  const Pieces pieces = {"Hello", " world's", " ", " test", "\n\n", " ", " x"};
  EXPECT_EQ(split(Pattern::kKimi, text), pieces);
  EXPECT_EQ(split(Pattern::kO200k, text), pieces);
  EXPECT_EQ(split(Pattern::kCl100k, text),
            (Pieces{"Hello", " world", "'s", " ", " test", "\n\n", " ", " x"}));
  EXPECT_EQ(split(Pattern::kO200k, "I'M we're they'LL 1234567"),
            (Pieces{"I'M", " we're", " they'LL", " ", "123", "456", "7"}));
  EXPECT_EQ(split(Pattern::kCl100k, "I'M we're they'LL 1234567"),
            (Pieces{"I", "'M", " we", "'re", " they", "'LL", " ", "123", "456", "7"}));
}

TEST(Pretokenizer, KimiSeparatesHanFromOtherLetters) {
  EXPECT_EQ(split(Pattern::kKimi, "你好，世界！漢字"),
            (Pieces{"你好", "，", "世界", "！", "漢字"}));
  EXPECT_EQ(split(Pattern::kO200k, "你好，世界！漢字"), (Pieces{"你好", "，世界", "！漢字"}));
  EXPECT_EQ(split(Pattern::kKimi, "漢字abc日本DEF"), (Pieces{"漢字", "abc", "日本", "DEF"}));
  EXPECT_EQ(split(Pattern::kO200k, "漢字abc日本DEF"), (Pieces{"漢字abc日本", "DEF"}));
  EXPECT_EQ(split(Pattern::kCl100k, "漢字abc日本DEF"), (Pieces{"漢字abc日本DEF"}));
}

TEST(Pretokenizer, KimiHanIsTheScriptPropertyNotScriptExtensions) {
  // U+3001 and U+30FC list Han only in Script_Extensions, so they are not Han here: the comma is
  // a prefix of the katakana word and the prolonged sound mark stays inside it.
  EXPECT_EQ(split(Pattern::kKimi, "日本語のテキスト、カタカナー"),
            (Pieces{"日本語", "のテキスト", "、カタカナー"}));
}

TEST(Pretokenizer, WhitespaceIsUnicodeWhiteSpace) {
  // U+180E is not White_Space (PCRE2's \s would say it is); U+3000 and U+00A0 are.
  const Pieces pieces = {"a",
                         "\u180e"
                         "b",
                         "  ",
                         "\u3000"
                         "c"};
  EXPECT_EQ(split(Pattern::kKimi,
                  "a\u180e"
                  "b  \u3000"
                  "c"),
            pieces);
  EXPECT_EQ(split(Pattern::kO200k,
                  "a\u180e"
                  "b  \u3000"
                  "c"),
            pieces);
  EXPECT_EQ(split(Pattern::kKimi, "Tabs\tand\r\nlines\u00a0end"),
            (Pieces{"Tabs", "\tand", "\r\n", "lines", "\u00a0end"}));
}

TEST(Pretokenizer, CaseInsensitiveContractionsFoldLongS) {
  EXPECT_EQ(split(Pattern::kKimi, "it'\u017f ok"), (Pieces{"it'\u017f", " ok"}));
  EXPECT_EQ(split(Pattern::kCl100k, "it'\u017f ok"), (Pieces{"it", "'\u017f", " ok"}));
}

TEST(Pretokenizer, SlashOnlyJoinsPunctuationInO200k) {
  EXPECT_EQ(split(Pattern::kO200k, "x/y//z\n/"), (Pieces{"x", "/y", "//", "z", "\n", "/"}));
  EXPECT_EQ(split(Pattern::kO200k, "x.\n/y"), (Pieces{"x", ".\n/", "y"}));
  EXPECT_EQ(split(Pattern::kKimi, "x.\n/y"), (Pieces{"x", ".\n", "/y"}));
}

TEST(Pretokenizer, InvalidUtf8BytesAreOwnPieces) {
  EXPECT_EQ(split(Pattern::kO200k,
                  "ab\xff"
                  "cd"),
            (Pieces{"ab", "\xff", "cd"}));
}

TEST(Pretokenizer, LongLetterRunDoesNotExhaustTheJitStack) {
  const std::string word(200'000, 'x');
  EXPECT_EQ(split(Pattern::kO200k, word), Pieces{word});
  // Kimi cuts runs at 25,000 characters before the regex runs.
  const Pieces kimi = split(Pattern::kKimi, word);
  ASSERT_EQ(kimi.size(), 8u);
  for (const auto& piece : kimi) EXPECT_EQ(piece.size(), kKimiMaxRunChars);
}

std::vector<std::string> slices(const std::string& text) {
  std::vector<std::string> out;
  kimi_slices(text, [&](std::string_view s) { out.emplace_back(s); });
  return out;
}

TEST(KimiSlices, RunsOfWhitespaceAndNonWhitespace) {
  EXPECT_TRUE(slices("").empty());
  EXPECT_EQ(slices("a b"), (std::vector<std::string>{"a b"}));
  // 25,001 letters then a space: the cut falls after the 25,000th letter.
  const std::string text = std::string(25'001, 'a') + " " + std::string(3, 'b');
  const auto out = slices(text);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], std::string(25'000, 'a'));
  EXPECT_EQ(out[1], "a bbb");
  // Whitespace runs count the same way; U+3000 is whitespace, 3 bytes but one character.
  std::string spaces;
  for (int i = 0; i < 25'001; ++i) spaces += "\u3000";
  const auto out2 = slices(spaces);
  ASSERT_EQ(out2.size(), 2u);
  EXPECT_EQ(out2[1], "\u3000");
}

TEST(KimiSlices, FourHundredThousandCharacterSlices) {
  // Alternating "é " never trips the run limit; slices fall on character counts, and "é" is two
  // bytes but one character. 800,010 characters make slices of 400,000, 400,000 and 10.
  std::string text;
  for (int i = 0; i < 400'005; ++i) text += "\xC3\xA9 ";
  const auto out = slices(text);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].size(), 400'000u / 2 * 3);
  EXPECT_EQ(out[2].size(), 15u);
  EXPECT_EQ(out[0] + out[1] + out[2], text);
}

}  // namespace
}  // namespace deltafin::tokenizer
