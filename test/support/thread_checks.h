#pragma once
// ThreadChecks: assertions for a test's own threads (ranks, workers). Catch2's assertions
// are not thread-safe, and a failed REQUIRE throws, which ends the whole process when it
// leaves a thread; so the threads record what failed here, and the test's thread reports
// it with Require() once they have joined.

#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

namespace fleetps::testing {

class ThreadChecks {
 public:
  // Records `what` when !ok. Returns ok, so a thread can stop at its first failure.
  bool operator()(bool ok, const std::string& what) {
    if (ok) return true;
    std::lock_guard<std::mutex> lock(mu_);
    failed_.push_back(what);
    return false;
  }
  // On the test's thread, after the threads joined: each recorded failure, then REQUIRE none.
  void Require() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& what : failed_) FAIL_CHECK(what);
    REQUIRE(failed_.empty());
  }

 private:
  std::mutex mu_;
  std::vector<std::string> failed_;
};

}  // namespace fleetps::testing
