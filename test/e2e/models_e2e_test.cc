// The ranking models of configs/ (wide_deep, deepfm, dcn, dlrm) with the real binaries on
// loopback, in every training mode: one test case per mode, each training every model for
// one epoch of a small generated data set (shared by the test cases):
//  - local: one cpu-trainer, in-process tables;
//  - async, sync, geo: 2 pservers + 2 cpu-trainers;
//  - heter: 2 pservers + 1 heter-trainer (CPU device) + 2 cpu-trainers; dcn with per-slot
//    embedding widths (slot_dims), which the cpu-trainers pool and the heter-trainer reads;
//  - collective: the hybrid, 2 pservers + 2 ranks started by scripts/launch_collective.sh.
//  - bf16: each model locally with fleetps.dense.precision bf16 against fp32 (where the CPU has
//    bf16 units; elsewhere the refusal), and deepfm in heter mode on a bf16 CPU device.
// The job is the shipped YAML with its data and save paths pointed into a temporary
// directory, smaller hidden layers and batches (so that the whole matrix stays cheap) and a
// higher learning rate. Every process exits 0, trainer 0 names the mode and the model with
// the dense parameter count the job's hyper_parameters give (config::DenseParamCount), the
// heter-trainer names the same model, and the test AUC shows the model learned.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "common/config/model_config.h"
#include "common/config/trainer_config.h"
#include "common/config/yaml_util.h"
#include "common/dense/cpu_features.h"
#include "test/support/cluster_job.h"
#include "test/support/job.h"
#include "test/support/process.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
using namespace std::chrono_literals;

const std::vector<std::string> kModels = {"wide_deep", "deepfm", "dcn", "dlrm"};

// 30000 generated rows (27000 train in 2 files), made once for every test case.
const std::string& DataDir() {
  static const std::string dir = [] {
    const std::string d = testing::MakeRunTempDir("models_e2e_data");
    REQUIRE(testing::GenerateData(d, {"--train-files", "2", "--rows", "30000"}));
    return d + "/data";
  }();
  return dir;
}

// configs/<model>.yaml for a small, quick job: data and save paths into `dir`, hidden layers
// of 64 and 32, batches of 128, Adam 0.002 (0.004 made dcn diverge in one async run of two
// once each step was its own push). `hyper_extra`: more hyper_parameters lines; `fleetps_extra`:
// more fleetps lines.
std::string SmallJobYaml(const std::string& model, const std::string& dir, const std::string& hyper_extra,
                         const std::string& fleetps_extra = "") {
  std::string yaml = testing::ReadFile(std::string(FLEETPS_SOURCE_DIR) + "/configs/" + model + ".yaml");
  auto replace = [&yaml](const std::string& pattern, const std::string& with) {
    const std::string before = yaml;
    yaml = std::regex_replace(yaml, std::regex(pattern), with);
    REQUIRE(yaml != before);  // the shipped YAML still has the key
  };
  replace("train_data_dir: \"[^\"]*\"", "train_data_dir: \"" + DataDir() + "/train\"");
  replace("test_data_dir: \"[^\"]*\"", "test_data_dir: \"" + DataDir() + "/test\"");
  replace("model_save_path: \"[^\"]*\"", "model_save_path: \"" + dir + "/model\"");
  replace("train_batch_size: \\d+", "train_batch_size: 128");
  replace("learning_rate: [0-9.]+", "learning_rate: 0.002");
  replace("io_threads: \\d+", "io_threads: 1");
  if (model == "dlrm") {
    replace("bot_layer_sizes: \\[[^\\]]*\\]", "bot_layer_sizes: [32, 16]");
    replace("top_layer_sizes: \\[[^\\]]*\\]", "top_layer_sizes: [64, 32, 2]");
  } else {
    replace("fc_sizes: \\[[^\\]]*\\]", "fc_sizes: [64, 32]");
  }
  if (!hyper_extra.empty()) replace("\nhyper_parameters:\n", "\nhyper_parameters:\n" + hyper_extra);
  if (!fleetps_extra.empty()) replace("\nfleetps:\n", "\nfleetps:\n" + fleetps_extra);
  return yaml;
}

// The dense parameter count of the job YAML's model.
uint64_t DenseParams(const std::string& yaml) {
  StatusOr<YAML::Node> root = config::LoadYamlString(yaml, "job.yaml");
  REQUIRE(root.ok());
  ModelOptions options;
  const Status st = config::ParseModelOptions((*root)["hyper_parameters"],
                                              config::YamlContext{"job.yaml", "hyper_parameters"}, &options);
  INFO(st.ToString());
  REQUIRE(st.ok());
  return config::DenseParamCount(options);
}

// One job of `model` in `mode` (local, async, sync, geo, heter, collective); checks it as the
// file comment says. Returns trainer 0's test AUC.
double TrainJob(const std::string& model, const std::string& mode, const std::string& hyper_extra = "",
                const std::string& fleetps_extra = "") {
  const std::string dir = testing::MakeTempDir("models_e2e_" + model + "_" + mode);
  const std::string yaml_path = dir + "/job.yaml";
  const std::string yaml = SmallJobYaml(model, dir, hyper_extra, fleetps_extra);
  testing::WriteFile(yaml_path, yaml);
  const uint64_t params = DenseParams(yaml);
  const testing::JobLogs logs = testing::RunJob(dir, mode, {"--epochs", "1", "--print-interval", "1000"});
  const std::string& log0 = logs.trainer0;
  INFO(log0 << logs.all);
  if (mode == "heter") {
    CHECK_THAT(logs.heter,
               Catch::Contains("dense part of model " + model + " (" + std::to_string(params) + " parameters)"));
  }
  const std::string mode_name = mode == "collective" ? "hybrid" : mode;
  CHECK_THAT(log0, Catch::Contains(mode_name + " training") &&
                       Catch::Contains("model " + model + " (" + std::to_string(params) + " dense parameters)") &&
                       Catch::Contains("saved the model"));
  const double auc = testing::ReportTestAuc(dir + "/report0.json");
  INFO(model << " in " << mode << " mode: test AUC " << auc);
  // 27000 training rows, one epoch: these models reach 0.6-0.67 (chance 0.5).
  CHECK(auc > 0.58);
  return auc;
}

void TrainEveryModel(const std::string& mode) {
  for (const auto& model : kModels) {
    DYNAMIC_SECTION(model) { TrainJob(model, mode); }
  }
}

TEST_CASE("Every ranking model trains locally", "[e2e]") { TrainEveryModel("local"); }
TEST_CASE("Every ranking model trains in async PS mode", "[e2e]") { TrainEveryModel("async"); }
TEST_CASE("Every ranking model trains in sync PS mode", "[e2e]") { TrainEveryModel("sync"); }
TEST_CASE("Every ranking model trains in GEO PS mode", "[e2e]") { TrainEveryModel("geo"); }
TEST_CASE("Every ranking model trains in collective (hybrid) mode", "[e2e]") { TrainEveryModel("collective"); }

TEST_CASE("Every ranking model trains in heter mode on the heter-trainer's CPU device", "[e2e]") {
  for (const auto& model : {"wide_deep", "deepfm", "dlrm"}) {
    DYNAMIC_SECTION(model) { TrainJob(model, "heter"); }
  }
  SECTION("dcn with per-slot embedding widths (slot_dims)") {
    // 26 slots of widths 2..9 (rows stay sparse_feature_dim = 9 wide): the activation row and
    // the dense part are narrower than without slot_dims, on both sides of the wire.
    std::string dims;
    for (int s = 0; s < 26; ++s) dims += (s ? ", " : "") + std::to_string(2 + s % 8);
    const std::string extra = "  slot_dims: [" + dims + "]\n";
    const std::string dir = testing::MakeTempDir("models_e2e_slot_dims");
    CHECK(DenseParams(SmallJobYaml("dcn", dir, extra)) < DenseParams(SmallJobYaml("dcn", dir, "")));
    TrainJob("dcn", "heter", extra);
  }
}

TEST_CASE("bf16 dense compute trains every model as fp32 does, or is refused where the CPU has no bf16 units",
          "[e2e]") {
  const std::string bf16 = "  dense: {precision: bf16}\n";
  if (!dense::HasBf16(dense::DetectCpuFeatures().best())) {
    const std::string dir = testing::MakeTempDir("models_e2e_bf16_refused");
    testing::WriteFile(dir + "/job.yaml", SmallJobYaml("deepfm", dir, "", bf16));
    ChildProcess trainer;
    REQUIRE(trainer.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml"}, {},
                          dir + "/trainer0.log"));
    CHECK(trainer.Wait(60s) != 0);
    CHECK_THAT(testing::ReadFile(dir + "/trainer0.log"),
               Catch::Contains("fleetps.dense.precision bf16 needs a CPU with AVX512-BF16 or AMX"));
    return;
  }
  for (const auto& model : kModels) {
    DYNAMIC_SECTION(model) {
      const double fp32_auc = TrainJob(model, "local");
      const double bf16_auc = TrainJob(model, "local", "", bf16);
      INFO(model << ": test AUC fp32 " << fp32_auc << ", bf16 " << bf16_auc);
      CHECK(std::abs(bf16_auc - fp32_auc) < 0.01);
    }
  }
  SECTION("deepfm in heter mode, the heter-trainer's CPU device in bf16") { TrainJob("deepfm", "heter", "", bf16); }
}

}  // namespace
}  // namespace fleetps
