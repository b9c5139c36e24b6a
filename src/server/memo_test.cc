// The response memo's bounds and recency order.
#include "server/memo.h"

#include <gtest/gtest.h>

namespace deltafin::server {
namespace {

Outcome outcome(const std::string& text) {
  Outcome o;
  o.deltas.push_back(Delta{Delta::Kind::kContent, text, {}});
  o.finish_reason = "stop";
  o.usage.prompt_tokens = 3;
  return o;
}

TEST(ResponseMemo, FindsWhatItStoredAndEvictsTheLeastRecent) {
  ResponseMemo memo(2, 1 << 20);
  memo.insert("a", outcome("A"));
  memo.insert("b", outcome("B"));
  ASSERT_TRUE(memo.find("a"));  // a is now the most recent
  memo.insert("c", outcome("C"));
  EXPECT_EQ(memo.entries(), 2u);
  EXPECT_FALSE(memo.find("b"));
  EXPECT_EQ(memo.find("a")->deltas[0].text, "A");
  EXPECT_EQ(memo.find("c")->usage.prompt_tokens, 3);
  EXPECT_FALSE(memo.find("missing"));
}

TEST(ResponseMemo, BoundsBytes) {
  const size_t one = std::string("k1").size() + outcome(std::string(1000, 'x')).bytes();
  ResponseMemo memo(100, 2 * one + 10);
  memo.insert("k1", outcome(std::string(1000, 'x')));
  memo.insert("k2", outcome(std::string(1000, 'y')));
  EXPECT_EQ(memo.bytes(), 2 * one);
  memo.insert("k3", outcome(std::string(1000, 'z')));
  EXPECT_EQ(memo.entries(), 2u);
  EXPECT_LE(memo.bytes(), 2 * one + 10);
  EXPECT_FALSE(memo.find("k1"));
  memo.insert("huge", outcome(std::string(1 << 20, 'h')));  // larger than the bound: not kept
  EXPECT_FALSE(memo.find("huge"));
  EXPECT_EQ(memo.entries(), 2u);
  memo.insert("k2", outcome("short"));  // a refresh replaces, not duplicates
  EXPECT_EQ(memo.find("k2")->deltas[0].text, "short");
  EXPECT_EQ(memo.entries(), 2u);
}

TEST(ResponseMemo, OffWhenNoEntries) {
  ResponseMemo memo(0, 1 << 20);
  memo.insert("a", outcome("A"));
  EXPECT_FALSE(memo.find("a"));
}

}  // namespace
}  // namespace deltafin::server
