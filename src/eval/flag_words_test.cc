// Splitting a variant's flag string and laying it over the exact path's flags.
#include "eval/flag_words.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace deltafin::eval {
namespace {

using Words = std::vector<std::string>;

TEST(SplitFlags, WordsAndQuotes) {
  EXPECT_EQ(split_flags(""), Words{});
  EXPECT_EQ(split_flags("  --experts   stream\t--no-prefetch "),
            (Words{"--experts", "stream", "--no-prefetch"}));
  EXPECT_EQ(split_flags("--trace-routes '/tmp/a b.json' --x=\"1 2\""),
            (Words{"--trace-routes", "/tmp/a b.json", "--x=1 2"}));
  EXPECT_EQ(split_flags("--memory-budget ''"), (Words{"--memory-budget", ""}));
  EXPECT_THROW(split_flags("--a 'open"), base::Error);
}

TEST(MergeFlags, TheVariantsValueWins) {
  const Words base{"--experts", "mapped", "--no-prefetch", "--chunk=64"};
  // Replaced in place, whatever the spelling; new options go after.
  EXPECT_EQ(merge_flags(base, {"--experts", "stream", "--chunk", "3", "--spine", "stream"}),
            (Words{"--experts", "stream", "--no-prefetch", "--chunk", "3", "--spine", "stream"}));
  EXPECT_EQ(merge_flags(base, {"--experts=stream"}),
            (Words{"--experts=stream", "--no-prefetch", "--chunk=64"}));
  EXPECT_EQ(merge_flags({}, {"--no-prefetch"}), (Words{"--no-prefetch"}));
  EXPECT_EQ(merge_flags(base, {}), base);
  // A bare flag followed by an option takes no value; a stray word stays for the parser to refuse.
  EXPECT_EQ(merge_flags({"--no-prefetch", "--spine", "stream"}, {"stray"}),
            (Words{"--no-prefetch", "--spine", "stream", "stray"}));
}

}  // namespace
}  // namespace deltafin::eval
