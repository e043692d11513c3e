#include "common/systemd/notifier.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>

namespace fleetps::systemd {

Notifier::Notifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  if (enabled_ && sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0) {
    watchdog_period_ = std::chrono::microseconds(usec);
  }
}

Notifier::~Notifier() { StopWatchdog(); }

void Notifier::StopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

Status Notifier::Send(const std::string& state) {
  if (!enabled_) return Status::OK();
  const int rc = sd_notify(/*unset_environment=*/0, state.c_str());
  if (rc < 0) {
    return Status::IOError("sd_notify(" + state.substr(0, state.find('\n')) +
                           ") to NOTIFY_SOCKET=" + std::getenv("NOTIFY_SOCKET") + ": " + std::strerror(-rc));
  }
  return Status::OK();
}

Status Notifier::Ready(const std::string& status) { return Send("READY=1\nSTATUS=" + status); }
Status Notifier::Stopping(const std::string& status) {
  StopWatchdog();
  return Send("STOPPING=1\nSTATUS=" + status);
}
Status Notifier::SetStatus(const std::string& status) { return Send("STATUS=" + status); }

void Notifier::StartWatchdog(std::function<bool()> healthy) {
  std::lock_guard<std::mutex> lock(mu_);
  if (watchdog_period_.count() == 0 || watchdog_.joinable() || stop_) return;
  watchdog_ = std::thread([this, healthy = std::move(healthy)] {
    const auto every = watchdog_period_ / 2;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      const bool ok = healthy();
      if (ok) Send("WATCHDOG=1").IgnoreError();  // a lost ping is retried next period
      lock.lock();
      if (!ok) break;  // unhealthy: let the manager's watchdog fire
      cv_.wait_for(lock, every, [this] { return stop_; });
    }
  });
}

}  // namespace fleetps::systemd
