#include "common/mutex.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <thread>
#include <vector>

namespace fleetps {
namespace {

// A counter and a flag guarded as the annotated classes guard theirs; the clang tree
// compiles this file with -Wthread-safety as an error, so it also checks the annotations.
class Guarded {
 public:
  void Add(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    count_ += n;
  }
  int count() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return count_;
  }
  void Open() EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Waits until Open(); false when `timeout` passes first.
  bool WaitOpen(std::chrono::milliseconds timeout) EXCLUDES(mu_) {
    UniqueLock lock(mu_);
    return cv_.wait_for(lock.native(), timeout, [this]() REQUIRES(mu_) { return open_; });
  }
  bool TryTouch() EXCLUDES(mu_) {
    if (!mu_.TryLock()) return false;
    ++count_;
    mu_.Unlock();
    return true;
  }
  Mutex& mu() { return mu_; }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  int count_ GUARDED_BY(mu_) = 0;
  bool open_ GUARDED_BY(mu_) = false;
};

TEST_CASE("MutexLock serialises the threads that take it") {
  Guarded g;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&g] {
      for (int i = 0; i < 10000; ++i) g.Add(1);
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(g.count() == 40000);
}

TEST_CASE("TryLock fails while another lock holds the mutex") {
  Guarded g;
  {
    MutexLock lock(g.mu());
    bool touched = true;
    std::thread other([&g, &touched] { touched = g.TryTouch(); });
    other.join();
    REQUIRE_FALSE(touched);
  }
  REQUIRE(g.TryTouch());
  REQUIRE(g.count() == 1);
}

TEST_CASE("UniqueLock waits on a condition variable and holds the mutex again after") {
  Guarded g;
  REQUIRE_FALSE(g.WaitOpen(std::chrono::milliseconds(10)));
  std::thread opener([&g] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    g.Open();
  });
  REQUIRE(g.WaitOpen(std::chrono::seconds(30)));
  opener.join();
  // The wait gave the mutex back: another thread can take it.
  std::thread adder([&g] { g.Add(2); });
  adder.join();
  REQUIRE(g.count() == 2);
}

}  // namespace
}  // namespace fleetps
