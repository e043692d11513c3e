// MakeTempDir / MakeRunTempDir, and the Catch listener that removes their directories once
// the test case (or the run) that made them has passed. End-to-end tests write data, RocksDB
// tables and checkpoints there (up to ~200 MB a case); kept, they would fill a CI disk.
// This file is linked into every test that makes a directory, which registers the listener.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#define CATCH_CONFIG_EXTERNAL_INTERFACES  // the reporter/listener interfaces
#include <catch2/catch.hpp>

#include "test/support/process.h"

namespace fleetps::testing {
namespace {

// Directories made by this test process that are still to be removed.
class TempDirs {
 public:
  static TempDirs& Get() {
    static auto* dirs = new TempDirs;  // outlives every static destructor that might log
    return *dirs;
  }

  std::string Make(const std::string& prefix, bool for_run) {
    const auto dir = std::filesystem::path(BinaryDir()) / "Testing" / "tmp" /
                     (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::lock_guard<std::mutex> lock(mu_);
    (for_run || !in_case_ ? run_ : case_).push_back(dir.string());
    return dir.string();
  }

  void CaseStarted() {
    std::lock_guard<std::mutex> lock(mu_);
    in_case_ = true;
  }
  // A failed case's directories stay for whoever reads its failure.
  void CaseEnded(bool passed) {
    std::lock_guard<std::mutex> lock(mu_);
    in_case_ = false;
    if (passed) Remove(case_);
    case_.clear();
  }
  void RunEnded(bool passed) {
    std::lock_guard<std::mutex> lock(mu_);
    if (passed) Remove(run_);
    run_.clear();
  }

 private:
  static void Remove(const std::vector<std::string>& dirs) {
    const char* keep = std::getenv("FLEETPS_KEEP_TEST_TMP");
    if (keep != nullptr && std::string(keep) == "1") return;
    for (const auto& dir : dirs) {
      std::error_code ec;  // a file a straggling child still writes: best effort
      std::filesystem::remove_all(dir, ec);
    }
  }

  std::atomic<int> counter_{0};  // unique names within this test process
  std::mutex mu_;
  bool in_case_ = false;
  std::vector<std::string> case_;
  std::vector<std::string> run_;
};

class TempDirListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    TempDirs::Get().CaseStarted();
  }
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    TempDirs::Get().CaseEnded(stats.totals.assertions.allOk() && !stats.aborting);
    TestEventListenerBase::testCaseEnded(stats);
  }
  void testRunEnded(const Catch::TestRunStats& stats) override {
    TempDirs::Get().RunEnded(stats.totals.assertions.allOk() && stats.totals.testCases.allOk() && !stats.aborting);
    TestEventListenerBase::testRunEnded(stats);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(TempDirListener)

std::string MakeTempDir(const std::string& prefix) { return TempDirs::Get().Make(prefix, /*for_run=*/false); }
std::string MakeRunTempDir(const std::string& prefix) { return TempDirs::Get().Make(prefix, /*for_run=*/true); }

}  // namespace fleetps::testing
