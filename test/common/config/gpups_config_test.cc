// GPU-PS pass mode's options (common/config/trainer_config.h): runner.sync_mode gpubox,
// fleetps.gpups, FLAGS_selected_gpus and HETER_DEVICE_TYPE, and what a gpubox job refuses.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "common/config/trainer_config.h"
#include "test/support/env.h"

namespace fleetps::config {
namespace {

const std::string kGpupsJob =
    "runner: {sync_mode: gpubox}\n"
    "hyper_parameters: {model_type: ctr_dnn, sparse_inputs_slots: 3, sparse_feature_dim: 4, dense_input_dim: 2, "
    "fc_sizes: [8]}\n";

TrainerOptions Parse(const std::string& text) {
  auto o = ParseTrainerYaml(text, "job.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  return *o;
}

TEST_CASE("sync_mode gpubox, fleetps.gpups and the device environment are read") {
  TrainerOptions o = Parse(kGpupsJob + "fleetps:\n  gpups: {device_memory_mb: 4096}\n");
  CHECK(o.gpubox_mode());
  CHECK_FALSE(o.gpups.average_merge);
  CHECK(o.gpups.passes_per_epoch == 1);
  CHECK(Parse(kGpupsJob + "fleetps:\n  gpups: {merge: average}\n").gpups.average_merge);
  CHECK(SyncModeName(o.sync_mode) == "gpubox");
  CHECK(o.gpups.device_memory_mb == 4096);
  CHECK(o.gpups.devices == std::vector<int>{0});
  REQUIRE(ApplyTrainerEnv(testing::EnvFrom({{"TRAINING_ROLE", "TRAINER"},
                                            {"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:8500"},
                                            {"PADDLE_TRAINERS_NUM", "2"},
                                            {"PADDLE_TRAINER_ID", "1"},
                                            {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.2:6170"},
                                            {"FLAGS_selected_gpus", "0,1,2,3"},
                                            {"HETER_DEVICE_TYPE", "cpu"},
                                            // a gpubox trainer has no heter stage: ignored
                                            {"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "127.0.0.1:8600"}}),
                          &o)
              .ok());
  CHECK(o.gpubox_mode());  // several trainer endpoints do not make it collective
  CHECK(o.gpups.devices == std::vector<int>{0, 1, 2, 3});
  CHECK(o.gpups.device == "cpu");
  CHECK(o.trainer_endpoints.size() == 2);
  CHECK(o.heter_trainers.empty());
  CHECK(ValidateTrainerOptions(o).ok());
}

TEST_CASE("A gpubox job that cannot run is refused, saying what to set") {
  auto refused = [](const TrainerOptions& o, const std::string& part) {
    Status st = ValidateTrainerOptions(o);
    INFO(st.ToString());
    CHECK(st.IsInvalidArgument());
    CHECK(st.message().find(part) != std::string::npos);
  };
  TrainerOptions o = Parse(kGpupsJob);
  refused(o, "PADDLE_PSERVERS_IP_PORT_LIST");  // no pservers
  o.pservers = {{"127.0.0.1", 8500}};
  CHECK(ValidateTrainerOptions(o).ok());
  TrainerOptions two = o;
  two.trainers_num = 2;
  refused(two, "PADDLE_TRAINER_ENDPOINTS must name one endpoint per trainer");
  TrainerOptions dev = o;
  dev.gpups.device = "tpu";
  refused(dev, "HETER_DEVICE_TYPE='tpu'");
  dev.gpups.device = "gpu";
  dev.gpups.devices.clear();
  refused(dev, "FLAGS_selected_gpus must name 1 to 64 devices");
  TrainerOptions mlp =
      Parse("runner: {sync_mode: gpubox}\nhyper_parameters: {model_type: mlp, input_dim: 13, fc_sizes: [8]}\n");
  mlp.pservers = o.pservers;
  refused(mlp, "ctr_dnn");
  auto bad = ParseTrainerYaml(kGpupsJob + "fleetps:\n  gpups: {device_memory: 4}\n", "job.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("did you mean 'device_memory_mb'?"));
  auto merge = ParseTrainerYaml(kGpupsJob + "fleetps:\n  gpups: {merge: mean}\n", "job.yaml");
  REQUIRE_FALSE(merge.ok());
  CHECK_THAT(merge.status().message(), Catch::Contains("unknown merge 'mean' (use add or average)"));
  auto zero = ParseTrainerYaml(kGpupsJob + "fleetps:\n  gpups: {passes_per_epoch: 0}\n", "job.yaml");
  REQUIRE_FALSE(zero.ok());
  CHECK_THAT(zero.status().message(), Catch::Contains("passes_per_epoch") && Catch::Contains("must be >= 1"));
  TrainerOptions queue = Parse(kGpupsJob + "fleetps:\n  gpups: {passes_per_epoch: 4}\n");
  CHECK(queue.gpups.passes_per_epoch == 4);
  queue.pservers = o.pservers;
  refused(queue, "set runner.reader_type: InMemoryDataset");
  TrainerOptions in_memory =
      Parse("runner: {sync_mode: gpubox, reader_type: InMemoryDataset}\n" + kGpupsJob.substr(kGpupsJob.find('\n') + 1) +
            "fleetps:\n  gpups: {passes_per_epoch: 4}\n");
  in_memory.pservers = o.pservers;
  CHECK(ValidateTrainerOptions(in_memory).ok());
  TrainerOptions fed = Parse(kGpupsJob + "fleetps:\n  gpups: {workers_per_device: 2}\n");
  CHECK(fed.gpups.workers_per_device == 2);
  CHECK_FALSE(fed.gpups.prefetch.has_value());  // auto, the default
  CHECK_FALSE(Parse(kGpupsJob + "fleetps:\n  gpups: {prefetch: auto}\n").gpups.prefetch.has_value());
  CHECK(Parse(kGpupsJob + "fleetps:\n  gpups: {prefetch: false}\n").gpups.prefetch == false);
  CHECK(Parse(kGpupsJob + "fleetps:\n  gpups: {prefetch: true}\n").gpups.prefetch == true);
  auto prefetch = ParseTrainerYaml(kGpupsJob + "fleetps:\n  gpups: {prefetch: sometimes}\n", "job.yaml");
  REQUIRE_FALSE(prefetch.ok());
  CHECK_THAT(prefetch.status().message(), Catch::Contains("prefetch") && Catch::Contains("auto, true or false"));
  CHECK(fed.gpups.cuda_wait == CudaWait::kYield);  // the default
  CHECK(Parse(kGpupsJob + "fleetps:\n  gpups: {cuda_wait: auto}\n").gpups.cuda_wait == CudaWait::kAuto);
  CHECK(Parse(kGpupsJob + "fleetps:\n  gpups: {cuda_wait: block}\n").gpups.cuda_wait == CudaWait::kBlock);
  CHECK(Parse(kGpupsJob + "fleetps:\n  gpups: {cuda_wait: yield}\n").gpups.cuda_wait == CudaWait::kYield);
  CHECK(Parse(kGpupsJob + "fleetps:\n  gpups: {cuda_wait: spin}\n").gpups.cuda_wait == CudaWait::kSpin);
  auto wait = ParseTrainerYaml(kGpupsJob + "fleetps:\n  gpups: {cuda_wait: sleep}\n", "job.yaml");
  REQUIRE_FALSE(wait.ok());
  CHECK_THAT(wait.status().message(), Catch::Contains("job.yaml") && Catch::Contains("cuda_wait") &&
                                          Catch::Contains("auto, spin, yield or block"));
  fed.pservers = o.pservers;
  CHECK(ValidateTrainerOptions(fed).ok());
  for (const char* bad_workers : {"0", "65"}) {
    auto w = ParseTrainerYaml(kGpupsJob + "fleetps:\n  gpups: {workers_per_device: " + bad_workers + "}\n", "job.yaml");
    REQUIRE_FALSE(w.ok());
    CHECK_THAT(w.status().message(), Catch::Contains("workers_per_device") && Catch::Contains("must be 1 to 64"));
  }
  TrainerOptions nccl =
      Parse(kGpupsJob + "fleetps:\n  gpups: {workers_per_device: 2}\n  collective: {backend: nccl}\n");
  nccl.pservers = o.pservers;
  CHECK(ValidateTrainerOptions(nccl).ok());  // NCCL is one rank per node, whatever the workers
  TrainerOptions env_bad = Parse(kGpupsJob);
  CHECK(ApplyTrainerEnv(testing::EnvFrom({{"FLAGS_selected_gpus", "0,x"}}), &env_bad).IsInvalidArgument());
}

}  // namespace
}  // namespace fleetps::config
