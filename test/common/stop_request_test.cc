// StopRequest keeps its first reason; StopSignals turns a SIGTERM or SIGINT delivered to this
// process into a stop request instead of its end, and restores the previous handling.
#include "common/stop_request.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <thread>

namespace fleetps {
namespace {

// Waits up to 5 s for `stop` to be requested.
bool Requested(const StopRequest& stop) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!stop.requested() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return stop.requested();
}

TEST_CASE("A StopRequest keeps the first reason") {
  StopRequest stop;
  CHECK_FALSE(stop.requested());
  CHECK(stop.signal() == 0);
  stop.Request("first");
  stop.Request("second");
  CHECK(stop.requested());
  CHECK(stop.reason() == "first");
}

TEST_CASE("StopSignals: a SIGTERM or SIGINT requests the stop; the handling is restored afterwards") {
  const int signo = GENERATE(SIGTERM, SIGINT);
  struct sigaction before = {};
  REQUIRE(::sigaction(signo, nullptr, &before) == 0);
  StopRequest stop;
  {
    StopSignals signals(&stop, "stop_request_test");
    // Raised in this thread, which also runs the handler: the process goes on.
    REQUIRE(std::raise(signo) == 0);
    REQUIRE(Requested(stop));
    CHECK(stop.signal() == signo);
    CHECK(stop.reason() == std::string("stopped by ") + (signo == SIGTERM ? "SIGTERM" : "SIGINT"));
  }
  struct sigaction after = {};
  REQUIRE(::sigaction(signo, nullptr, &after) == 0);
  CHECK(after.sa_handler == before.sa_handler);
  // A second StopSignals may be made once the first is gone (one at a time per process).
  StopRequest again;
  StopSignals signals(&again, "stop_request_test");
  CHECK_FALSE(again.requested());
}

}  // namespace
}  // namespace fleetps
