#include "trainer/runtime/progress.h"

#include <algorithm>
#include <cstdio>

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

}  // namespace fleetps::trainer
