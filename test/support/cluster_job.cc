#include "test/support/cluster_job.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <memory>

#include "test/support/job.h"
#include "test/support/process.h"

namespace fleetps::testing {
namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;

// The roles' environment (Paddle's variables) on three free ports: two pservers, one
// heter-trainer.
struct Cluster {
  std::vector<uint16_t> ports = FreePorts(3);
  std::string pservers = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  Env common;

  explicit Cluster(bool heter) {
    common = {{"PADDLE_PSERVERS_IP_PORT_LIST", pservers}, {"PADDLE_TRAINERS_NUM", "2"}};
    if (heter) {
      common.insert({{"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "127.0.0.1:" + std::to_string(ports[2])},
                     {"STAGE_NUM", "2"},
                     {"PADDLE_STAGE_TRAINERS_NUM", "[2, 1]"}});
    }
  }
  Env Role(Env extra) const {
    extra.insert(common.begin(), common.end());
    return extra;
  }
};

}  // namespace

JobLogs RunJob(const std::string& dir, const std::string& mode, const std::vector<std::string>& trainer_args) {
  const std::string yaml_path = dir + "/job.yaml";
  auto trainer_argv = [&](int i) {
    std::vector<std::string> argv = {BinaryPath("trainer/cpu-trainer"), "--config", yaml_path};
    argv.insert(argv.end(), trainer_args.begin(), trainer_args.end());
    argv.insert(argv.end(), {"--report", dir + "/report" + std::to_string(i) + ".json"});
    return argv;
  };
  JobLogs logs;
  auto read_logs = [&](const std::vector<std::string>& names) {
    for (const auto& name : names) logs.all += "\n" + name + ":\n" + ReadFile(dir + "/" + name);
  };
  if (mode == "local") {
    ChildProcess trainer;
    REQUIRE(trainer.Start(trainer_argv(0), {}, dir + "/trainer0.log"));
    const int rc = trainer.Wait(120s);
    logs.trainer0 = ReadFile(dir + "/trainer0.log");
    INFO(logs.trainer0);
    REQUIRE(rc == 0);
    return logs;
  }
  const bool heter = mode == "heter";
  const Cluster cluster(heter);
  std::unique_ptr<ChildProcess> servers[2];
  for (int i = 0; i < 2; ++i) {
    servers[i] = std::make_unique<ChildProcess>();
    REQUIRE(servers[i]->Start(
        {BinaryPath("server/pserver"), "--config", yaml_path},
        cluster.Role(
            {{"TRAINING_ROLE", "PSERVER"}, {"POD_IP", "127.0.0.1"}, {"PADDLE_PORT", std::to_string(cluster.ports[i])}}),
        dir + "/pserver" + std::to_string(i) + ".log"));
  }
  ChildProcess heter_trainer;
  if (heter) {
    REQUIRE(heter_trainer.Start({BinaryPath("heter_trainer/heter-trainer"), "--config", yaml_path},
                                cluster.Role({{"TRAINING_ROLE", "HETER_TRAINER"},
                                              {"POD_IP", "127.0.0.1"},
                                              {"PADDLE_PORT", std::to_string(cluster.ports[2])},
                                              {"STAGE_ID", "2"},
                                              {"HETER_DEVICE_TYPE", "cpu"}}),
                                dir + "/heter.log"));
  }
  for (int i = 0; i < (heter ? 3 : 2); ++i) REQUIRE(WaitForPort(cluster.ports[i], 60s));
  if (mode == "collective") {
    ChildProcess launcher;
    std::vector<std::string> argv = {std::string(FLEETPS_SOURCE_DIR) + "/scripts/launch_collective.sh", "--nproc", "2",
                                     "--log_dir", dir + "/logs"};
    const auto rank = trainer_argv(0);
    argv.insert(argv.end(), rank.begin(), rank.end());
    argv.back() = dir + "/report{trainer_id}.json";
    // This build tree's launcher, whichever tree that is.
    REQUIRE(launcher.Start(argv,
                           {{"PADDLE_PSERVERS_IP_PORT_LIST", cluster.pservers},
                            {"FLEETPS_LAUNCH", BinaryPath("tools/launch/fleetps-launch")}},
                           dir + "/launcher.log"));
    const int rc = launcher.Wait(180s);
    logs.trainer0 = ReadFile(dir + "/logs/workerlog.0");
    read_logs({"launcher.log", "logs/workerlog.1", "pserver0.log", "pserver1.log"});
    INFO(logs.trainer0 << logs.all);
    REQUIRE(rc == 0);
  } else {
    std::unique_ptr<ChildProcess> trainers[2];
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> argv = trainer_argv(i);
      argv.insert(argv.end(), {"--sync-mode", mode});
      Env env = cluster.Role({{"TRAINING_ROLE", "TRAINER"}, {"PADDLE_TRAINER_ID", std::to_string(i)}});
      if (heter) env["STAGE_ID"] = "1";
      trainers[i] = std::make_unique<ChildProcess>();
      REQUIRE(trainers[i]->Start(argv, env, dir + "/trainer" + std::to_string(i) + ".log"));
    }
    const int rc0 = trainers[0]->Wait(120s);
    const int rc1 = trainers[1]->Wait(30s);
    logs.trainer0 = ReadFile(dir + "/trainer0.log");
    read_logs({"trainer1.log", "pserver0.log", "pserver1.log"});
    if (heter) read_logs({"heter.log"});
    INFO(logs.trainer0 << logs.all);
    REQUIRE(rc0 == 0);
    REQUIRE(rc1 == 0);
  }
  INFO(logs.trainer0 << logs.all);
  if (heter) {
    CHECK(heter_trainer.Wait(30s) == 0);
    logs.heter = ReadFile(dir + "/heter.log");
  }
  for (int i = 0; i < 2; ++i) CHECK(servers[i]->Wait(30s) == 0);
  return logs;
}

}  // namespace fleetps::testing
