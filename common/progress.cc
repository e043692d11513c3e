#include "common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

namespace fleetps {

namespace {

std::string MinutesSeconds(double seconds) {
  const long s = static_cast<long>(std::max(0.0, seconds) + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

ProgressLine::ProgressLine(int fd, std::optional<bool> force) : fd_(fd) {
  if (force) {
    enabled_ = *force;
  } else {
    const char* term = std::getenv("TERM");
    enabled_ = ::isatty(fd) == 1 && !(term != nullptr && std::strcmp(term, "dumb") == 0);
  }
}

void ProgressLine::Update(const std::string& text, std::chrono::milliseconds min_interval) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_ < min_interval) return;
  last_ = now;
  shown_ = true;
  const std::string line = "\r\033[K" + text;
  (void)!::write(fd_, line.data(), line.size());
}

void ProgressLine::Clear() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!shown_) return;
  shown_ = false;
  (void)!::write(fd_, "\r\033[K", 4);
}

std::string FormatWorkProgress(const WorkProgress& p, int width) {
  char buf[128];
  std::string out = p.what;
  if (p.total > 0) {
    const double frac = std::min(1.0, static_cast<double>(p.done) / static_cast<double>(p.total));
    const int filled = static_cast<int>(frac * width + 0.5);
    std::snprintf(buf, sizeof(buf), "  %3.0f%% [", frac * 100);
    out += buf;
    out += std::string(filled, '#') + std::string(width - filled, ' ') + "] " + std::to_string(p.done) + "/" +
           std::to_string(p.total) + " " + p.unit;
  }
  if (!p.items_unit.empty()) {
    out += "  " + std::to_string(p.items) + " " + p.items_unit;
    if (p.seconds > 0) {
      std::snprintf(buf, sizeof(buf), "  %.0f/s", static_cast<double>(p.items) / p.seconds);
      out += buf;
    }
  }
  if (p.total == 0) {
    out += "  " + MinutesSeconds(p.seconds);
  } else if (p.done > 0 && p.done < p.total) {
    out += "  ETA " + MinutesSeconds(p.seconds / static_cast<double>(p.done) * static_cast<double>(p.total - p.done));
  }
  return out;
}

ProgressReporter::ProgressReporter(std::chrono::milliseconds log_interval, LogFn log, int fd, std::optional<bool> force)
    : line_(fd, force),
      log_interval_(log_interval),
      log_(log ? std::move(log) : LogFn([](const std::string& line) { spdlog::info("{}", line); })),
      start_(std::chrono::steady_clock::now()),
      last_log_(start_) {}

ProgressReporter::~ProgressReporter() { Done(); }

void ProgressReporter::Update(WorkProgress p, std::chrono::milliseconds min_interval) {
  const auto now = std::chrono::steady_clock::now();
  if (p.seconds == 0) p.seconds = std::chrono::duration<double>(now - start_).count();
  if (line_.enabled()) return line_.Update(FormatWorkProgress(p), min_interval);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - last_log_ < log_interval_) return;
    last_log_ = now;
  }
  log_(FormatWorkProgress(p));
}

void ProgressReporter::Done() { line_.Clear(); }

ProgressTicker::ProgressTicker(ProgressReporter& reporter, std::string what, std::chrono::milliseconds tick)
    : reporter_(reporter) {
  thread_ = std::thread([this, what = std::move(what), tick] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, tick, [this] { return stop_; })) {
      WorkProgress p;
      p.what = what;
      reporter_.Update(p, std::chrono::milliseconds(0));
    }
  });
}

ProgressTicker::~ProgressTicker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  reporter_.Done();
}

}  // namespace fleetps
