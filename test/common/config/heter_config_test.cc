// Heterogeneous training options: fleetps.heter in the job YAML, Paddle's heter-PS
// environment on both sides (common/config/heter_config.h, trainer_config.h).
#include "common/config/heter_config.h"
#include "test/support/env.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>

namespace fleetps::config {
namespace {

const std::string kHeterJob = "runner: {sync_mode: heter}\nhyper_parameters: {fc_sizes: [8]}\n";

TEST_CASE("fleetps.heter is parsed and checked") {
  auto o = ParseTrainerYaml(kHeterJob +
                                "fleetps:\n  heter: {route: trainer_id, inflight: 3, timeout_ms: 5000, "
                                "failover: true, failover_probe_ms: 2000, lanes: 6}\n",
                            "job.yaml");
  REQUIRE(o.ok());
  CHECK(o->heter_mode());
  CHECK(o->heter.route == HeterRoute::kTrainerId);
  CHECK(o->heter.inflight == 3);
  CHECK(o->heter.timeout_ms == 5000);
  CHECK(o->heter.failover);
  CHECK(o->heter.failover_probe_ms == 2000);
  CHECK(o->heter.lanes == 6);
  CHECK(o->heter.cuda_wait == CudaWait::kAuto);  // the default
  auto yield = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {cuda_wait: yield}\n", "job.yaml");
  REQUIRE(yield.ok());
  CHECK(yield->heter.cuda_wait == CudaWait::kYield);
  auto bad_wait = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {cuda_wait: nap}\n", "job.yaml");
  REQUIRE_FALSE(bad_wait.ok());
  CHECK(bad_wait.status().message() ==
        "job.yaml:4: fleetps.heter.cuda_wait: unknown cuda_wait 'nap' (use auto, spin, yield or block)");

  auto bad_route = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {route: random}\n", "job.yaml");
  REQUIRE_FALSE(bad_route.ok());
  CHECK(bad_route.status().message() ==
        "job.yaml:4: fleetps.heter.route: unknown route 'random' (use round_robin or trainer_id)");
  auto zero = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter:\n    inflight: 0\n", "job.yaml");
  REQUIRE_FALSE(zero.ok());
  CHECK_THAT(zero.status().message(), Catch::Contains("job.yaml:5: fleetps.heter.inflight: must be in [1, 64]"));
  CHECK(o->heter.dense_sync == HeterDenseSync::kPserver);  // the default

  auto allreduce = ParseTrainerYaml(
      kHeterJob + "fleetps:\n  heter: {dense_sync: allreduce, allreduce_port: 7100, allreduce_interval_ms: 20}\n",
      "job.yaml");
  REQUIRE(allreduce.ok());
  CHECK(allreduce->heter.dense_sync == HeterDenseSync::kAllreduce);
  CHECK(allreduce->heter.allreduce_port == 7100);
  CHECK(allreduce->heter.allreduce_interval_ms == 20);
  auto no_port = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {dense_sync: allreduce}\n", "job.yaml");
  REQUIRE_FALSE(no_port.ok());
  CHECK_THAT(no_port.status().message(),
             Catch::Contains("job.yaml:4: fleetps.heter.allreduce_port: dense_sync allreduce needs allreduce_port"));
  auto bad_sync = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {dense_sync: nccl}\n", "job.yaml");
  CHECK_THAT(bad_sync.status().message(), Catch::Contains("unknown dense_sync 'nccl' (use pserver or allreduce)"));
  auto bad_port = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {allreduce_port: 70000}\n", "job.yaml");
  CHECK_THAT(bad_port.status().message(), Catch::Contains("fleetps.heter.allreduce_port: must be a port"));
  auto failover_allreduce = ParseTrainerYaml(
      kHeterJob + "fleetps:\n  heter: {dense_sync: allreduce, allreduce_port: 7100, failover: true}\n", "job.yaml");
  CHECK_THAT(failover_allreduce.status().message(),
             Catch::Contains("job.yaml:4: fleetps.heter.failover: failover needs dense_sync: pserver"));
  auto fast_probe = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {failover_probe_ms: 10}\n", "job.yaml");
  CHECK_THAT(fast_probe.status().message(),
             Catch::Contains("fleetps.heter.failover_probe_ms: must be in [100, 600000]"));
  auto no_interval = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {allreduce_interval_ms: 0}\n", "job.yaml");
  CHECK_THAT(no_interval.status().message(), Catch::Contains("allreduce_interval_ms: must be in [1, 60000]"));

  auto typo = ParseTrainerYaml(kHeterJob + "fleetps:\n  heter: {in_flight: 2}\n", "job.yaml");
  REQUIRE_FALSE(typo.ok());
  CHECK_THAT(typo.status().message(), Catch::Contains("did you mean 'inflight'?"));
}

TEST_CASE("A cpu-trainer given heter-trainer endpoints trains in heter mode") {
  auto o = ParseTrainerYaml("runner: {sync_mode: async}\nhyper_parameters: {fc_sizes: [8]}\n", "job.yaml");
  REQUIRE(o.ok());
  CHECK_FALSE(o->heter_mode());
  REQUIRE(ApplyTrainerEnv(testing::EnvFrom({{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:1"},
                                            {"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "10.0.0.1:1,10.0.0.2:2"},
                                            {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", "10.0.0.2:2"}}),
                          &*o)
              .ok());
  CHECK(o->heter_mode());
  REQUIRE(o->heter_trainers.size() == 1);  // the next stage, when given, over all heter-trainers
  CHECK(o->heter_trainers[0].ToString() == "10.0.0.2:2");
  CHECK(ValidateTrainerOptions(*o).ok());

  auto all_only = ParseTrainerYaml(kHeterJob, "job.yaml");
  REQUIRE(ApplyTrainerEnv(testing::EnvFrom({{"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "10.0.0.1:1,10.0.0.2:2"}}),
                          &*all_only)
              .ok());
  CHECK(all_only->heter_trainers.size() == 2);

  auto bad = ParseTrainerYaml(kHeterJob, "job.yaml");
  Status st = ApplyTrainerEnv(testing::EnvFrom({{"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "10.0.0.1"}}), &*bad);
  CHECK_THAT(st.message(), Catch::Contains("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"));
}

TEST_CASE("Heter mode without heter-trainers or without pservers is refused") {
  auto o = ParseTrainerYaml(kHeterJob, "job.yaml");
  REQUIRE(o.ok());
  o->pservers = {{"127.0.0.1", 1}};
  CHECK_THAT(ValidateTrainerOptions(*o).message(), Catch::Contains("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"));
  o->heter_trainers = {{"127.0.0.1", 2}};
  CHECK(ValidateTrainerOptions(*o).ok());
  o->pservers.clear();
  CHECK_THAT(ValidateTrainerOptions(*o).message(), Catch::Contains("needs pservers"));
}

std::map<std::string, std::string> HeterEnv() {
  return {{"TRAINING_ROLE", "HETER_TRAINER"},
          {"POD_IP", "127.0.0.1"},
          {"PADDLE_PORT", "8601"},
          {"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "127.0.0.1:8600,127.0.0.1:8601"},
          {"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"},
          {"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:8500"},
          {"PADDLE_TRAINERS_NUM", "3"},
          {"STAGE_ID", "2"},
          {"STAGE_NUM", "2"},
          {"PADDLE_STAGE_TRAINERS_NUM", "[3, 2]"},
          {"HETER_DEVICE_TYPE", "cpu"},
          {"FLAGS_selected_gpus", "1,0"},
          {"FLEETPS_HETER_METRICS_PORT", "9100"},
          {"FLEETPS_HETER_METRICS_BIND", "127.0.0.1"}};
}

HeterTrainerOptions Base() {
  HeterTrainerOptions o;
  auto job = ParseTrainerYaml(kHeterJob, "job.yaml");
  REQUIRE(job.ok());
  o.job = *job;
  return o;
}

TEST_CASE("A heter-trainer reads Paddle's heter environment") {
  HeterTrainerOptions o = Base();
  REQUIRE(ApplyHeterTrainerEnv(testing::EnvFrom(HeterEnv()), &o).ok());
  CHECK(o.server.endpoints.size() == 2);
  CHECK(o.server.index == 1);
  CHECK(o.previous.size() == 3);
  CHECK(o.job.pservers.size() == 1);
  CHECK(o.job.trainers_num == 3);
  CHECK(o.stage_trainers == std::vector<uint32_t>{3, 2});
  CHECK(o.device == "cpu");
  CHECK(o.gpus == std::vector<int>{1, 0});
  CHECK(o.metrics_port == 9100);
  CHECK(o.metrics_bind == "127.0.0.1");
  CHECK(ValidateHeterTrainerOptions(o).ok());
}

TEST_CASE("A heter environment that does not fit is refused with the variable named") {
  auto error = [](std::map<std::string, std::string> changes) {
    HeterTrainerOptions o = Base();
    auto env = HeterEnv();
    for (auto& [k, v] : changes) {
      if (v.empty()) {
        env.erase(k);
      } else {
        env[k] = v;
      }
    }
    Status st = ApplyHeterTrainerEnv(testing::EnvFrom(env), &o);
    if (st.ok()) st = ValidateHeterTrainerOptions(o);
    REQUIRE_FALSE(st.ok());
    return st.message();
  };
  CHECK_THAT(error({{"TRAINING_ROLE", "TRAINER"}}), Catch::Contains("expected HETER_TRAINER"));
  CHECK_THAT(error({{"PADDLE_PORT", "9999"}}), Catch::Contains("is not in PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"));
  CHECK_THAT(error({{"STAGE_NUM", "3"}, {"PADDLE_STAGE_TRAINERS_NUM", "[3, 2, 1]"}}),
             Catch::Contains("STAGE_NUM=3: fleetps runs two stages"));
  CHECK_THAT(error({{"STAGE_ID", "1"}}), Catch::Contains("a heter-trainer is stage 2"));
  CHECK_THAT(error({{"PADDLE_STAGE_TRAINERS_NUM", "[2, 2]"}}),
             Catch::Contains("PADDLE_STAGE_TRAINERS_NUM[0]=2 but PADDLE_TRAINERS_NUM=3"));
  CHECK_THAT(error({{"PADDLE_STAGE_TRAINERS_NUM", "[3, 1]"}}), Catch::Contains("names 2 heter-trainers"));
  CHECK_THAT(error({{"PADDLE_STAGE_TRAINERS_NUM", "three"}}), Catch::Contains("not a list of non-negative integers"));
  CHECK_THAT(error({{"HETER_DEVICE_TYPE", "tpu"}}), Catch::Contains("HETER_DEVICE_TYPE='tpu': use gpu or cpu"));
  CHECK_THAT(error({{"PADDLE_PSERVERS_IP_PORT_LIST", ""}}), Catch::Contains("needs the pservers"));
  CHECK_THAT(error({{"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", "127.0.0.1:9"}}), Catch::Contains("last one"));
  CHECK_THAT(error({{"PADDLE_PORT", ""}}), Catch::Contains("set both POD_IP and PADDLE_PORT"));
  CHECK_THAT(error({{"FLEETPS_HETER_METRICS_PORT", "70000"}}),
             Catch::Contains("FLEETPS_HETER_METRICS_PORT='70000' is not a port number"));
}

TEST_CASE("Paddle 2.0-2.1's spellings: PADDLE_HETER_TRAINER_IP_PORT_LIST and PADDLE_HETER_TRAINER_DEVICE") {
  // A heter-trainer started as Paddle 2.0's role maker (and the paddle-operator) name it.
  auto legacy = HeterEnv();
  legacy.erase("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST");
  legacy.erase("HETER_DEVICE_TYPE");
  legacy.erase("STAGE_ID");
  legacy.erase("STAGE_NUM");
  legacy.erase("PADDLE_STAGE_TRAINERS_NUM");
  legacy["PADDLE_HETER_TRAINER_IP_PORT_LIST"] = "127.0.0.1:8600,127.0.0.1:8601";
  legacy["PADDLE_HETER_TRAINER_DEVICE"] = "cpu";
  HeterTrainerOptions o = Base();
  REQUIRE(ApplyHeterTrainerEnv(testing::EnvFrom(legacy), &o).ok());
  CHECK(o.server.endpoints.size() == 2);
  CHECK(o.server.index == 1);
  CHECK(o.device == "cpu");
  CHECK(ValidateHeterTrainerOptions(o).ok());
  legacy["PADDLE_PORT"] = "9999";
  HeterTrainerOptions stray = Base();
  CHECK_THAT(ApplyHeterTrainerEnv(testing::EnvFrom(legacy), &stray).message(),
             Catch::Contains("is not in PADDLE_HETER_TRAINER_IP_PORT_LIST [127.0.0.1:8600,127.0.0.1:8601]"));

  // Its cpu-trainers: the list turns heter mode on, as the newer name does. An empty value
  // (the operator sets it empty for jobs without heter-trainers) does not.
  auto trainer = ParseTrainerYaml("runner: {sync_mode: async}\nhyper_parameters: {fc_sizes: [8]}\n", "job.yaml");
  REQUIRE(trainer.ok());
  auto plain = *trainer;
  REQUIRE(ApplyTrainerEnv(testing::EnvFrom({{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:1"},
                                            {"PADDLE_HETER_TRAINER_IP_PORT_LIST", ""}}),
                          &plain)
              .ok());
  CHECK_FALSE(plain.heter_mode());
  REQUIRE(ApplyTrainerEnv(testing::EnvFrom({{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:1"},
                                            {"PADDLE_HETER_TRAINER_IP_PORT_LIST", "10.0.0.1:1,10.0.0.2:2"}}),
                          &*trainer)
              .ok());
  CHECK(trainer->heter_mode());
  CHECK(trainer->heter_trainers.size() == 2);

  // Both spellings, disagreeing: refused, naming both.
  auto both = HeterEnv();
  both["PADDLE_HETER_TRAINER_IP_PORT_LIST"] = "127.0.0.1:8601";
  HeterTrainerOptions conflict = Base();
  CHECK_THAT(ApplyHeterTrainerEnv(testing::EnvFrom(both), &conflict).message(),
             Catch::Contains("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST='127.0.0.1:8600,127.0.0.1:8601' and "
                             "PADDLE_HETER_TRAINER_IP_PORT_LIST='127.0.0.1:8601' differ"));
  both = HeterEnv();
  both["PADDLE_HETER_TRAINER_DEVICE"] = "gpu";
  CHECK_THAT(ApplyHeterTrainerEnv(testing::EnvFrom(both), &conflict).message(),
             Catch::Contains("HETER_DEVICE_TYPE='cpu' and PADDLE_HETER_TRAINER_DEVICE='gpu' differ"));
  both["PADDLE_HETER_TRAINER_DEVICE"] = "cpu";  // the same value twice is fine
  HeterTrainerOptions same = Base();
  CHECK(ApplyHeterTrainerEnv(testing::EnvFrom(both), &same).ok());
}

TEST_CASE("ParseUintList takes Paddle's list spellings") {
  CHECK(*ParseUintList("[2, 1]", "x") == std::vector<uint32_t>{2, 1});
  CHECK(*ParseUintList("2,1", "x") == std::vector<uint32_t>{2, 1});
  CHECK(*ParseUintList("7", "x") == std::vector<uint32_t>{7});
  CHECK(ParseUintList("", "x")->empty());
  CHECK_FALSE(ParseUintList("2;1", "x").ok());
  CHECK_FALSE(ParseUintList("12345678901", "x").ok());
}

}  // namespace
}  // namespace fleetps::config
