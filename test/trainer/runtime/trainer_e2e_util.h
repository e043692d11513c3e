#pragma once
// The fixtures of trainer_e2e_test (trainer_e2e_test.cc, trainer_online_e2e_test.cc): a
// working directory with generated data and a job YAML, runs of the real cpu-trainer, and
// what their reports, data and checkpoints hold.
#include <signal.h>

#include <catch2/catch.hpp>
#include <regex>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "test/support/job.h"
#include "test/support/process.h"

namespace fleetps::trainer_e2e {

using testing::ChildProcess;

constexpr double kAucFloor = 0.60;  // untrained: ~0.5; trained on this data: ~0.65-0.7

struct Workdir {
  std::string dir = testing::MakeTempDir("trainer_e2e");
  // `runner_extra`, `fleetps_extra`: more `runner:` and `fleetps:` keys, each line indented by
  // two spaces.
  explicit Workdir(const std::string& runner_extra = "", const std::string& fleetps_extra = "") {
    REQUIRE(testing::GenerateData(dir, {"--rows", "60000", "--train-files", "2"}));
    testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/train"
  test_data_dir: "data/test"
  train_batch_size: 256
  infer_batch_size: 1024
  thread_num: 1
  epochs: 2
  print_interval: 50
  geo_step: 10
  model_save_path: "model"
)" + runner_extra + R"(
)" + testing::kSmallCtrDnnModel + R"(fleetps:
  sparse_table: {shards: 4}
  server: {io_threads: 1, shard_threads: 1}
)" + fleetps_extra);
  }
};

// The test AUC of a report; fails the test when the report has none.
inline double TestAuc(const std::string& report) {
  const double auc = testing::ReportTestAuc(report);
  REQUIRE_FALSE(std::isnan(auc));
  return auc;
}

inline double TrainerRun(const Workdir& w, const std::string& name, const std::vector<std::string>& extra,
                         const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml",
                                   "--report", w.dir + "/" + name + ".json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  ChildProcess p;
  REQUIRE(p.Start(argv, env, w.dir + "/" + name + ".log"));
  const int rc = p.Wait(std::chrono::seconds(120));
  INFO(testing::ReadFile(w.dir + "/" + name + ".log"));
  REQUIRE(rc == 0);
  return TestAuc(w.dir + "/" + name + ".json");
}

// Examples trainer `report` trained in `epoch` (1-based).
inline uint64_t EpochExamples(const std::string& report, int epoch) {
  const std::string text = testing::ReadFile(report);
  const std::string key = "\"epoch\": " + std::to_string(epoch) + ", \"examples\": ";
  const size_t at = text.find(key);
  REQUIRE(at != std::string::npos);
  return std::stoull(text.substr(at + key.size()));
}

// The sparse ids of the rank_dnn lines in `path` (tokens "<slot number>:<id>").
inline std::set<uint64_t> DataIds(const std::string& path) {
  std::set<uint64_t> ids;
  std::istringstream text(testing::ReadFile(path));
  for (std::string token; text >> token;) {
    const size_t colon = token.find(':');
    if (colon == std::string::npos || !std::isdigit(static_cast<unsigned char>(token[0]))) continue;
    ids.insert(std::stoull(token.substr(colon + 1)));
  }
  return ids;
}

// The keys of the sparse rows pserver_tool dumps from checkpoint `dir` (table 0).
inline std::set<uint64_t> DumpedKeys(const std::string& dir, const std::string& log) {
  ChildProcess dump;
  REQUIRE(dump.Start(
      {testing::BinaryPath("tools/pserver_tool/pserver_tool"), "dump", dir, "--table", "0", "--limit", "100000000"}, {},
      log));
  REQUIRE(dump.Wait(std::chrono::seconds(60)) == 0);
  std::set<uint64_t> keys;
  std::istringstream rows(testing::ReadFile(log));
  for (std::string line; std::getline(rows, line);) {
    std::istringstream fields(line);
    uint64_t key;
    if (fields >> key) keys.insert(key);
  }
  return keys;
}

}  // namespace fleetps::trainer_e2e
