#pragma once
// Test support: the service manager's end of sd_notify(3) — a datagram socket that a test
// points NOTIFY_SOCKET at, and reads the daemon's state messages from.

#include <chrono>
#include <optional>
#include <string>

namespace fleetps::testing {

class NotifySocket {
 public:
  NotifySocket();  // binds an abstract unix datagram socket with a unique name
  ~NotifySocket();
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  // The value for NOTIFY_SOCKET ("@fleetps-notify-<pid>-<n>").
  const std::string& address() const { return address_; }
  // The next message ("READY=1\nSTATUS=..."), or nullopt after `timeout`.
  std::optional<std::string> Receive(std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
  std::string address_;
};

}  // namespace fleetps::testing
