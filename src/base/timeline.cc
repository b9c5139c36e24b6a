// Timeline: events kept in memory under one mutex (a token makes a few hundred, far fewer than the
// work between them) and written once, at finish(), as {"traceEvents":[...]} with times in
// microseconds since begin().
#include "base/timeline.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/log.h"

namespace deltafin::base::timeline {
namespace {

struct Event {
  int track;
  const char* name;
  const char* category;
  Clock::time_point t0, t1;
  std::string args_json;
};

struct Recorder {
  std::mutex mu;
  std::FILE* out = nullptr;
  std::string path;
  Clock::time_point origin;
  std::vector<Event> events;
  size_t max_events = 0;
  uint64_t dropped = 0;  // events past max_events
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

double micros(Clock::time_point t, Clock::time_point origin) {
  return std::chrono::duration<double, std::micro>(t - origin).count();
}

const char* track_name(int track) { return track == kCompute ? "forward pass" : "disk read"; }

}  // namespace

void begin(const std::string& path, size_t max_events) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.out != nullptr) fail("--trace-timeline: a timeline is already being recorded");
  r.out = std::fopen(path.c_str(), "w");
  if (r.out == nullptr) fail("--trace-timeline ", path, ": ", std::strerror(errno));
  r.path = path;
  r.origin = Clock::now();
  r.events.clear();
  r.max_events = max_events;
  r.dropped = 0;
  detail::recording.store(true, std::memory_order_relaxed);
}

void finish() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  detail::recording.store(false, std::memory_order_relaxed);
  if (r.out == nullptr) return;
  std::FILE* f = r.out;
  std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  bool first = true;
  std::vector<int> named;
  for (const Event& e : r.events) {
    bool seen = false;
    for (int t : named) seen = seen || t == e.track;
    if (!seen) {
      named.push_back(e.track);
      std::fprintf(f,
                   "%s{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{"
                   "\"name\":\"%s %d\"}}",
                   first ? "" : ",\n", e.track, track_name(e.track),
                   e.track == kCompute ? 0 : e.track - kDiskLane);
      first = false;
    }
    std::fprintf(f,
                 ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"name\":\"%s\",\"cat\":\"%s\",\"ts\":%.1f,"
                 "\"dur\":%.1f,\"args\":{%s}}",
                 e.track, e.name, e.category, micros(e.t0, r.origin),
                 micros(e.t1, r.origin) - micros(e.t0, r.origin), e.args_json.c_str());
  }
  if (r.dropped > 0) {  // a point at the end, where a viewer shows it
    std::fprintf(f,
                 "%s{\"ph\":\"i\",\"s\":\"g\",\"pid\":1,\"tid\":%d,\"ts\":%.1f,"
                 "\"name\":\"%llu events dropped after the first %zu\"}",
                 first ? "" : ",\n", kCompute, micros(Clock::now(), r.origin),
                 static_cast<unsigned long long>(r.dropped), r.max_events);
  }
  std::fprintf(f, "\n]}\n");
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  r.out = nullptr;
  r.events.clear();
  if (failed) fail("--trace-timeline ", r.path, ": write failed");
  if (r.dropped > 0) {
    log_warn("--trace-timeline ", r.path, ": kept the first ", r.max_events, " events, dropped ",
             r.dropped);
  }
}

void span(int track, const char* name, const char* category, Clock::time_point t0,
          Clock::time_point t1, std::string args_json) {
  if (!on()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.out == nullptr) return;
  if (r.events.size() >= r.max_events) {
    ++r.dropped;
    return;
  }
  r.events.push_back({track, name, category, t0, t1, std::move(args_json)});
}

Phase::~Phase() {
  if (name_ == nullptr) return;
  span(kCompute, name_, "compute", t0_, Clock::now(),
       layer_ >= 0 ? str_cat("\"layer\":", layer_) : std::string());
}

}  // namespace deltafin::base::timeline
