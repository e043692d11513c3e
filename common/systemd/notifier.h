#pragma once
// The daemons' side of systemd's service protocol (sd_notify(3), Type=notify units):
// READY=1 once the process serves, STOPPING=1 when it begins to stop, STATUS= lines, and
// WATCHDOG=1 keep-alives when the unit sets WatchdogSec=. libsystemd is used only here.
//
// Outside systemd (NOTIFY_SOCKET unset) every call is a no-op that returns OK, so the
// daemons call it unconditionally. Thread-safety: Ready/Stopping/SetStatus may be called
// from any thread; StartWatchdog once, from the controlling thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace fleetps::systemd {

class Notifier {
 public:
  Notifier();
  ~Notifier();  // stops the watchdog thread
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // True when the process was started by a service manager that listens (NOTIFY_SOCKET).
  bool enabled() const { return enabled_; }
  // The watchdog period the manager asked for (WatchdogSec=, via WATCHDOG_USEC for this
  // pid); zero when none.
  std::chrono::microseconds watchdog_period() const { return watchdog_period_; }

  // READY=1 with STATUS=`status`: the service is up (bound, tables loaded).
  Status Ready(const std::string& status);
  // STOPPING=1 with STATUS=`status`: the service is shutting down (drain, close). Stops
  // the watchdog thread first, so its health check never runs during teardown.
  Status Stopping(const std::string& status);
  Status SetStatus(const std::string& status);

  // With a watchdog period, a thread sends WATCHDOG=1 every half period for as long as
  // `healthy()` returns true (it should check that the service still makes progress, e.g.
  // that an io thread runs a posted task); when it returns false the pings stop, and the
  // manager kills and (Restart=on-failure) restarts the service after the period. Without
  // a period: nothing.
  void StartWatchdog(std::function<bool()> healthy);

 private:
  Status Send(const std::string& state);
  void StopWatchdog();

  bool enabled_ = false;
  std::chrono::microseconds watchdog_period_{0};
  std::mutex mu_;  // guards stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace fleetps::systemd
