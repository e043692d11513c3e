#pragma once
// Progress of long work for people at a terminal: one status line, rewritten in place,
// instead of a log line every print_interval steps. Off when the stream is not a terminal
// (a file, a pipe, the launcher's logs) or TERM=dumb: the plain log lines stay.
// Thread-safety: Update/Clear from any thread (one mutex).

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace fleetps::trainer {

struct TrainingProgress {
  uint32_t epoch = 0, epochs = 0;
  uint64_t examples = 0;                 // this trainer's, this epoch
  std::optional<uint64_t> expected;      // this epoch's examples when known (the previous epoch's)
  double seconds = 0;                    // since the epoch began
  double loss = 0, auc = 0;              // the last interval's
};

// "epoch 2/5  45% [#########           ] 123456 examples  12345/s  loss 0.45120 auc 0.70120  ETA 0:12";
// without `expected`: no bar, percentage or ETA. `width` is the bar's, in characters.
std::string FormatTrainingProgress(const TrainingProgress& p, int width = 20);

class ProgressLine {
 public:
  // Enabled when `fd` is a terminal and TERM is not "dumb" (`force` decides instead, for tests).
  explicit ProgressLine(int fd = 2, std::optional<bool> force = std::nullopt);
  bool enabled() const { return enabled_; }
  // Rewrites the line with `text`, at most every `min_interval` (the last call within an
  // interval is dropped: the next one shows newer numbers anyway).
  void Update(const std::string& text, std::chrono::milliseconds min_interval = std::chrono::milliseconds(200));
  // Erases the line (before a log line, at the end of the work).
  void Clear();

 private:
  int fd_;
  bool enabled_ = false;
  std::mutex mu_;  // guards the members below
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace fleetps::trainer
