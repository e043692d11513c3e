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
//
// GPU-PS pass mode (runner.sync_mode: gpubox, or --sync-mode gpubox): the heter-trainer is
// itself the trainer of its node, as a PaddleRec gpubox job (scripts/run_gpubox.sh):
//   TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=0 PADDLE_TRAINERS_NUM=1 FLAGS_selected_gpus=0,1
//   PADDLE_PSERVERS_IP_PORT_LIST=... [HETER_DEVICE_TYPE=cpu] heter-trainer --config job.yaml

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <string>

#include "common/config/heter_config.h"
#include "common/config/trainer_config.h"
#include "common/logging.h"
#include "common/stop_request.h"
#include "common/systemd/notifier.h"
#include "fleetps/config.h"
#include "heter_trainer/app/heter_app.h"
#include "heter_trainer/gpups/gpubox_app.h"

namespace {

int Fail(const fleetps::Status& st) {
  std::cerr << "heter-trainer: " << st.ToString() << std::endl;
  return 2;
}

}  // namespace

// GPU-PS pass mode: the node's job (heter_trainer/gpups/gpubox_app.h).
int GpuBoxMain(const fleetps::heter::GpuBoxFlags& flags) {
  using namespace fleetps;
  // SIGTERM or SIGINT stops training gracefully: the pass in progress is written back to the
  // pservers first (common/stop_request.h).
  StopRequest stop;
  StopSignals stop_signals(&stop, "heter-trainer (gpubox)");
  auto options = heter::ResolveGpuBoxApp(flags, config::ProcessEnv());
  if (!options.ok()) return Fail(options.status());
  if (auto st = SetUpLogging({options->job.log_level, "gpups:" + std::to_string(options->job.trainer_id)}); !st.ok()) {
    return Fail(st);
  }
  heter::GpuBoxApp app(std::move(*options), &stop);
  if (auto st = app.Run(); !st.ok()) {
    Fail(st);
    if (stop.requested()) StopSignals::ExitBySignal(stop.signal());  // the status says what stopped it
    return 2;
  }
  return 0;
}

int main(int argc, char** argv) {
  using namespace fleetps;
  CLI::App cli{"fleetps heter-trainer: the dense part of heterogeneous PS training"};
  heter::HeterFlags flags;
  cli.add_option("-c,--config", flags.config_path, "job YAML (the one the cpu-trainers and pservers read)")->required();
  cli.add_option("--endpoint", flags.endpoint, "this heter-trainer's host:port (overrides POD_IP:PADDLE_PORT)");
  cli.add_option("--heter-trainers", flags.heter_trainers,
                 "every heter-trainer's endpoint (overrides PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST)");
  cli.add_option("--servers", flags.servers, "pserver endpoints (overrides PADDLE_PSERVERS_IP_PORT_LIST)");
  cli.add_option("--trainers", flags.trainers, "number of cpu-trainers (overrides PADDLE_TRAINERS_NUM)");
  cli.add_option("--device", flags.device, "gpu | cpu (overrides HETER_DEVICE_TYPE)")
      ->check(CLI::IsMember({"gpu", "cpu"}));
  cli.add_option("--gpu", flags.gpu, "GPU index (overrides FLAGS_selected_gpus)")->check(CLI::NonNegativeNumber);
  cli.add_option("--lanes", flags.lanes, "micro-batches computed at once (overrides fleetps.heter.lanes)")
      ->check(CLI::Range(1, 64));
  cli.add_option("--log-level", flags.log_level, "trace|debug|info|warn|error|off");
  cli.add_option("--metrics-port", flags.metrics_port,
                 "serve /metrics, /healthz, /readyz on this port (overrides FLEETPS_HETER_METRICS_PORT; 0: off); "
                 "gpubox: as cpu-trainer's (overrides FLEETPS_TRAINER_METRICS_PORT; 0: any free port)");
  cli.add_option("--metrics-bind", flags.metrics_bind,
                 "the address --metrics-port listens on (overrides FLEETPS_HETER_METRICS_BIND; default: the RPC "
                 "bind address, server.bind_host or this heter-trainer's host); gpubox: as cpu-trainer's "
                 "(FLEETPS_TRAINER_METRICS_BIND)");
  std::string sync_mode;
  heter::GpuBoxFlags gpubox;
  cli.add_option("--sync-mode", sync_mode, "gpubox: GPU-PS pass mode (overrides runner.sync_mode)")
      ->check(CLI::IsMember({"gpubox"}));
  cli.add_option("--gpus", gpubox.gpus, "gpubox: devices, e.g. 0,1 (overrides FLAGS_selected_gpus)");
  cli.add_option("--train-data", gpubox.train_data,
                 "gpubox: training file or directory (overrides runner.train_data_dir)");
  cli.add_option("--test-data", gpubox.test_data, "gpubox: test file or directory (overrides runner.test_data_dir)");
  cli.add_option("--epochs", gpubox.epochs, "gpubox: passes over the training data (overrides runner.epochs)");
  cli.add_option("--reader-type", gpubox.reader_type,
                 "gpubox: QueueDataset | InMemoryDataset (overrides runner.reader_type; InMemoryDataset parses the "
                 "data once, QueueDataset twice per pass: for the pass's keys, then to train)")
      ->check(CLI::IsMember({"QueueDataset", "InMemoryDataset", "InmemoryDataset"}));
  cli.add_option("--report", gpubox.report_path,
                 "gpubox: write a JSON summary here ({trainer_id} is replaced by the trainer's id)");
  cli.add_option("--merge", gpubox.merge, "gpubox: add | average (overrides fleetps.gpups.merge)")
      ->check(CLI::IsMember({"add", "average"}));
  cli.set_version_flag("--version", std::string("heter-trainer (fleetps) ") + FLEETPS_VERSION);
  CLI11_PARSE(cli, argc, argv);

  gpubox.config_path = flags.config_path;
  gpubox.device = flags.device;
  gpubox.servers = flags.servers;
  gpubox.log_level = flags.log_level;
  gpubox.metrics_port = flags.metrics_port;
  gpubox.metrics_bind = flags.metrics_bind;
  if (sync_mode == "gpubox") return GpuBoxMain(gpubox);
  if (auto job = config::LoadTrainerYaml(flags.config_path); job.ok() && job->gpubox_mode()) {
    return GpuBoxMain(gpubox);
  }

  auto options = heter::ResolveHeterApp(flags, config::ProcessEnv());
  if (!options.ok()) return Fail(options.status());
  if (auto st = SetUpLogging({options->job.log_level, "heter:" + std::to_string(options->server.index)}); !st.ok()) {
    return Fail(st);
  }

  systemd::Notifier notifier;  // Type=notify units: READY=1 once it listens, STOPPING=1 at shutdown
  heter::HeterApp app(std::move(*options));
  if (auto st = app.Start(); !st.ok()) return Fail(st);
  if (auto st = notifier.Ready("heter-trainer listening on port " + std::to_string(app.port())); !st.ok()) {
    return Fail(st);
  }
  // WatchdogSec=: WATCHDOG=1 every half period while an io thread still runs a posted task.
  notifier.StartWatchdog([&app] { return app.IoResponsive(std::chrono::seconds(5)); });
  app.WaitForShutdown(/*handle_signals=*/true);
  notifier.Stopping("heter-trainer shutting down").IgnoreError();  // best effort: the manager sees the exit
  app.Shutdown();
  return app.exit_code();
}
