// The timeline recorder: nothing is kept while off, spans and phases land in a Chrome trace file
// with their tracks and arguments, and a path that cannot be created is refused up front.
#include "base/timeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "base/error.h"

namespace deltafin::base::timeline {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Timeline, RecordsOnlyBetweenBeginAndFinish) {
  const std::string path = ::testing::TempDir() + "timeline_test.json";
  EXPECT_FALSE(on());
  { Phase ignored("before begin"); }
  finish();  // not recording: nothing to write, no error
  begin(path);
  EXPECT_TRUE(on());
  {
    Phase outer("decode step");
    Phase inner("attention", 3);
  }
  const Clock::time_point t0 = Clock::now();
  span(kDiskLane + 2, "demand", "read", t0, t0 + std::chrono::milliseconds(5), "\"bytes\":17");
  finish();
  EXPECT_FALSE(on());
  { Phase ignored("after finish"); }

  const std::string json = read_all(path);
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0), 0u) << json;
  EXPECT_NE(json.find("\"name\":\"decode step\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"name\":\"attention\",\"cat\":\"compute\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"args\":{\"layer\":3}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"tid\":102,\"name\":\"demand\",\"cat\":\"read\""), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"dur\":5000.0"), std::string::npos) << json;  // microseconds
  EXPECT_NE(json.find("\"args\":{\"name\":\"disk read 2\"}"), std::string::npos) << json;
  EXPECT_EQ(json.find("before begin"), std::string::npos);
  EXPECT_EQ(json.find("after finish"), std::string::npos);
  EXPECT_EQ(json.substr(json.size() - 4), "\n]}\n");
}

TEST(Timeline, KeepsAtMostItsLimitAndSaysHowManyItDropped) {
  const std::string path = ::testing::TempDir() + "timeline_limit_test.json";
  begin(path, 3);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 5; ++i) span(kCompute, "step", "compute", t0, t0);
  finish();
  const std::string json = read_all(path);
  size_t kept = 0;
  for (size_t at = json.find("\"ph\":\"X\""); at != std::string::npos;
       at = json.find("\"ph\":\"X\"", at + 1))
    ++kept;
  EXPECT_EQ(kept, 3u) << json;
  EXPECT_NE(json.find("\"name\":\"2 events dropped after the first 3\""), std::string::npos)
      << json;
}

TEST(Timeline, RefusesAPathItCannotCreate) {
  try {
    begin("/nonexistent-dir/timeline.json");
    FAIL() << "begin accepted a path in a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--trace-timeline /nonexistent-dir/timeline.json"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(on());
}

}  // namespace
}  // namespace deltafin::base::timeline
