#include "server/service/barrier.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

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
// its deadline. Once SetJobFailure() and the arrivals have all returned, nobody is waiting
// and every arrival got Aborted (each arrives alone at its own barrier of 2).
TEST_CASE("BarrierManager: arrivals racing SetJobFailure are failed, never left waiting") {
  constexpr int kRounds = 300;
  constexpr uint32_t kThreads = 3;
  constexpr int kArrivals = 200;  // per thread and round
  for (int round = 0; round < kRounds; ++round) {
    BarrierManager m;
    std::atomic<bool> go{false};
    std::atomic<int> aborted{0};
    std::vector<std::thread> arrivals;
    for (uint32_t t = 0; t < kThreads; ++t) {
      arrivals.emplace_back([&m, &go, &aborted, t] {
        while (!go.load()) {
        }
        for (int i = 0; i < kArrivals; ++i) {
          m.Arrive("b" + std::to_string(t) + "." + std::to_string(i), 0, 2,
                   BarrierManager::Clock::now() + std::chrono::minutes(1), {}, false,
                   [&aborted](StatusOr<BarrierManager::Result> r) {
                     if (r.status().code() == StatusCode::kAborted) aborted.fetch_add(1);
                   });
        }
      });
    }
    std::thread fail([&m, &go] {
      while (!go.load()) {
      }
      std::this_thread::yield();
      m.SetJobFailure("trainer 1 is gone");
    });
    go = true;
    for (auto& t : arrivals) t.join();
    fail.join();
    REQUIRE(m.waiting() == 0);
    REQUIRE(aborted.load() == static_cast<int>(kThreads) * kArrivals);
  }
}

}  // namespace
}  // namespace fleetps::server
