// Tests for the synthetic tokenizer: K3's byte order, the pre-tokenizer on the spec's cases, BPE
// training, the rank invariant converters rely on, and the release's tokenizer_config.json.
#include "synth/tokenizer_files.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace deltafin::synth {
namespace {

// Rank-BPE as tiktoken does it (lowest-ranked adjacent pair first, leftmost on ties), using only
// ranks below `max_rank`.
std::vector<std::string> bpe(const std::string& piece, const std::map<std::string, int>& ranks,
                             int max_rank) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int best = -1, best_rank = max_rank;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best_rank) {
        best_rank = it->second;
        best = static_cast<int>(i);
      }
    }
    if (best < 0) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + best + 1);
  }
  return parts;
}

std::map<std::string, int> rank_map(const std::vector<std::string>& tokens) {
  std::map<std::string, int> ranks;
  for (size_t i = 0; i < tokens.size(); ++i) ranks[tokens[i]] = static_cast<int>(i);
  return ranks;
}

TEST(Tokenizer, ByteOrderIsK3s) {
  const std::vector<unsigned char> order = byte_rank_order();
  ASSERT_EQ(order.size(), 256u);
  EXPECT_EQ(std::set<unsigned char>(order.begin(), order.end()).size(), 256u);
  // Spec §5 gold ids: "!" = 0, "a" = 64, "\n" = 198, " " = 220.
  EXPECT_EQ(order[0], '!');
  EXPECT_EQ(order[64], 'a');
  EXPECT_EQ(order[198], '\n');
  EXPECT_EQ(order[220], ' ');
  int n_text = 0;
  for (int r = 0; r < 256; ++r) n_text += is_text_byte_rank(r);
  EXPECT_EQ(n_text, 95 + 2);  // printable ASCII (space included), tab, newline
  EXPECT_TRUE(is_text_byte_rank(220) && is_text_byte_rank(198) && !is_text_byte_rank(255));
}

TEST(Tokenizer, PretokenizerFollowsK3Regex) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(pretokenize_ascii("Hello, world!"), (V{"Hello", ",", " world", "!"}));
  EXPECT_EQ(pretokenize_ascii("Hello\n\nworld  "), (V{"Hello", "\n\n", "world", "  "}));
  EXPECT_EQ(pretokenize_ascii("I'M we're they'LL 1234567"),
            (V{"I'M", " we're", " they'LL", " ", "123", "456", "7"}));
  EXPECT_EQ(pretokenize_ascii("a  b\t\r\nc ..."), (V{"a", " ", " b", "\t\r\n", "c", " ..."}));
  EXPECT_EQ(pretokenize_ascii("CamelCase XML"), (V{"Camel", "Case", " XML"}));
}

TEST(Tokenizer, BpeLearnsDeterministicUniqueMerges) {
  const std::vector<std::string> tokens = train_bpe(english_corpus(), 768);
  ASSERT_EQ(tokens.size(), 768u);
  EXPECT_EQ(rank_map(tokens).size(), 768u);
  EXPECT_EQ(tokens, train_bpe(english_corpus(), 768));
  EXPECT_EQ(tokens[256], " t");  // the commonest pair of English text
  EXPECT_TRUE(rank_map(tokens).count(" the"));
  // The learned ranks compress their own text well.
  const auto ranks = rank_map(tokens);
  size_t n_tokens = 0;
  for (std::string_view piece : pretokenize_ascii(english_corpus())) {
    n_tokens += bpe(std::string(piece), ranks, 1 << 30).size();
  }
  EXPECT_LT(n_tokens * 3, english_corpus().size());
}

// HF's tiktoken converter (and any merges-list tokenizer) needs every rank r >= 256 to split into
// exactly two tokens when BPE uses only ranks below r.
TEST(Tokenizer, EveryRankSplitsIntoTwoLowerRanks) {
  const std::vector<std::string> tokens = synth_tokenizer_ranks(768 + 128 * 128 + 300);
  const auto ranks = rank_map(tokens);
  ASSERT_EQ(ranks.size(), tokens.size());
  for (size_t r = 256; r < tokens.size(); ++r) {
    EXPECT_EQ(bpe(tokens[r], ranks, static_cast<int>(r)).size(), 2u) << "rank " << r;
  }
  EXPECT_EQ(tokens.back().size(), 3u);
}

TEST(Tokenizer, K3SizedRanksAndTiktokenText) {
  const std::vector<std::string> tokens = synth_tokenizer_ranks(163584);
  EXPECT_EQ(tokens.size(), 163584u);
  EXPECT_EQ(rank_map(tokens).size(), 163584u);
  const std::string text = tiktoken_model_text({"!", " the", "ab"});
  EXPECT_EQ(text, "IQ== 0\nIHRoZQ== 1\nYWI= 2\n");
}

TEST(Tokenizer, ConfigNamesK3SpecialsAtK3Ids) {
  const std::string text = tokenizer_config_json(163584);
  EXPECT_EQ(text.size(), 3478u);  // the size pinned for the release's tokenizer_config.json
  const auto json = nlohmann::json::parse(text);
  const auto& added = json["added_tokens_decoder"];
  EXPECT_EQ(added["163586"]["content"], "<|end_of_msg|>");
  EXPECT_EQ(added["163587"]["content"], "<|open|>");
  EXPECT_EQ(added["163587"]["special"], false);
  EXPECT_EQ(added["163649"]["content"], "<osagent_mode>");
  EXPECT_EQ(added["163839"]["content"], "[PAD]");
  EXPECT_EQ(added.size(), k3_named_tokens().size());
  EXPECT_EQ(json["auto_map"]["AutoTokenizer"][0], "tokenization_kimi.TikTokenTokenizer");
  EXPECT_EQ(
      nlohmann::json::parse(tokenizer_config_json(768))["added_tokens_decoder"]["1023"]["content"],
      "[PAD]");
}

}  // namespace
}  // namespace deltafin::synth
