// The sd_notify side of the daemons: messages on the socket named by NOTIFY_SOCKET, a
// watchdog that pings while healthy and stops when not, and no-ops outside systemd.
#include "common/systemd/notifier.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>

#include "test/support/notify_socket.h"

namespace fleetps::systemd {
namespace {

using namespace std::chrono_literals;

struct Env {
  Env(const std::string& socket, const std::string& watchdog_usec) {
    ::setenv("NOTIFY_SOCKET", socket.c_str(), 1);
    if (watchdog_usec.empty()) {
      ::unsetenv("WATCHDOG_USEC");
    } else {
      ::setenv("WATCHDOG_USEC", watchdog_usec.c_str(), 1);
      ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
    }
  }
  ~Env() {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
  }
};

TEST_CASE("Ready and Stopping reach the socket of NOTIFY_SOCKET") {
  testing::NotifySocket manager;
  Env env(manager.address(), "");
  Notifier n;
  CHECK(n.enabled());
  CHECK(n.watchdog_period().count() == 0);
  REQUIRE(n.Ready("pserver 0 listening").ok());
  CHECK(manager.Receive(10s) == "READY=1\nSTATUS=pserver 0 listening");
  REQUIRE(n.SetStatus("saving").ok());
  CHECK(manager.Receive(10s) == "STATUS=saving");
  REQUIRE(n.Stopping("draining").ok());
  CHECK(manager.Receive(10s) == "STOPPING=1\nSTATUS=draining");
}

TEST_CASE("Without NOTIFY_SOCKET every call is a no-op") {
  ::unsetenv("NOTIFY_SOCKET");
  Notifier n;
  CHECK_FALSE(n.enabled());
  CHECK(n.Ready("x").ok());
  CHECK(n.Stopping("x").ok());
  n.StartWatchdog([] { return true; });  // no period: no thread
}

TEST_CASE("A socket nobody listens on is an error naming it") {
  Env env("@fleetps-notify-nobody-" + std::to_string(::getpid()), "");
  Notifier n;
  const Status st = n.Ready("x");
  CHECK(st.IsIOError());
  CHECK_THAT(st.message(), Catch::Contains("NOTIFY_SOCKET=@fleetps-notify-nobody"));
}

TEST_CASE("The watchdog pings while healthy and stops pinging when not") {
  testing::NotifySocket manager;
  Env env(manager.address(), "20000");  // 20 ms: pings every 10 ms
  Notifier n;
  CHECK(n.watchdog_period() == std::chrono::microseconds(20000));
  std::atomic<int> checks{0};
  std::atomic<bool> healthy{true};
  n.StartWatchdog([&] {
    ++checks;
    return healthy.load();
  });
  CHECK(manager.Receive(10s) == "WATCHDOG=1");
  CHECK(manager.Receive(10s) == "WATCHDOG=1");
  healthy = false;
  // Pings sent before the flip may still be queued; after them, silence: the thread ended.
  while (manager.Receive(500ms)) {
  }
  const int after = checks.load();
  CHECK_FALSE(manager.Receive(200ms).has_value());
  CHECK(checks.load() == after);
  REQUIRE(n.Stopping("bye").ok());
  CHECK(manager.Receive(10s) == "STOPPING=1\nSTATUS=bye");
}

TEST_CASE("A watchdog for another pid (WATCHDOG_PID) is not ours") {
  testing::NotifySocket manager;
  Env env(manager.address(), "20000");
  ::setenv("WATCHDOG_PID", "1", 1);
  Notifier n;
  CHECK(n.watchdog_period().count() == 0);
}

}  // namespace
}  // namespace fleetps::systemd
