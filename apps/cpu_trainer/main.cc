// cpu-trainer: trains and scores CTR models against fleetps pservers, or locally.
//
//   cpu-trainer --config job.yaml                                 local training
//   PADDLE_PSERVERS_IP_PORT_LIST=... PADDLE_TRAINERS_NUM=2 PADDLE_TRAINER_ID=0
//   TRAINING_ROLE=TRAINER cpu-trainer --config job.yaml           parameter-server training
//   cpu-trainer --config job.yaml --mode infer --model DIR       score the test data
//   PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST=... (plus the above)    heterogeneous training: the
//                                                                 dense part on heter-trainers
//   PADDLE_TRAINER_ENDPOINTS=h:p,h:p PADDLE_TRAINER_ID=0 ...       collective (data-parallel)
//                                                                 training; with pservers, the hybrid
//
// Precedence: flags > environment > YAML > defaults (common/config/trainer_config.h).
// Local mode runs an in-process pserver (the same tables and service, on loopback).

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "common/config/trainer_config.h"
#include "common/logging.h"
#include "common/stop_request.h"
#include "fleetps/config.h"
#include "heter_trainer/device/nccl_backend.h"
#include "trainer/app/trainer_app.h"

namespace {

int Fail(const fleetps::Status& st) {
  std::cerr << "cpu-trainer: " << st.ToString() << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fleetps;
  CLI::App cli{"fleetps CPU trainer"};
  trainer::TrainerFlags f;
  cli.add_option("-c,--config", f.config_path, "job YAML (PaddleRec runner + hyper_parameters)")->required();
  cli.add_option("--mode", f.mode, "train | infer")->check(CLI::IsMember({"train", "infer"}));
  cli.add_option("--servers", f.servers, "pserver endpoints (overrides PADDLE_PSERVERS_IP_PORT_LIST)");
  cli.add_option("--trainer-id", f.trainer_id, "this trainer's id (overrides PADDLE_TRAINER_ID)");
  cli.add_option("--trainers", f.trainers, "number of trainers (overrides PADDLE_TRAINERS_NUM)");
  cli.add_option("--heter-trainers", f.heter_trainers,
                 "heter-trainer endpoints: train in heter mode (overrides PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST)");
  cli.add_option("--sync-mode", f.sync_mode, "async | sync | geo | heter | collective (overrides runner.sync_mode)");
  cli.add_option("--epochs", f.epochs, "epochs (overrides runner.epochs)");
  cli.add_option("--threads", f.threads, "worker threads (overrides runner.thread_num)");
  cli.add_option("--metrics-port", f.metrics_port,
                 "serve /metrics (examples/s, loss, AUC, pull/push latency), /healthz, /readyz on this port "
                 "(default: FLEETPS_TRAINER_METRICS_PORT; unset: off)");
  cli.add_option("--metrics-bind", f.metrics_bind,
                 "the address --metrics-port listens on (default: FLEETPS_TRAINER_METRICS_BIND, else this "
                 "trainer's host in PADDLE_TRAINER_ENDPOINTS, else POD_IP, else 127.0.0.1)");
  cli.add_option("--print-interval", f.print_interval,
                 "steps between progress log lines and --report curve points (overrides runner.print_interval)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--train-data", f.train_data, "training file or directory (overrides runner.train_data_dir)");
  cli.add_option("--test-data", f.test_data, "test file or directory (overrides runner.test_data_dir)");
  cli.add_option("--model", f.model_dir, "infer: saved model directory (overrides runner.infer_load_path)");
  cli.add_option("--report", f.report_path, "write a JSON summary here ({trainer_id} in the path: this trainer's id)");
  cli.add_option("--predictions", f.predictions_path,
                 "write 'label prediction' lines here (evaluation; {trainer_id} as in --report)");
  cli.add_option("--log-level", f.log_level, "trace|debug|info|warn|error|off");
  cli.add_option("--rpc-timeout-ms", f.rpc_timeout_ms,
                 "deadline of every pserver request; an unresponsive pserver fails the trainer after this long "
                 "(default 60000)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--connect-timeout-ms", f.connect_timeout_ms,
                 "how long to wait for the pservers to accept connections at start-up (default 60000)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--heartbeat-interval-ms", f.heartbeat_interval_ms,
                 "how often the trainer renews its lease on the pservers (default 5000; keep it well below "
                 "server.trainer_lease_s)")
      ->check(CLI::PositiveNumber);
  cli.set_version_flag("--version", std::string("cpu-trainer (fleetps) ") + FLEETPS_VERSION);
  CLI11_PARSE(cli, argc, argv);
  // Training stops gracefully on SIGTERM or SIGINT (common/stop_request.h): the steps in
  // flight finish and their updates are pushed.
  StopRequest stop;
  std::optional<StopSignals> stop_signals;
  if (f.mode == "train") stop_signals.emplace(&stop, "cpu-trainer");

  auto options = trainer::ResolveTrainerApp(f, config::ProcessEnv());
  if (!options.ok()) return Fail(options.status());
  const std::string who = "trainer:" + std::to_string(options->job.trainer_id);
  if (auto st = SetUpLogging({options->job.log_level, who}); !st.ok()) return Fail(st);
  trainer::TrainerApp app(std::move(*options), heter::BuildNcclBackend(), &stop);
  if (auto st = app.Run(); !st.ok()) {
    Fail(st);
    if (stop.requested()) StopSignals::ExitBySignal(stop.signal());  // the status says what stopped it
    return 1;
  }
  return 0;
}
