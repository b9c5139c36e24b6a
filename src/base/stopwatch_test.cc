// base::Stopwatch: the conversions are exact for exact durations, readings only grow, and laps
// start the next interval where the last one ended.
#include "base/stopwatch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace deltafin::base {
namespace {

using std::chrono::milliseconds;

TEST(Stopwatch, ConvertsDurationsBetweenTimePoints) {
  const SteadyClock::time_point t0 = SteadyClock::now();
  EXPECT_EQ(seconds_between(t0, t0 + milliseconds(1500)), 1.5);
  EXPECT_EQ(ms_between(t0, t0 + milliseconds(1500)), 1500.0);
  EXPECT_EQ(ms_between(t0, t0 + std::chrono::microseconds(250)), 0.25);
  EXPECT_EQ(seconds_between(t0 + milliseconds(500), t0), -0.5);
}

TEST(Stopwatch, ElapsedTimeCountsFromTheStartAndOnlyGrows) {
  const Stopwatch watch;
  EXPECT_EQ(watch.seconds_until(watch.start() + milliseconds(250)), 0.25);
  std::this_thread::sleep_for(milliseconds(20));
  const double s = watch.elapsed_seconds();
  const double ms = watch.elapsed_ms();
  EXPECT_GE(s, 0.020);
  EXPECT_GE(ms, 20.0);
  EXPECT_GE(ms, s * 1e3);  // read later
  EXPECT_GE(watch.elapsed_seconds(), s);
}

TEST(Stopwatch, ALapRestartsTheWatchWhereItEnded) {
  Stopwatch watch;
  const SteadyClock::time_point first = watch.start();
  std::this_thread::sleep_for(milliseconds(10));
  const double lap = watch.lap_seconds();
  EXPECT_GE(lap, 0.010);
  EXPECT_EQ(seconds_between(first, watch.start()), lap);  // the next lap starts at this one's end
  const SteadyClock::time_point at = first + milliseconds(3);
  watch.restart(at);
  EXPECT_EQ(watch.start(), at);
  watch.restart();
  EXPECT_GT(watch.start(), at);
}

}  // namespace
}  // namespace deltafin::base
