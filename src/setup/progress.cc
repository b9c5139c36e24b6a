// Progress drawing thread and line formatting.
#include "setup/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "setup/files.h"

namespace deltafin::setup {

namespace {

std::string format_eta(double seconds) {
  if (!(seconds >= 0) || seconds > 360000) return "--:--";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

Progress::Progress(std::string label, uint64_t total_bytes, uint64_t done_bytes)
    : label_(std::move(label)),
      total_(total_bytes),
      done_(done_bytes),
      start_done_(done_bytes),
      window_(since_start_),
      window_done_(done_bytes) {
  const char* mode = std::getenv("DELTAFIN_PROGRESS");
  if (mode && std::strcmp(mode, "off") == 0)
    style_ = Style::kOff;
  else if (mode && std::strcmp(mode, "plain") == 0)
    style_ = Style::kPlain;
  else if (mode && std::strcmp(mode, "bar") == 0)
    style_ = Style::kBar;
  else
    style_ = ::isatty(STDERR_FILENO) ? Style::kBar : Style::kPlain;
  long ms = style_ == Style::kBar ? 250 : 10000;
  if (const char* v = std::getenv("DELTAFIN_PROGRESS_INTERVAL_MS"))
    ms = std::max(10L, std::atol(v));
  interval_ = std::chrono::milliseconds(ms);
  if (style_ != Style::kOff) thread_ = std::thread([this] { loop(); });
}

Progress::~Progress() { finish(); }

void Progress::finish() {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    finished_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (style_ != Style::kOff) draw(/*final=*/true);
}

void Progress::loop() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    draw(/*final=*/false);
    lock.lock();
  }
}

void Progress::draw(bool final) {
  const base::SteadyClock::time_point now = base::SteadyClock::now();
  const uint64_t done = done_.load(std::memory_order_relaxed);
  const double window_seconds = window_.seconds_until(now);
  if (window_seconds >= 1.0 || rate_ == 0) {
    if (window_seconds > 0.05) {
      const double r = static_cast<double>(done - window_done_) / window_seconds;
      rate_ = rate_ == 0 ? r : 0.7 * rate_ + 0.3 * r;
      window_.restart(now);
      window_done_ = done;
    }
  }
  double rate = rate_;
  if (final) {
    const double all_seconds = since_start_.seconds_until(now);
    rate = all_seconds > 0 ? static_cast<double>(done - start_done_) / all_seconds : 0;
  }
  const std::string line =
      render(label_, done, total_.load(std::memory_order_relaxed), rate, style_ == Style::kBar);
  if (style_ == Style::kBar)
    std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), final ? "\n" : "");
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

std::string Progress::render(const std::string& label, uint64_t done, uint64_t total,
                             double bytes_per_s, bool bar) {
  const double frac =
      total ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  std::string out = label;
  out.append(": ");
  if (bar) {
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(frac * kWidth);
    out.push_back('[');
    out.append(static_cast<size_t>(filled), '#');
    out.append(static_cast<size_t>(kWidth - filled), '.');
    out.append("] ");
  }
  char buf[160];
  const double eta =
      bytes_per_s > 0 ? static_cast<double>(total > done ? total - done : 0) / bytes_per_s : -1;
  std::snprintf(buf, sizeof buf, "%3d%%  %s / %s  %s/s  ETA %s", static_cast<int>(frac * 100),
                human_bytes(done).c_str(), human_bytes(total).c_str(),
                human_bytes(static_cast<uint64_t>(bytes_per_s)).c_str(),
                done >= total ? "0:00" : format_eta(eta).c_str());
  out.append(buf);
  return out;
}

}  // namespace deltafin::setup
