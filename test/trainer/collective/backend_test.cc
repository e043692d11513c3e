// The collective backend (trainer/collective/backend.h): fleetps.collective.backend,
// PADDLE_DISTRI_BACKEND and FLAGS_selected_gpus, and the choice between NCCL and Gloo for
// every combination of what the build and the machine offer.
#include "trainer/collective/backend.h"

#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>

namespace fleetps::trainer::collective {
namespace {

using config::CollectiveBackend;

const std::string kJob =
    "runner: {sync_mode: collective}\n"
    "hyper_parameters: {model_type: mlp, input_dim: 4, dense_input_dim: 4, sparse_inputs_slots: 2, fc_sizes: [8], "
    "output: softmax2}\n";

config::TrainerOptions Parse(const std::string& text, std::map<std::string, std::string> env = {}) {
  auto o = config::ParseTrainerYaml(text, "job.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  Status applied = config::ApplyTrainerEnv(
      [&env](const std::string& name) -> std::optional<std::string> {
        auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      &*o);
  INFO(applied.ToString());
  REQUIRE(applied.ok());
  return *o;
}

config::DataParallelOptions Options(CollectiveBackend backend, int gpu) {
  config::DataParallelOptions o;
  o.backend = backend;
  o.gpu = gpu;
  return o;
}

TEST_CASE("backend comes from the YAML, PADDLE_DISTRI_BACKEND overrides it, FLAGS_selected_gpus gives the GPU") {
  auto o = Parse(kJob);
  CHECK(o.collective.backend == CollectiveBackend::kAuto);
  CHECK(o.collective.gpu == -1);
  o = Parse(kJob + "fleetps:\n  collective: {backend: gloo}\n", {{"FLAGS_selected_gpus", "3"}});
  CHECK(o.collective.backend == CollectiveBackend::kGloo);
  CHECK(o.collective.gpu == 3);
  o = Parse(kJob + "fleetps:\n  collective: {backend: gloo}\n", {{"PADDLE_DISTRI_BACKEND", "nccl"}});
  CHECK(o.collective.backend == CollectiveBackend::kNccl);

  auto bad = config::ParseTrainerYaml(kJob + "fleetps:\n  collective: {backend: mpi}\n", "job.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("job.yaml:4:") && Catch::Contains("unknown backend 'mpi' (use auto, gloo or nccl)"));
  auto parsed = config::ParseTrainerYaml(kJob, "job.yaml");
  REQUIRE(parsed.ok());
  Status env = config::ApplyTrainerEnv(
      [](const std::string& name) -> std::optional<std::string> {
        if (name == "PADDLE_DISTRI_BACKEND") return "bkcl";
        return std::nullopt;
      },
      &*parsed);
  CHECK(env.IsInvalidArgument());
  CHECK_THAT(env.message(), Catch::Contains("PADDLE_DISTRI_BACKEND=bkcl"));
}

TEST_CASE("auto picks NCCL only when the rank has a GPU, the build has NCCL and the GPU is visible") {
  auto nccl = ChooseBackend(Options(CollectiveBackend::kAuto, 1), true, 2);
  REQUIRE(nccl.ok());
  CHECK(nccl->backend == CollectiveBackend::kNccl);
  CHECK(nccl->gpu == 1);
  CHECK_THAT(nccl->reason, Catch::Contains("NCCL on GPU 1"));

  struct Case {
    int gpu;
    bool build;
    int visible;
    const char* why;
  };
  for (const Case& c : {Case{-1, true, 8, "FLAGS_selected_gpus is unset"}, Case{0, false, 8, "this build has no NCCL"},
                        Case{1, true, 1, "sees 1 CUDA device(s)"}, Case{0, true, 0, "sees 0 CUDA device(s)"}}) {
    INFO("gpu " << c.gpu << " build " << c.build << " visible " << c.visible);
    auto gloo = ChooseBackend(Options(CollectiveBackend::kAuto, c.gpu), c.build, c.visible);
    REQUIRE(gloo.ok());
    CHECK(gloo->backend == CollectiveBackend::kGloo);
    CHECK_THAT(gloo->reason, Catch::Contains("Gloo") && Catch::Contains(c.why));
    // Asked for by name, the same gap is an error saying what is missing.
    auto refused = ChooseBackend(Options(CollectiveBackend::kNccl, c.gpu), c.build, c.visible);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().IsInvalidArgument());
    CHECK_THAT(refused.status().message(),
               Catch::Contains("backend nccl") && Catch::Contains(c.why) && Catch::Contains("backend: gloo"));
  }
}

TEST_CASE("gloo is gloo whatever the machine has; nccl with everything in place is NCCL") {
  auto gloo = ChooseBackend(Options(CollectiveBackend::kGloo, 0), true, 4);
  REQUIRE(gloo.ok());
  CHECK(gloo->backend == CollectiveBackend::kGloo);
  auto nccl = ChooseBackend(Options(CollectiveBackend::kNccl, 3), true, 4);
  REQUIRE(nccl.ok());
  CHECK(nccl->backend == CollectiveBackend::kNccl);
  CHECK(nccl->gpu == 3);
}

}  // namespace
}  // namespace fleetps::trainer::collective
