#include "server/service/barrier.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

namespace fleetps::server {
namespace {

TEST_CASE("BarrierManager releases a round when every participant has arrived") {
  BarrierManager m;
  const auto deadline = BarrierManager::Clock::now() + std::chrono::minutes(1);
  uint64_t generations[2] = {0, 0};
  for (uint32_t id = 0; id < 2; ++id) {
    m.Arrive("b", id, 2, deadline, {1.0 + id}, true, [&generations, id](StatusOr<BarrierManager::Result> r) {
      REQUIRE(r.ok());
      CHECK(r->sum == std::vector<double>{3.0});
      generations[id] = r->generation;
    });
  }
  CHECK(generations[0] == 1);
  CHECK(generations[1] == 1);
  CHECK(m.waiting() == 0);
}

// Admission and joining are one critical section: otherwise an arrival racing
// SetJobFailure() can pass the check, join after every waiter has been failed, and wait out
// its deadline. Once SetJobFailure() and the arrival have both returned, nobody is waiting
// and the arrival got Aborted.
TEST_CASE("BarrierManager: an arrival racing SetJobFailure is failed, never left waiting") {
  for (int round = 0; round < 2000; ++round) {
    BarrierManager m;
    std::atomic<bool> go{false};
    std::atomic<int> aborted{0};
    std::thread arrive([&] {
      while (!go.load()) {
      }
      m.Arrive("b", 0, 2, BarrierManager::Clock::now() + std::chrono::minutes(1), {}, false,
               [&aborted](StatusOr<BarrierManager::Result> r) {
                 if (r.status().code() == StatusCode::kAborted) aborted.fetch_add(1);
               });
    });
    std::thread fail([&] {
      while (!go.load()) {
      }
      m.SetJobFailure("trainer 1 is gone");
    });
    go = true;
    arrive.join();
    fail.join();
    REQUIRE(m.waiting() == 0);
    REQUIRE(aborted.load() == 1);
  }
}

}  // namespace
}  // namespace fleetps::server
