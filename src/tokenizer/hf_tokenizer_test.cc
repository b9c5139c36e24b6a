// The Hugging Face tokenizer.json path on small hand-made files: both merge serializations,
// pair-rank (not token-rank) merging, added tokens, NFC, Qwen's split regex edge cases, round
// trips, and errors that name the JSON path of what is not supported.
#include "tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::tokenizer {
namespace {

using Json = nlohmann::json;

// Qwen3's Split pattern, as its tokenizer.json has it.
constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Bytes in the byte-level alphabet (the form vocabularies store).
std::string mapped(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    const char32_t u = byte_to_char(static_cast<uint8_t>(c));
    if (u < 0x80) {
      out.push_back(static_cast<char>(u));
    } else {
      out.push_back(static_cast<char>(0xC0 | (u >> 6)));
      out.push_back(static_cast<char>(0x80 | (u & 0x3F)));
    }
  }
  return out;
}

// ids 0..255: the bytes; then one token per merge, in merge order. merges are byte strings.
Json make_json(const std::vector<std::pair<std::string, std::string>>& merges,
               bool array_merges = true) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[mapped(std::string(1, static_cast<char>(b)))] = b;
  Json merge_list = Json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(mapped(a + b))) vocab[mapped(a + b)] = vocab.size();
    if (array_merges) {
      merge_list.push_back(Json::array({mapped(a), mapped(b)}));
    } else {
      merge_list.push_back(mapped(a) + " " + mapped(b));
    }
  }
  Json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = Json::array();
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", Json::array({{{"type", "Split"},
                                                        {"pattern", {{"Regex", kQwenPattern}}},
                                                        {"behavior", "Isolated"},
                                                        {"invert", false}},
                                                       {{"type", "ByteLevel"},
                                                        {"add_prefix_space", false},
                                                        {"trim_offsets", false},
                                                        {"use_regex", false}}})}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}};
  return j;
}

void add_token(Json& j, int32_t id, const std::string& content, bool special) {
  j["added_tokens"].push_back({{"id", id},
                               {"content", content},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", special}});
}

Tokenizer make(const Json& j) { return Tokenizer::from_hf_json(j.dump(), "test.json"); }

const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"},   {"he", "ll"},       {"hell", "o"},  {" ", "w"},
    {"o", "r"}, {" w", "or"}, {"l", "d"},         {" wor", "ld"}, {"\xC3", "\xA9"},
    {"c", "a"}, {"ca", "f"},  {"caf", "\xC3\xA9"}};

int32_t id_of(const Json& j, std::string_view bytes) {
  return j["model"]["vocab"][mapped(bytes)].get<int32_t>();
}

// Expects base::Error whose message contains `needle`.
void expect_error(const Json& j, const std::string& needle) {
  try {
    make(j);
    ADD_FAILURE() << "no error, expected one mentioning " << needle;
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HfTokenizer, BothMergeFormsGiveTheSameIds) {
  const Json arrays = make_json(kMerges, true);
  const Json strings = make_json(kMerges, false);
  ASSERT_TRUE(strings["model"]["merges"][0].is_string());
  const auto a = make(arrays);
  const auto s = make(strings);
  const std::string text = "hello world, café hello";
  EXPECT_EQ(a.encode_ordinary(text), s.encode_ordinary(text));
  EXPECT_EQ(a.encode_ordinary("hello world"),
            (std::vector<int32_t>{id_of(arrays, "hello"), id_of(arrays, " world")}));
}

TEST(HfTokenizer, MergesFollowPairRanksNotTokenIds) {
  // "abc" is a token reachable only as (a, bc); tiktoken's rule would also build it from (ab, c)
  // because the bytes "abc" are a token, Hugging Face's merges must not.
  const Json j = make_json({{"a", "b"}, {"b", "c"}, {"a", "bc"}});
  const auto t = make(j);
  EXPECT_EQ(t.encode_ordinary("abc"), (std::vector<int32_t>{id_of(j, "ab"), 'c'}));
  EXPECT_EQ(t.encode_ordinary("xbc"), (std::vector<int32_t>{'x', id_of(j, "bc")}));
  // Equal pairs merge leftmost first: "aaa" -> (aa, a).
  const Json k = make_json({{"a", "a"}});
  EXPECT_EQ(make(k).encode_ordinary("aaa"), (std::vector<int32_t>{id_of(k, "aa"), 'a'}));
}

TEST(HfTokenizer, LongPiecesMatchTheReferenceMerge) {
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> tokens = {"a", "b", "c"};
  for (int i = 0; i < 200; ++i) {
    const std::string x = tokens[rng() % tokens.size()];
    const std::string y = tokens[rng() % tokens.size()];
    if (x.size() + y.size() > 8) continue;
    merges.emplace_back(x, y);
    tokens.push_back(x + y);
  }
  const HfTokenizer t = HfTokenizer::from_json(make_json(merges).dump(), "random.json");
  MergeBpe bpe;  // rebuilt from the same spec to reach the reference form
  const HfSpec spec = parse_hf_tokenizer_json(make_json(merges).dump(), "random.json");
  bpe = MergeBpe(spec.byte_ids, spec.merges);
  for (int n : {2, 5, 63, 64, 65, 200, 3000}) {
    std::string word;
    for (int i = 0; i < n; ++i) word.push_back("abc"[rng() % 3]);
    std::vector<int32_t> fast, reference;
    bpe.encode(word, fast);
    bpe.encode_reference(word, reference);
    EXPECT_EQ(fast, reference) << "length " << n;
    std::vector<int32_t> via_tokenizer;
    t.encode_into(word, false, via_tokenizer);
    EXPECT_EQ(via_tokenizer, reference) << "length " << n;
  }
}

TEST(HfTokenizer, AddedTokensMatchedBeforeBpe) {
  Json j = make_json(kMerges);
  add_token(j, 1000, "<|im_start|>", true);
  add_token(j, 1001, "<|im_start|>x", true);  // longer, same start: the longest wins
  add_token(j, 1002, "<think>", false);
  const auto t = make(j);
  EXPECT_TRUE(t.is_special(1000));
  EXPECT_FALSE(t.is_special(1002));
  EXPECT_EQ(t.special_id("<|im_start|>"), 1000);
  EXPECT_EQ(t.vocab_size(), 1003);

  const auto markup = t.encode_markup("<|im_start|>hello<|im_start|>x<think>");
  EXPECT_EQ(markup, (std::vector<int32_t>{1000, id_of(j, "hello"), 1001, 1002}));
  EXPECT_EQ(t.decode(markup), "<|im_start|>hello<|im_start|>x<think>");

  // Untrusted text: the special's text stays text, the non-special added token still matches.
  const auto ordinary = t.encode_ordinary("<|im_start|>hello<think>");
  for (const int32_t id : ordinary) EXPECT_FALSE(t.is_special(id));
  EXPECT_EQ(ordinary.back(), 1002);
  EXPECT_EQ(t.decode(ordinary), "<|im_start|>hello<think>");
}

TEST(HfTokenizer, NfcComposesBeforeBpe) {
  const Json j = make_json(kMerges);
  const auto t = make(j);
  const auto composed = t.encode_ordinary("caf\xC3\xA9");    // é as U+00E9
  const auto combining = t.encode_ordinary("cafe\xCC\x81");  // e + U+0301
  EXPECT_EQ(composed, (std::vector<int32_t>{id_of(j, "caf\xC3\xA9")}));
  EXPECT_EQ(combining, composed);
  EXPECT_EQ(t.decode(combining), "caf\xC3\xA9");
  // Without a normalizer the combining form stays as it is.
  Json raw = j;
  raw["normalizer"] = nullptr;
  EXPECT_EQ(make(raw).decode(make(raw).encode_ordinary("cafe\xCC\x81")), "cafe\xCC\x81");
  // A Sequence of NFC normalizers is NFC.
  Json seq = j;
  seq["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "NFC"}}})}};
  EXPECT_EQ(make(seq).encode_ordinary("cafe\xCC\x81"), composed);
}

TEST(HfTokenizer, QwenSplitEdgeCases) {
  const auto t = make(make_json(kMerges));
  using V = std::vector<std::string>;
  EXPECT_EQ(t.pieces("12345"), (V{"1", "2", "3", "4", "5"}));  // digits one by one
  EXPECT_EQ(t.pieces("IT'S we'LL I'm"), (V{"IT", "'S", " we", "'LL", " I", "'m"}));
  EXPECT_EQ(t.pieces("a\n\nb"), (V{"a", "\n\n", "b"}));
  EXPECT_EQ(t.pieces("a \r\n b"), (V{"a", " \r\n", " b"}));
  EXPECT_EQ(t.pieces("a   b"), (V{"a", "  ", " b"}));  // the last space joins the word
  EXPECT_EQ(t.pieces("end  "), (V{"end", "  "}));      // trailing spaces stay one piece
  EXPECT_EQ(t.pieces("x!!\n\ny"), (V{"x", "!!\n\n", "y"}));
  EXPECT_EQ(t.pieces("\xE4\xB8\xAD\xE6\x96\x87 ok"), (V{"\xE4\xB8\xAD\xE6\x96\x87", " ok"}));
  // U+3000 is White_Space: it groups with the following word like a space.
  EXPECT_EQ(t.pieces("a\xE3\x80\x80"
                     "b"),
            (V{"a",
               "\xE3\x80\x80"
               "b"}));
  // U+180E is not White_Space (PCRE2's own \s would say it is): it is punctuation-like here.
  EXPECT_EQ(t.pieces("a\xE1\xA0\x8E"), (V{"a", "\xE1\xA0\x8E"}));
}

TEST(HfTokenizer, ByteLevelUseRegexAppliesGpt2Pattern) {
  Json j = make_json(kMerges);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  using V = std::vector<std::string>;
  EXPECT_EQ(make(j).pieces("Hello world's 123  x"),
            (V{"Hello", " world", "'s", " 123", " ", " x"}));
}

TEST(HfTokenizer, RoundTripsToNfc) {
  Json j = make_json(kMerges);
  add_token(j, 1000, "<|im_start|>", true);
  const auto t = make(j);
  std::mt19937 rng(3);
  // (text, its NFC form): concatenations keep NFC because no part starts with a combining mark.
  const std::vector<std::pair<std::string, std::string>> parts = {
      {"hello", "hello"},
      {" world", " world"},
      {"e\xCC\x81", "\xC3\xA9"},
      {"\xE4\xB8\xAD", "\xE4\xB8\xAD"},
      {"12", "12"},
      {"\n", "\n"},
      {"  ", "  "},
      {"IT'S", "IT'S"},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
      {"!?", "!?"},
      {"\t", "\t"},
      {"\xE2\x84\xAB", "\xC3\x85"},  // U+212B ANGSTROM SIGN -> U+00C5
      {"<|im_start|>", "<|im_start|>"},
      {"\xE1\x84\x80\xE1\x85\xA1", "\xEA\xB0\x80"}};
  for (int i = 0; i < 300; ++i) {
    std::string s, nfc;
    for (int k = rng() % 12; k > 0; --k) {
      const auto& [text, normal] = parts[rng() % parts.size()];
      s += text;
      nfc += normal;
    }
    EXPECT_EQ(t.decode(t.encode_ordinary(s)), nfc) << s;
    EXPECT_EQ(t.decode(t.encode_markup(s)), nfc) << s;
  }
}

TEST(HfTokenizer, InvalidUtf8BytesAreKept) {
  const auto t = make(make_json(kMerges));
  const std::string s = "he\xFFll\xC3o \xE4\xB8";
  const auto ids = t.encode_ordinary(s);
  EXPECT_EQ(t.decode_bytes(ids), s);
  EXPECT_EQ(t.decode(ids), "he\xEF\xBF\xBDll\xEF\xBF\xBDo \xEF\xBF\xBD");
}

TEST(HfTokenizer, TokenBytesAndStreaming) {
  const Json j = make_json(kMerges);
  const auto t = make(j);
  EXPECT_EQ(t.token_bytes(id_of(j, " world")), " world");
  EXPECT_EQ(t.token_bytes(' '), " ");
  EXPECT_THROW(t.token_bytes(5000), base::Error);
  EXPECT_THROW(t.token_bytes(-1), base::Error);
  EXPECT_TRUE(t.is_hf_json());
  EXPECT_STREQ(t.kind_name(), "tokenizer.json");
  StreamingDecoder d(t);
  std::string out;
  for (const int32_t id : t.encode_ordinary("caf\xC3\xA9 \xE4\xB8\xAD")) out += d.push(id);
  out += d.flush();
  EXPECT_EQ(out, "caf\xC3\xA9 \xE4\xB8\xAD");
}

TEST(HfTokenizer, IgnoreMergesTakesWholeTokens) {
  Json j = make_json({{"a", "b"}});
  j["model"]["vocab"][mapped("abc")] = 300;  // a token no merge builds
  EXPECT_EQ(make(j).encode_ordinary("abc"), (std::vector<int32_t>{id_of(j, "ab"), 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(make(j).encode_ordinary("abc"), (std::vector<int32_t>{300}));
}

TEST(HfTokenizer, UnsupportedConfigurationsNameTheField) {
  const Json base = make_json(kMerges);
  Json j = base;
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error(j, "normalizer.type 'NFKC'");
  j = base;
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", Json::array({{{"type", "Lowercase"}}})}};
  expect_error(j, "normalizer.normalizers[0].type 'Lowercase'");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_error(j, "pre_tokenizer.pretokenizers[0].behavior 'Removed'");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  expect_error(j, "pre_tokenizer.pretokenizers[0].invert");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  expect_error(j, "pre_tokenizer.pretokenizers[1].add_prefix_space");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\w+)";
  expect_error(j, "pre_tokenizer.pretokenizers[0].pattern.Regex: \\w is not supported");
  j = base;
  j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0];
  expect_error(j, "no ByteLevel stage");
  j = base;
  j["model"]["type"] = "WordPiece";
  expect_error(j, "model.type 'WordPiece'");
  j = base;
  j["model"]["byte_fallback"] = true;
  expect_error(j, "model.byte_fallback");
  j = base;
  j["model"]["merges"].push_back(Json::array({"q", "zz"}));
  expect_error(j, "model.merges[13]: \"zz\" is not in model.vocab");
  j = base;
  j["model"]["merges"].push_back("a b c");
  expect_error(j, "model.merges[13]");
  j = base;
  j["model"]["vocab"].erase(mapped(" "));
  expect_error(j, "lacks the one-byte token for byte 32");
  j = base;
  add_token(j, 5, "x", true);
  expect_error(j, "model.vocab gives to another token");
  j = base;
  add_token(j, 1000, "<a>", true);
  j["added_tokens"][0]["lstrip"] = true;
  expect_error(j, "added_tokens[0].lstrip");
  j = base;
  j["decoder"] = {{"type", "Metaspace"}};
  expect_error(j, "decoder");
  j = base;
  j["post_processor"] = {{"type", "TemplateProcessing"}};
  expect_error(j, "post_processor");
  j = base;
  j["truncation"] = {{"max_length", 5}};
  expect_error(j, "truncation");
  j = base;
  j["extra"] = 1;
  expect_error(j, "tokenizer.json.extra is not a supported field");
  expect_error(Json::parse("[1]"), "is not an object");
  EXPECT_THROW(Tokenizer::from_hf_json("{not json", "bad.json"), base::Error);
  EXPECT_THROW(load_hf_tokenizer("/nonexistent/tokenizer.json"), base::Error);
}

TEST(HfRegex, RewritesWhiteSpaceForPcre2) {
  const std::string out = hf_regex_to_pcre2(R"(\s+(?!\S)|[^\s\p{L}]|\\s)", "t");
  EXPECT_EQ(out.find("\\s"), out.rfind("\\s"));  // only the escaped backslash + s stays
  EXPECT_NE(out.find("[\\t-\\r"), std::string::npos);
  EXPECT_NE(out.find("[^\\t-\\r"), std::string::npos);
  EXPECT_THROW(hf_regex_to_pcre2(R"([\S])", "t"), base::Error);
  EXPECT_THROW(hf_regex_to_pcre2(R"(\b)", "t"), base::Error);
  EXPECT_THROW(hf_regex_to_pcre2("[abc", "t"), base::Error);
}

}  // namespace
}  // namespace deltafin::tokenizer
