// Stop strings across piece boundaries, held-back prefixes, and UTF-8 characters.
#include "runtime/stop_matcher.h"

#include <gtest/gtest.h>

namespace deltafin::runtime {
namespace {

// Feeds pieces; returns everything emitted (including the final flush unless stopped).
std::string run(std::vector<std::string> stops, const std::vector<std::string>& pieces,
                bool* stopped = nullptr) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const std::string& p : pieces) out += m.push(p);
  if (!m.stopped()) out += m.flush();
  if (stopped) *stopped = m.stopped();
  return out;
}

TEST(StopMatcher, CutsAtTheEarliestMatchAcrossPieces) {
  bool stopped = false;
  EXPECT_EQ(run({"END"}, {"abc E", "N", "Dxyz"}, &stopped), "abc ");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run({"zz", "c"}, {"abczz"}), "ab");
  EXPECT_EQ(run({"bcd", "cd"}, {"ab", "cd"}), "a");  // "bcd" starts first
  EXPECT_EQ(run({"\n\n"}, {"line\n", "\nnext"}), "line");
}

TEST(StopMatcher, HoldsBackOnlyPossibleBeginnings) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("xxE"), "xx");
  EXPECT_EQ(m.push("Nope"), "ENope");  // "EN" + "o" cannot continue "END"
  EXPECT_EQ(m.push("EEN"), "E");
  EXPECT_EQ(m.flush(), "EN");
  bool stopped = true;
  EXPECT_EQ(run({"END"}, {"no match E"}, &stopped), "no match E");
  EXPECT_FALSE(stopped);
}

TEST(StopMatcher, NeverSplitsACharacter) {
  // "é" is two bytes; a stop string starting with it holds the whole character back.
  StopMatcher m({"é!"});
  EXPECT_EQ(m.push("caf\xc3\xa9"), "caf");
  EXPECT_EQ(m.push("?"), "\xc3\xa9?");
  EXPECT_EQ(run({"\xe4\xb8\x96"}, {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"}),
            "\xe4\xbd\xa0\xe5\xa5\xbd");
}

TEST(StopMatcher, NothingAfterTheStop) {
  StopMatcher m({"x"});
  EXPECT_EQ(m.push("axb"), "a");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace deltafin::runtime
