#pragma once
// Stopping a program before its work is done, without losing what it has done.
//
// StopRequest: a flag set once (with a reason) and read from any thread. A trainer checks it
// between steps: it takes no new batch, finishes the steps in flight, pushes their updates (a
// GPU-PS pass is written back), and ends with an error naming the reason.
// StopSignals: SIGTERM and SIGINT as a StopRequest. The first one requests the stop; a
// second one ends the process at once, by that signal. Its handler only writes the signal
// to a pipe, whichever thread it interrupts (a library's threads too); a thread of its own
// reads the pipe and acts. One instance per process; the destructor restores the previous
// handling.

#include <atomic>
#include <csignal>
#include <mutex>
#include <string>
#include <thread>

namespace fleetps {

class StopRequest {
 public:
  // The first request is kept; later ones change nothing. `signo`: the signal that asked for
  // it (StopSignals), 0 for none.
  void Request(const std::string& reason, int signo = 0);
  bool requested() const { return requested_.load(std::memory_order_acquire); }
  // The same for an optional request (null: never requested).
  static bool Requested(const StopRequest* stop) { return stop != nullptr && stop->requested(); }
  std::string reason() const;
  int signal() const;

 private:
  std::atomic<bool> requested_{false};
  mutable std::mutex mu_;  // guards reason_ and signal_
  std::string reason_;
  int signal_ = 0;
};

class StopSignals {
 public:
  // `program` names the process in the log lines ("cpu-trainer").
  StopSignals(StopRequest* stop, std::string program);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Ends the process by `signo` with its default action (after a graceful stop, so that the
  // exit status still says what stopped it: 128 + signo to a shell, "killed by SIGTERM", a
  // clean stop, to systemd).
  [[noreturn]] static void ExitBySignal(int signo);

 private:
  void Run();

  StopRequest* stop_;
  std::string program_;
  int pipe_[2] = {-1, -1};             // the handler writes the signal number to [1]; Run reads [0]
  struct sigaction previous_[2] = {};  // SIGTERM's and SIGINT's
  std::thread thread_;
};

}  // namespace fleetps
