// base::Stopwatch: time elapsed on the steady clock, in seconds or milliseconds, so that measuring
// how long something took never spells out a chrono duration cast.
#pragma once

#include <chrono>

namespace deltafin::base {

using SteadyClock = std::chrono::steady_clock;

// The time from `from` to `to` (negative when `to` is earlier).
inline double seconds_between(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}
inline double ms_between(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

class Stopwatch {
 public:
  // Starts now.
  Stopwatch() : start_(SteadyClock::now()) {}

  SteadyClock::time_point start() const { return start_; }
  double elapsed_seconds() const { return seconds_between(start_, SteadyClock::now()); }
  double elapsed_ms() const { return ms_between(start_, SteadyClock::now()); }
  // Seconds from the start to `t`, for a caller that needs the end point itself (a timeline span).
  double seconds_until(SteadyClock::time_point t) const { return seconds_between(start_, t); }
  // The seconds elapsed, starting over from now: consecutive laps share their boundaries.
  double lap_seconds() {
    const SteadyClock::time_point now = SteadyClock::now();
    const double s = seconds_between(start_, now);
    start_ = now;
    return s;
  }
  void restart(SteadyClock::time_point at = SteadyClock::now()) { start_ = at; }

 private:
  SteadyClock::time_point start_;
};

}  // namespace deltafin::base
