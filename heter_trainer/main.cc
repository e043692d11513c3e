// heter-trainer: runs the dense part of a CTR model for the cpu-trainers of a
// heterogeneous parameter-server job, on a GPU or on the CPU.
//
//   TRAINING_ROLE=HETER_TRAINER POD_IP=10.0.0.5 PADDLE_PORT=8600
//   PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST=10.0.0.5:8600 PADDLE_PSERVERS_IP_PORT_LIST=...
//   PADDLE_TRAINERS_NUM=2 STAGE_ID=2 STAGE_NUM=2 HETER_DEVICE_TYPE=gpu FLAGS_selected_gpus=0
//   heter-trainer --config job.yaml                   (the variables above in its environment)
//
// Precedence: flags > environment > YAML > defaults (common/config/heter_config.h). It
// exits 0 by itself once every cpu-trainer has finished (1 when one failed or is gone).

#include <CLI/CLI.hpp>
#include <iostream>

#include "common/config/heter_config.h"
#include "common/logging.h"
#include "heter_trainer/app/heter_app.h"

namespace {

int Fail(const fleetps::Status& st) {
  std::cerr << "heter-trainer: " << st.ToString() << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fleetps;
  CLI::App cli{"fleetps heter-trainer: the dense part of heterogeneous PS training"};
  std::string config_path, endpoint, heter_trainers, servers, device, log_level;
  std::optional<uint32_t> trainers, lanes;
  std::optional<int> gpu;
  cli.add_option("-c,--config", config_path, "job YAML (the one the cpu-trainers and pservers read)")->required();
  cli.add_option("--endpoint", endpoint, "this heter-trainer's host:port (overrides POD_IP:PADDLE_PORT)");
  cli.add_option("--heter-trainers", heter_trainers,
                 "every heter-trainer's endpoint (overrides PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST)");
  cli.add_option("--servers", servers, "pserver endpoints (overrides PADDLE_PSERVERS_IP_PORT_LIST)");
  cli.add_option("--trainers", trainers, "number of cpu-trainers (overrides PADDLE_TRAINERS_NUM)");
  cli.add_option("--device", device, "gpu | cpu (overrides HETER_DEVICE_TYPE)")->check(CLI::IsMember({"gpu", "cpu"}));
  cli.add_option("--gpu", gpu, "GPU index (overrides FLAGS_selected_gpus)")->check(CLI::NonNegativeNumber);
  cli.add_option("--lanes", lanes, "micro-batches computed at once (overrides fleetps.heter.lanes)")
      ->check(CLI::Range(1, 64));
  cli.add_option("--log-level", log_level, "trace|debug|info|warn|error|off");
  CLI11_PARSE(cli, argc, argv);

  auto options = config::LoadHeterTrainerYaml(config_path);
  if (!options.ok()) return Fail(options.status());
  if (auto st = config::ApplyHeterTrainerEnv(config::ProcessEnv(), &*options); !st.ok()) return Fail(st);
  if (!heter_trainers.empty()) {
    auto eps = net::ParseEndpointList(heter_trainers);
    if (!eps.ok()) return Fail(eps.status().WithContext("--heter-trainers"));
    options->server.endpoints = *eps;
    options->server.index = 0;
  }
  if (!endpoint.empty()) {
    auto self = net::ParseEndpoint(endpoint);
    if (!self.ok()) return Fail(self.status().WithContext("--endpoint"));
    if (options->server.endpoints.empty()) options->server.endpoints = {*self};
    auto it = std::find(options->server.endpoints.begin(), options->server.endpoints.end(), *self);
    if (it == options->server.endpoints.end()) {
      return Fail(Status::InvalidArgument("--endpoint " + self->ToString() + " is not among the heter-trainers"));
    }
    options->server.index = static_cast<uint32_t>(it - options->server.endpoints.begin());
  }
  if (!servers.empty()) {
    auto eps = net::ParseEndpointList(servers);
    if (!eps.ok()) return Fail(eps.status().WithContext("--servers"));
    options->job.pservers = *eps;
  }
  if (trainers) options->job.trainers_num = *trainers;
  if (!device.empty()) options->device = device;
  if (gpu) options->gpus = {*gpu};
  if (lanes) options->job.heter.lanes = *lanes;
  if (!log_level.empty()) options->job.log_level = log_level;
  if (auto st = config::ValidateHeterTrainerOptions(*options); !st.ok()) return Fail(st);
  if (auto st = SetUpLogging({options->job.log_level, "heter:" + std::to_string(options->server.index)}); !st.ok()) {
    return Fail(st);
  }

  heter::HeterApp app(std::move(*options));
  if (auto st = app.Start(); !st.ok()) return Fail(st);
  app.WaitForShutdown(/*handle_signals=*/true);
  app.Shutdown();
  return app.exit_code();
}
