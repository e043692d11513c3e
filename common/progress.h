#pragma once
// Progress of long work for people at a terminal, and plain log lines otherwise.
//
// ProgressLine: one status line on a terminal, rewritten in place. Off when the stream is
// not a terminal (a file, a pipe, the launcher's logs, a systemd journal) or TERM=dumb.
// ProgressReporter: one piece of work (loading data, saving or loading a checkpoint): its
// ProgressLine on a terminal, else a log line at most every log_interval (none before the
// first interval has passed, so short work adds nothing to the logs).
// ProgressTicker: work whose size is unknown (waiting on a remote save): a thread that
// reports the time spent every tick until the ticker is destroyed.
// Thread-safety: every method may be called from any thread (one mutex each).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace fleetps {

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

// A snapshot of one piece of work.
struct WorkProgress {
  std::string what;        // "trainer 0: loading data", "pserver 1: saving ckpt/v3"
  uint64_t done = 0;       // pieces finished (files, shard files)
  uint64_t total = 0;      // pieces in all; 0: unknown (no bar, percentage or ETA)
  std::string unit;        // the pieces' name, plural: "files"
  uint64_t items = 0;      // what the finished pieces held (examples, rows)
  std::string items_unit;  // their name, plural; empty: items not shown
  double seconds = 0;      // since the work began
};

// "pserver 0: saving ckpt/v3  50% [##########          ] 2/4 files  120000 rows  60000/s  ETA 0:02";
// without a total: "trainer 0: saving the model to out/model  0:12" (the time spent).
// The rate is items per second; the ETA assumes the pieces left go as fast as the done ones.
std::string FormatWorkProgress(const WorkProgress& p, int width = 20);

class ProgressReporter {
 public:
  using LogFn = std::function<void(const std::string& line)>;
  // `log` (default: an spdlog info line) takes the lines off a terminal. `fd` and `force`:
  // ProgressLine's.
  explicit ProgressReporter(std::chrono::milliseconds log_interval = std::chrono::seconds(10), LogFn log = {},
                            int fd = 2, std::optional<bool> force = std::nullopt);
  ~ProgressReporter();  // erases the line
  bool on_terminal() const { return line_.enabled(); }
  // Shows `p` (its `seconds` filled in from construction when 0). On a terminal at most
  // every `min_interval`; else logged when log_interval has passed since the last line.
  void Update(WorkProgress p, std::chrono::milliseconds min_interval = std::chrono::milliseconds(200));
  // Erases the line; the caller logs the outcome.
  void Done();

 private:
  ProgressLine line_;
  const std::chrono::milliseconds log_interval_;
  const LogFn log_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;                                   // guards last_log_
  std::chrono::steady_clock::time_point last_log_;  // start_ until the first line
};

class ProgressTicker {
 public:
  // Reports {what, seconds} through `reporter` (it outlives the ticker) every `tick`.
  ProgressTicker(ProgressReporter& reporter, std::string what,
                 std::chrono::milliseconds tick = std::chrono::milliseconds(500));
  ~ProgressTicker();  // stops the thread, erases the line
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

 private:
  ProgressReporter& reporter_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace fleetps
