#include "test/support/notify_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "common/check.h"

namespace fleetps::testing {

NotifySocket::NotifySocket() {
  static std::atomic<int> counter{0};
  address_ = "@fleetps-notify-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  FLEETPS_CHECK(fd_ >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL instead of the '@'.
  std::memcpy(addr.sun_path + 1, address_.data() + 1, address_.size() - 1);
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
  FLEETPS_CHECK(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0) << std::strerror(errno);
}

NotifySocket::~NotifySocket() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<std::string> NotifySocket::Receive(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
  char buf[4096];
  const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
  if (n < 0) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace fleetps::testing
