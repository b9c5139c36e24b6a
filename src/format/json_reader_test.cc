// Tests for the strict JSON reader: it accepts exactly what RFC 8259 (and nlohmann's parser)
// accepts, decodes escapes, returns views without copies, and names the byte of an error.
#include "format/json_reader.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deltafin::format::detail {
namespace {

// Reads one whole document, skipping every value.
bool accepts(std::string_view text) {
  try {
    JsonReader r(text, "t");
    r.skip_value();
    r.expect_end();
    return true;
  } catch (const base::Error&) {
    return false;
  }
}

TEST(JsonReader, AcceptsWhatTheGrammarAllowsAndNothingElse) {
  const char* cases[] = {
      "{}",
      "[]",
      "0",
      "-0",
      "1.5e-3",
      "-12E+4",
      "true",
      "false",
      "null",
      "\"\"",
      " {\"a\" : [1, {\"b\":null}] } ",
      "\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\\\\\"\"",
      "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
      // rejected:
      "",
      " ",
      "{",
      "}",
      "[1,]",
      "{\"a\":1,}",
      "{,}",
      "[,1]",
      "01",
      "1.",
      ".5",
      "-",
      "1e",
      "+1",
      "tru",
      "nul",
      "truex",
      "{\"a\" 1}",
      "{1:2}",
      "[1 2]",
      "\"\\x\"",
      "\"\\u12\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "\"\\ud800\\u0041\"",
      "\"a\nb\"",
      "\"\xff\"",
      "\"\xc0\xaf\"",
      "\"\xed\xa0\x80\"",
      "\"\xf4\x90\x80\x80\"",
      "\"\xe2\x82\"",
      "{} {}",
      "[1]]",
      "\"abc",
      "NaN",
      "[\"a\":1]",
      "{\"a\":1 \"b\":2}",
  };
  for (const char* c : cases) {
    EXPECT_EQ(accepts(c), nlohmann::json::accept(c)) << "input: " << c;
  }
}

TEST(JsonReader, ReadsTypedValuesAndViewsIntoTheInput) {
  const std::string text =
      R"({"name": "plain", "esc": "a\"b", "n": [0, 18446744073709551615, 7], "t": true})";
  JsonReader r(text, "t");
  r.begin_object();
  std::string_view key;
  ASSERT_TRUE(r.next_key(&key));
  EXPECT_EQ(key, "name");
  EXPECT_EQ(r.peek(), JsonReader::Type::kString);
  const std::string_view plain = r.read_string();
  EXPECT_EQ(plain, "plain");
  EXPECT_TRUE(plain.data() >= text.data() && plain.data() < text.data() + text.size());  // no copy
  ASSERT_TRUE(r.next_key(&key));
  EXPECT_EQ(r.read_string(), "a\"b");
  ASSERT_TRUE(r.next_key(&key));
  r.begin_array();
  std::vector<uint64_t> values;
  while (r.next_element()) {
    uint64_t v = 0;
    ASSERT_TRUE(json_number_to_u64(r.read_number(), &v));
    values.push_back(v);
  }
  EXPECT_EQ(values, (std::vector<uint64_t>{0, UINT64_MAX, 7}));
  ASSERT_TRUE(r.next_key(&key));
  EXPECT_TRUE(r.read_bool());
  EXPECT_FALSE(r.next_key(&key));
  r.expect_end();
}

TEST(JsonReader, NumbersToU64) {
  uint64_t v = 0;
  EXPECT_TRUE(json_number_to_u64("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_FALSE(json_number_to_u64("18446744073709551616", &v));  // 2^64
  EXPECT_FALSE(json_number_to_u64("-1", &v));
  EXPECT_FALSE(json_number_to_u64("1.0", &v));
  EXPECT_FALSE(json_number_to_u64("1e3", &v));
}

TEST(JsonReader, ErrorsNameTheInputAndTheByte) {
  try {
    JsonReader r("[1, 2,, 3]", "file x.json");
    r.skip_value();
    FAIL() << "no error";
  } catch (const base::Error& e) {
    EXPECT_STREQ(e.what(), "file x.json: invalid JSON at byte 6: expected a value");
  }
}

TEST(JsonReader, BoundsNesting) {
  const std::string deep = std::string(300, '[') + std::string(300, ']');
  EXPECT_FALSE(accepts(deep));
  const std::string ok = std::string(200, '[') + std::string(200, ']');
  EXPECT_TRUE(accepts(ok));
}

}  // namespace
}  // namespace deltafin::format::detail
