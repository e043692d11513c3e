#include "trainer/runtime/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fleetps::trainer {

std::string FormatTrainingProgress(const TrainingProgress& p, int width) {
  char buf[256];
  const double rate = p.seconds > 0 ? p.examples / p.seconds : 0;
  std::string out = "epoch " + std::to_string(p.epoch) + "/" + std::to_string(p.epochs);
  if (p.expected && *p.expected > 0) {
    const double frac = std::min(1.0, static_cast<double>(p.examples) / static_cast<double>(*p.expected));
    const int filled = static_cast<int>(frac * width + 0.5);
    std::snprintf(buf, sizeof(buf), " %3.0f%% [", frac * 100);
    out += buf;
    out += std::string(filled, '#') + std::string(width - filled, ' ') + "]";
  }
  std::snprintf(buf, sizeof(buf), " %llu examples  %.0f/s  loss %.5f auc %.5f",
                static_cast<unsigned long long>(p.examples), rate, p.loss, p.auc);
  out += buf;
  if (p.expected && rate > 0) {
    const uint64_t left = *p.expected > p.examples ? *p.expected - p.examples : 0;
    const long eta = static_cast<long>(left / rate + 0.5);
    std::snprintf(buf, sizeof(buf), "  ETA %ld:%02ld", eta / 60, eta % 60);
    out += buf;
  }
  return out;
}

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

}  // namespace fleetps::trainer
