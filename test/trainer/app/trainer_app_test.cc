// TrainerApp in-process: cpu-trainer's whole run (local mode: its in-process pserver) without
// a child process, and ResolveTrainerApp's precedence and refusals.
#include "trainer/app/trainer_app.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>

#include "test/support/env.h"
#include "test/support/job.h"
#include "test/support/process.h"

namespace fleetps::trainer {
namespace {

struct Job {
  std::string dir = testing::MakeTempDir("trainer_app");
  Job() {
    REQUIRE(testing::GenerateData(dir, {"--rows", "20000", "--train-files", "2"}));
    testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/train"
  test_data_dir: "data/test"
  train_batch_size: 256
  thread_num: 1
  epochs: 1
  sync_mode: async
)" + testing::kSmallCtrDnnModel);
  }
  TrainerFlags Flags() const {
    TrainerFlags f;
    f.config_path = dir + "/job.yaml";
    f.train_data = dir + "/data/train";
    f.test_data = dir + "/data/test";
    f.report_path = dir + "/report{trainer_id}.json";
    return f;
  }
};

TEST_CASE("TrainerApp trains and scores a local job in-process; its report has the test AUC") {
  Job job;
  auto options = ResolveTrainerApp(job.Flags(), testing::EnvFrom({}));
  REQUIRE(options.ok());
  CHECK(options->job.local());
  CHECK(options->report_path == job.dir + "/report0.json");
  TrainerApp app(std::move(*options), nullptr, nullptr);
  const Status st = app.Run();
  REQUIRE(st.ok());
  const double auc = testing::ReportTestAuc(job.dir + "/report0.json");
  REQUIRE_FALSE(std::isnan(auc));
  CHECK(auc > 0.58);  // untrained: ~0.5
}

TEST_CASE("ResolveTrainerApp: flags over the environment over the YAML; refusals name the flag") {
  Job job;
  auto env = testing::EnvFrom({{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:7001,127.0.0.1:7002"},
                               {"PADDLE_TRAINERS_NUM", "4"},
                               {"PADDLE_TRAINER_ID", "2"}});
  TrainerFlags f = job.Flags();
  f.trainer_id = 3;
  f.epochs = 5;
  auto options = ResolveTrainerApp(f, env);
  REQUIRE(options.ok());
  CHECK(options->job.pservers.size() == 2);
  CHECK(options->job.trainers_num == 4);  // the environment's
  CHECK(options->job.trainer_id == 3);    // the flag's, over PADDLE_TRAINER_ID
  CHECK(options->job.epochs == 5);
  CHECK(options->report_path == job.dir + "/report3.json");

  f = job.Flags();
  f.sync_mode = "bogus";
  auto bad = ResolveTrainerApp(f, env);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("--sync-mode") != std::string::npos);

  f = job.Flags();
  f.servers = "not-an-endpoint";
  bad = ResolveTrainerApp(f, env);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("--servers") != std::string::npos);

  f = job.Flags();
  f.sync_mode = "gpubox";
  bad = ResolveTrainerApp(f, env);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("heter-trainer") != std::string::npos);
}

}  // namespace
}  // namespace fleetps::trainer
