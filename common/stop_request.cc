#include "common/stop_request.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "common/check.h"

namespace fleetps {

void StopRequest::Request(const std::string& reason, int signo) {
  std::lock_guard<std::mutex> lock(mu_);
  if (requested_.load(std::memory_order_relaxed)) return;
  reason_ = reason;
  signal_ = signo;
  requested_.store(true, std::memory_order_release);
}

std::string StopRequest::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

int StopRequest::signal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return signal_;
}

namespace {

// The write end of the StopSignals' pipe, or -1: a signal handler reaches its process's
// state through a static only (a lock-free atomic, read with one write(2): async-signal-safe).
std::atomic<int> signal_pipe{-1};

void OnStopSignal(int signo) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  const int fd = signal_pipe.load();
  if (fd >= 0) {
    const ssize_t n = ::write(fd, &byte, 1);  // a full pipe drops it: a stop is already pending
    (void)n;
  }
  errno = saved;
}

constexpr int kSignals[2] = {SIGTERM, SIGINT};

}  // namespace

StopSignals::StopSignals(StopRequest* stop, std::string program) : stop_(stop), program_(std::move(program)) {
  FLEETPS_CHECK(::pipe2(pipe_, O_CLOEXEC) == 0) << "pipe2: " << std::strerror(errno);
  FLEETPS_CHECK(signal_pipe.exchange(pipe_[1]) == -1) << "one StopSignals per process";
  thread_ = std::thread([this] { Run(); });
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &action, &previous_[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  signal_pipe.store(-1);
  const unsigned char wake = 0;  // not a signal: ends Run
  const ssize_t n = ::write(pipe_[1], &wake, 1);
  (void)n;
  thread_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void StopSignals::Run() {
  while (true) {
    unsigned char byte = 0;
    const ssize_t n = ::read(pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || byte == 0) return;
    const int signo = byte;
    const char* name = signo == SIGTERM ? "SIGTERM" : "SIGINT";
    if (stop_->requested()) {
      spdlog::error("{}: a second {}: exiting at once", program_, name);
      ExitBySignal(signo);
    }
    spdlog::warn(
        "{}: {}: stopping: no new batches; the steps in flight finish and their updates are written to the "
        "pservers (send it again to exit at once)",
        program_, name);
    stop_->Request(std::string("stopped by ") + name, signo);
  }
}

void StopSignals::ExitBySignal(int signo) {
  spdlog::default_logger()->flush();
  std::signal(signo, SIG_DFL);
  std::raise(signo);
  std::_Exit(128 + signo);  // not reached: the default action of SIGTERM and SIGINT ends the process
}

}  // namespace fleetps
