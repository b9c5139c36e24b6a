// Tokenizer behaviour on a small in-memory vocabulary: BPE merge order (fast paths against the
// reference), special tokens only from markup, lossless round trips, lossy and streaming decode.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/utf8.h"

namespace deltafin::tokenizer {
namespace {

// 256 single bytes (rank = byte value) followed by `merges` in rank order.
std::vector<std::string> byte_vocab(const std::vector<std::string>& merges) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const auto& m : merges) tokens.push_back(m);
  return tokens;
}

// A vocabulary with many overlapping merges, made by greedy pair counting over random text, so
// that merge order matters and ties happen.
std::vector<std::string> trained_vocab(uint32_t seed, int n_merges) {
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < 4000; ++i) text.push_back("aabbbcdde \xC3\xA9"[rng() % 12]);
  std::vector<std::string> parts;
  for (char c : text) parts.emplace_back(1, c);
  std::vector<std::string> merges;
  for (int m = 0; m < n_merges; ++m) {
    std::map<std::string, int> counts;
    for (size_t i = 0; i + 1 < parts.size(); ++i) ++counts[parts[i] + parts[i + 1]];
    std::string best;
    int best_count = 0;
    for (const auto& [pair, count] : counts) {
      if (count > best_count && std::find(merges.begin(), merges.end(), pair) == merges.end()) {
        best = pair;
        best_count = count;
      }
    }
    if (best_count < 2) break;
    merges.push_back(best);
    std::vector<std::string> next;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i + 1 < parts.size() && parts[i] + parts[i + 1] == best) {
        next.push_back(best);
        ++i;
      } else {
        next.push_back(parts[i]);
      }
    }
    parts.swap(next);
  }
  return byte_vocab(merges);
}

TEST(Bpe, MergesLowestRankFirstAndLeftmostOnTies) {
  // "ab" (256) outranks "bc" (257): "abc" -> [ab, c]. With "bc" first: [a, bc].
  auto v1 = Vocab::from_tokens(byte_vocab({"ab", "bc"}), "test");
  std::vector<int32_t> out;
  byte_pair_encode(v1, "abc", out);
  EXPECT_EQ(out, (std::vector<int32_t>{256, 'c'}));
  auto v2 = Vocab::from_tokens(byte_vocab({"bc", "ab"}), "test");
  out.clear();
  byte_pair_encode(v2, "abc", out);
  EXPECT_EQ(out, (std::vector<int32_t>{'a', 256}));
  // "aaa" with only "aa": the leftmost pair merges.
  auto v3 = Vocab::from_tokens(byte_vocab({"aa"}), "test");
  out.clear();
  byte_pair_encode(v3, "aaa", out);
  EXPECT_EQ(out, (std::vector<int32_t>{256, 'a'}));
}

TEST(Bpe, FastPathsAgreeWithReferenceOnShortAndLongPieces) {
  const auto vocab = Vocab::from_tokens(trained_vocab(7, 300), "test");
  std::mt19937 rng(11);
  for (int trial = 0; trial < 340; ++trial) {
    const size_t n = 1 + rng() % (trial < 300 ? 64 : 1500);  // both sides of the 64-byte switch
    std::string piece;
    for (size_t i = 0; i < n; ++i) piece.push_back("aabbbcdde \xC3\xA9"[rng() % 12]);
    std::vector<int32_t> fast, reference;
    byte_pair_encode(vocab, piece, fast);
    byte_pair_encode_reference(vocab, piece, reference);
    ASSERT_EQ(fast, reference) << "piece of " << n << " bytes";
  }
}

Tokenizer small_tokenizer(Pattern pattern = Pattern::kO200k) {
  return Tokenizer::from_parts(byte_vocab({"He", "ll", "llo", "Hello", " w", " wor", "ld"}),
                               pattern, {{"<|open|>", 300}, {"[BOS]", 301}}, 0);
}

TEST(Tokenizer, SpecialsOnlyFromMarkup) {
  const Tokenizer t = small_tokenizer();
  const std::string text = "a <|open|> b [BOS] c";
  const auto ordinary = t.encode_ordinary(text);
  for (const int32_t id : ordinary) EXPECT_FALSE(t.is_special(id));
  EXPECT_EQ(t.decode(ordinary), text);
  const auto markup = t.encode_markup(text);
  EXPECT_EQ(markup, (std::vector<int32_t>{'a', ' ', 300, ' ', 'b', ' ', 301, ' ', 'c'}));
  EXPECT_EQ(t.decode(markup), text);
  EXPECT_EQ(t.special_id("<|open|>"), 300);
  EXPECT_FALSE(t.special_id("<|close|>").has_value());
  EXPECT_EQ(t.token_text(300), "<|open|>");
  EXPECT_EQ(t.vocab_size(), 302);
}

TEST(Tokenizer, ReservedSpecialsAreNamedByAbsoluteId) {
  const auto base = byte_vocab({});
  const Tokenizer t = Tokenizer::from_parts(base, Pattern::kKimi, {{"[BOS]", 256}}, 4);
  EXPECT_EQ(t.vocab_size(), 260);
  EXPECT_EQ(t.token_text(256), "[BOS]");
  EXPECT_EQ(t.token_text(259), "<|reserved_token_259|>");
  EXPECT_EQ(t.encode_markup("<|reserved_token_257|>x"), (std::vector<int32_t>{257, 'x'}));
  EXPECT_THROW(t.token_bytes(260), base::Error);
  EXPECT_THROW(t.token_bytes(-1), base::Error);
}

TEST(Tokenizer, EncodesWithMerges) {
  const Tokenizer t = small_tokenizer();
  // " wor" is never reached: " wo" is not a token, so BPE stops at " w", "o", "r".
  EXPECT_EQ(t.encode_ordinary("Hello world"), (std::vector<int32_t>{259, 260, 'o', 'r', 262}));
}

TEST(Tokenizer, RoundTripsArbitraryBytes) {
  const Tokenizer t = small_tokenizer(Pattern::kKimi);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const size_t n = rng() % 200;
    for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(rng() % 256));
    EXPECT_EQ(t.decode_bytes(t.encode_ordinary(s)), s);
    EXPECT_EQ(t.decode_bytes(t.encode_markup(s)), s);
  }
}

TEST(Tokenizer, LoadsTiktokenFileAndTokenizerConfig) {
  const std::string dir = testing::TempDir();
  const std::string vocab_path = dir + "/tok_test.tiktoken";
  const std::string config_path = dir + "/tok_test_config.json";
  {
    std::ofstream v(vocab_path);
    const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int b = 0; b < 256; ++b) {  // one byte = two base64 characters and "=="
      v << b64[b >> 2] << b64[(b & 3) << 4] << "== " << b << "\n";
    }
    v << "aGk= 256\n";  // "hi"
    std::ofstream c(config_path);
    c << R"({"added_tokens_decoder": {"257": {"content": "[BOS]", "special": true},
             "259": {"content": "<|open|>", "special": false}}})";
  }
  const Tokenizer t = Tokenizer::load(vocab_path, Pattern::kKimi, config_path);
  EXPECT_EQ(t.vocab_size(), 257 + 256);
  EXPECT_EQ(t.special_id("[BOS]"), 257);
  EXPECT_EQ(t.special_id("<|reserved_token_258|>"), 258);
  EXPECT_EQ(t.special_id("<|open|>"), 259);
  EXPECT_EQ(t.encode_markup("hi<|open|>"), (std::vector<int32_t>{256, 259}));
  EXPECT_THROW(Tokenizer::load(dir + "/missing.tiktoken", Pattern::kKimi), base::Error);
}

TEST(Decode, ReplacesInvalidUtf8LikePython) {
  // Expected strings computed with bytes.decode("utf-8", "replace").
  const auto lossy = [](const std::string& bytes) {
    std::string out;
    utf8::decode_replace(bytes, out, true);
    return out;
  };
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("a\xE2\x82"
                  "b"),
            "a" + r + "b");  // truncated 3-byte: one replacement
  EXPECT_EQ(lossy("\xE2\x82"), r);
  EXPECT_EQ(lossy("\xE0\x80"), r + r);          // bad second byte: lead alone
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);  // surrogate
  EXPECT_EQ(lossy("\xF0\x9F\x98"
                  "A"),
            r + "A");
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(lossy("\xC0\xAF"), r + r);                  // overlong
  EXPECT_EQ(lossy("\xFF\xFE"), r + r);
  EXPECT_EQ(lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(StreamingDecoder, NeverEmitsPartialCharacters) {
  // Byte-level tokens only: every multi-byte character arrives split across ids.
  const Tokenizer t = Tokenizer::from_parts(byte_vocab({}), Pattern::kO200k, {}, 0);
  const std::string text = "héllo 世界 👩‍💻!";
  const auto ids = t.encode_ordinary(text);
  ASSERT_EQ(ids.size(), text.size());
  StreamingDecoder decoder(t);
  std::string joined;
  for (const int32_t id : ids) {
    const std::string piece = decoder.push(id);
    EXPECT_TRUE(utf8::is_valid(piece)) << "partial character emitted";
    joined += piece;
  }
  joined += decoder.flush();
  EXPECT_EQ(joined, text);
}

TEST(StreamingDecoder, MatchesLossyDecodeOnInvalidBytes) {
  const Tokenizer t = Tokenizer::from_parts(byte_vocab({}), Pattern::kO200k, {}, 0);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids;
    const size_t n = rng() % 24;
    for (size_t i = 0; i < n; ++i) {
      // Bias towards UTF-8 lead and continuation bytes so that sequences are often almost valid.
      const uint32_t pick = rng() % 4;
      ids.push_back(static_cast<int32_t>(pick == 0   ? rng() % 256
                                         : pick == 1 ? 0x80 + rng() % 64
                                         : pick == 2 ? 0xC2 + rng() % 51
                                                     : 'a'));
    }
    StreamingDecoder decoder(t);
    std::string joined;
    for (const int32_t id : ids) {
      const std::string piece = decoder.push(id);
      ASSERT_TRUE(utf8::is_valid(piece));
      joined += piece;
    }
    joined += decoder.flush();
    EXPECT_EQ(joined, t.decode(ids));
  }
}

}  // namespace
}  // namespace deltafin::tokenizer
