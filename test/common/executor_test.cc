#include "common/executor.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace fleetps {
namespace {

TEST_CASE("ExecutorPool runs a lane's tasks in order on one thread") {
  ExecutorPool pool(3);
  constexpr int kLanes = 6, kTasks = 2000;
  std::vector<std::vector<int>> seen(kLanes);
  std::vector<std::thread::id> owner(kLanes);
  std::mutex mu;
  std::atomic<int> done{0};
  for (int t = 0; t < kTasks; ++t) {
    for (int lane = 0; lane < kLanes; ++lane) {
      pool.Post(lane, [&, lane, t] {
        // Lanes mapping to the same thread never run concurrently, so no lock is
        // needed for seen[lane]; owner is checked under a lock for the test only.
        seen[lane].push_back(t);
        std::lock_guard<std::mutex> lock(mu);
        if (t == 0) owner[lane] = std::this_thread::get_id();
        REQUIRE(owner[lane] == std::this_thread::get_id());
        ++done;
      });
    }
  }
  pool.Stop();  // runs everything already posted
  CHECK(done == kLanes * kTasks);
  for (int lane = 0; lane < kLanes; ++lane) {
    REQUIRE(seen[lane].size() == kTasks);
    for (int t = 0; t < kTasks; ++t) REQUIRE(seen[lane][t] == t);
  }
  CHECK(owner[0] == owner[3]);  // lane i runs on thread i % 3
}

TEST_CASE("A task that throws does not end its lane: the lane's later tasks still run, in order") {
  ExecutorPool pool(1);
  std::vector<int> ran;
  pool.Post(0, [&] { ran.push_back(1); });
  pool.Post(0, [] { throw std::runtime_error("a bug in one task"); });
  pool.Post(0, [] { throw 42; });  // not even a std::exception
  pool.Post(0, [&] { ran.push_back(2); });
  pool.Stop();
  CHECK(ran == std::vector<int>{1, 2});
}

}  // namespace
}  // namespace fleetps
