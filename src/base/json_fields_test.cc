// Tests for the JSON field reader: each typed read, optional vs required, the unknown-key policy,
// and that every error names the full field path and what was expected.
#include "base/json_fields.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

namespace deltafin::base {
namespace {

// The FieldError a read raises, as "problem path: message".
std::string error_of(const std::function<void()>& read) {
  try {
    read();
  } catch (const FieldError& e) {
    return std::to_string(static_cast<int>(e.problem())) + " " + e.path() + ": " + e.what();
  }
  return "no error";
}

const Json kDoc = Json::parse(R"({"a": {"b": [1, {"c": "x"}], "n": null}, "i": 7, "f": 16.0,
  "big": 100000000000000000000, "u": 18446744073709551615, "t": true, "d": 0.5})");

JsonObject root(bool integral_floats = false) {
  return JsonObject(JsonField(kDoc, "", {"f.json", integral_floats}));
}

TEST(JsonFields, ReadsTypedFieldsWithDefaults) {
  const JsonObject r = root();
  EXPECT_EQ(r.integer("i", 0, 10), 7);
  EXPECT_EQ(r.integer_or("absent", -1, 0, 10), -1);
  EXPECT_EQ(r.integer_or("i", -1, 0, 10), 7);
  EXPECT_TRUE(r.boolean("t"));
  EXPECT_FALSE(r.boolean_or("absent", false));
  EXPECT_EQ(r.number("d"), 0.5);
  EXPECT_EQ(r.at("d").number(0, 1), 0.5);
  const JsonField b = r.object("a").at("b");
  ASSERT_EQ(b.array_size(), 2u);
  EXPECT_EQ(b.element(1).object().string("c"), "x");
  EXPECT_EQ(b.element(1).object().path("c"), "a.b[1].c");
  EXPECT_FALSE(r.object("a").has("n"));  // null reads as absent
  EXPECT_FALSE(r.object("a").get("n").has_value());
  EXPECT_EQ(r.keys(), (std::vector<std::string>{"a", "i", "f", "big", "u", "t", "d"}));
  EXPECT_EQ(root(true).integer("f", 0, 100), 16);
}

TEST(JsonFields, ErrorsNameThePathAndWhatWasExpected) {
  const JsonObject r = root();
  EXPECT_EQ(error_of([&] { r.object("a").object("b"); }),
            "2 a.b: f.json: field a.b: expected an object, got [1,{\"c\":\"x\"}]");
  EXPECT_EQ(error_of([&] { r.object("a").at("b").element(1).object().integer("c", 0, 1); }),
            "2 a.b[1].c: f.json: field a.b[1].c: expected an integer in [0, 1], got \"x\"");
  EXPECT_EQ(error_of([&] { r.object("a").at("n"); }), "1 a.n: f.json: field a.n: missing");
  EXPECT_EQ(error_of([&] { r.integer("i", 8, 10); }),
            "3 i: f.json: field i: expected an integer in [8, 10], got 7");
  EXPECT_EQ(error_of([&] { r.integer("f", 0, 100); }),
            "2 f: f.json: field f: expected an integer in [0, 100], got 16.0");
  // Past 64 bits the library holds a float; the user wrote an integer too large, whatever the
  // options, and the message says so rather than "expected an integer".
  for (bool integral_floats : {false, true})
    EXPECT_EQ(error_of([&] { root(integral_floats).integer("big", 0, 1); }),
              "3 big: f.json: field big: out of range: 1e+20 is beyond 64-bit integers; expected "
              "an integer in [0, 1]");
  const Json huge = Json::parse(R"({"p": 99999999999999999999, "n": -9223372036854775809})");
  const JsonObject h(JsonField(huge, "", {"", true}));
  EXPECT_EQ(error_of([&] { h.integer("p", 0, 10); }).substr(0, 22), "3 p: field p: out of r");
  EXPECT_EQ(error_of([&] { h.integer("n", std::numeric_limits<int64_t>::min(), 0); }).substr(0, 22),
            "3 n: field n: out of r");
  EXPECT_EQ(error_of([&] { r.integer("u", 0, std::numeric_limits<int64_t>::max()); }).substr(0, 4),
            "3 u:");
  EXPECT_EQ(error_of([&] { r.boolean("i"); }),
            "2 i: f.json: field i: expected true or false, got 7");
  EXPECT_EQ(error_of([&] { r.string("t"); }), "2 t: f.json: field t: expected a string, got true");
  EXPECT_EQ(error_of([&] { r.number("t"); }), "2 t: f.json: field t: expected a number, got true");
  EXPECT_EQ(error_of([&] { r.at("d").number(1, 2); }),
            "3 d: f.json: field d: expected a number in [1, 2], got 0.5");
  EXPECT_EQ(error_of([&] { r.at("i").array_size(); }),
            "2 i: f.json: field i: expected an array, got 7");
  EXPECT_EQ(error_of([&] { r.fail("i", FieldProblem::kInvalid, "too odd"); }),
            "4 i: f.json: field i: too odd");
  EXPECT_EQ(error_of([] { JsonObject(JsonField(Json::array(), "", {})); }),
            "2 : expected an object, got []");
}

TEST(JsonFields, FinishRefusesKeysNotRead) {
  const Json doc = Json::parse(R"({"a": 1, "b": 2, "c": null})");
  JsonObject o(JsonField(doc, "body", {}));
  o.integer("a", 0, 9);
  EXPECT_EQ(error_of([&] { o.finish(); }), "5 body.b: field body.b: unknown field");
  EXPECT_EQ(error_of([&] {
              o.finish({{"b", "b is not supported"}});
            }),
            "6 body.b: field body.b: b is not supported");
  o.get("b");
  o.finish();  // c is null: the default, honoured
}

TEST(JsonFields, ParseErrorsSayWhereWithoutTheLibrarysTag) {
  const std::string syntax = error_of([] { parse_json("{\"a\": ", {"m.json"}); });
  EXPECT_EQ(syntax.rfind("0 : m.json: invalid JSON: parse error at line 1, column 7", 0), 0u)
      << syntax;
  const std::string big = error_of([] { parse_json(R"({"a": 1e999})", {"m.json"}); });
  EXPECT_NE(big.find("m.json: invalid JSON: number overflow"), std::string::npos) << big;
  EXPECT_EQ(big.find("json.exception"), std::string::npos) << big;
}

TEST(JsonFields, ANulByteDoesNotEndTheText) {
  // The whole text is parsed: bytes after a NUL are not ignored, and a NUL is never JSON.
  using namespace std::string_literals;
  const std::string trailing = error_of([] { parse_json("{}\0anything"s, {"body"}); });
  EXPECT_NE(trailing.find("body: invalid JSON: a raw NUL byte at byte 2 of 11"), std::string::npos)
      << trailing;
  EXPECT_NE(error_of([] { parse_json("{\"a\": \"x\0y\"}"s, {"body"}); }).find("NUL"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_json("{} x", {"body"}); }).find("invalid JSON"), std::string::npos);
  EXPECT_EQ(parse_json("{\"a\": \"x\\u0000y\"}", {"body"})["a"].get<std::string>(), "x\0y"s);
}

}  // namespace
}  // namespace deltafin::base
