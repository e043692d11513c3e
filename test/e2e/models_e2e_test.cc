// The ranking models of configs/ (wide_deep, deepfm, dcn, dlrm), each with the real binaries
// in async PS mode: the shipped YAML (data paths and save path pointed into a temporary
// directory, batches of 128) on 2 pservers + 2 cpu-trainers over loopback, on a small generated data set.
// Every process exits 0, the model is saved, and the test AUC shows it learned.
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <regex>
#include <string>

#include "test/support/job.h"
#include "test/support/process.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
using namespace std::chrono_literals;

// configs/<model>.yaml with its data and save paths replaced by DIR-relative ones.
std::string ShippedYaml(const std::string& model) {
  std::string yaml = testing::ReadFile(std::string(FLEETPS_SOURCE_DIR) + "/configs/" + model + ".yaml");
  yaml = std::regex_replace(yaml, std::regex("train_data_dir: \"[^\"]*\""), "train_data_dir: \"data/train\"");
  yaml = std::regex_replace(yaml, std::regex("test_data_dir: \"[^\"]*\""), "test_data_dir: \"data/test\"");
  yaml = std::regex_replace(yaml, std::regex("model_save_path: \"[^\"]*\""), "model_save_path: \"model\"");
  // More, smaller steps than the shipped 512, so that one epoch of small data shows learning.
  yaml = std::regex_replace(yaml, std::regex("train_batch_size: \\d+"), "train_batch_size: 128");
  return yaml;
}

void TrainAsync(const std::string& model) {
  const std::string dir = testing::MakeTempDir("models_e2e_" + model);
  REQUIRE(testing::GenerateData(dir, {"--train-files", "2", "--rows", "40000"}));
  testing::WriteFile(dir + "/job.yaml", ShippedYaml(model));
  const auto ports = testing::FreePorts(2);
  const std::string pservers = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  std::unique_ptr<ChildProcess> servers[2], trainers[2];
  for (int i = 0; i < 2; ++i) {
    servers[i] = std::make_unique<ChildProcess>();
    REQUIRE(servers[i]->Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"},
                              {{"TRAINING_ROLE", "PSERVER"},
                               {"PADDLE_PSERVERS_IP_PORT_LIST", pservers},
                               {"POD_IP", "127.0.0.1"},
                               {"PADDLE_PORT", std::to_string(ports[i])}},
                              dir + "/pserver" + std::to_string(i) + ".log"));
  }
  for (uint16_t p : ports) REQUIRE(testing::WaitForPort(p, 30s));
  for (int i = 0; i < 2; ++i) {
    trainers[i] = std::make_unique<ChildProcess>();
    REQUIRE(trainers[i]->Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml", "--epochs",
                                "1", "--report", dir + "/report" + std::to_string(i) + ".json"},
                               {{"TRAINING_ROLE", "TRAINER"},
                                {"PADDLE_PSERVERS_IP_PORT_LIST", pservers},
                                {"PADDLE_TRAINERS_NUM", "2"},
                                {"PADDLE_TRAINER_ID", std::to_string(i)}},
                               dir + "/trainer" + std::to_string(i) + ".log"));
  }
  const int rc0 = trainers[0]->Wait(120s);
  const int rc1 = trainers[1]->Wait(30s);
  const std::string log0 = testing::ReadFile(dir + "/trainer0.log");
  INFO(log0 << "\ntrainer 1:\n" << testing::ReadFile(dir + "/trainer1.log") << "\npserver 0:\n"
            << testing::ReadFile(dir + "/pserver0.log"));
  REQUIRE(rc0 == 0);
  REQUIRE(rc1 == 0);
  for (int i = 0; i < 2; ++i) CHECK(servers[i]->Wait(30s) == 0);
  CHECK_THAT(log0, Catch::Contains("async training") && Catch::Contains("model " + model) &&
                       Catch::Contains("saved the model"));
  // 36000 training rows, one epoch: these models reach ~0.6 on them (chance 0.5).
  const double auc = testing::ReportTestAuc(dir + "/report0.json");
  INFO("test AUC " << auc);
  CHECK(auc > 0.57);
}

TEST_CASE("wide_deep trains in async PS mode with the real binaries", "[e2e]") { TrainAsync("wide_deep"); }
TEST_CASE("deepfm trains in async PS mode with the real binaries", "[e2e]") { TrainAsync("deepfm"); }
TEST_CASE("dcn trains in async PS mode with the real binaries", "[e2e]") { TrainAsync("dcn"); }
TEST_CASE("dlrm trains in async PS mode with the real binaries", "[e2e]") { TrainAsync("dlrm"); }

}  // namespace
}  // namespace fleetps
