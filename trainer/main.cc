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

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "common/config/security_config.h"
#include "common/config/server_config.h"
#include "common/config/trainer_config.h"
#include "common/logging.h"
#include "common/dense/open_backend.h"
#include "common/metrics/registry.h"
#include "common/stop_request.h"
#include "common/systemd/notifier.h"
#include "fleetps/config.h"
#include "server/app/app.h"
#include "trainer/client/ps_client.h"
#include "heter_trainer/device/nccl_backend.h"
#include "trainer/collective/communicator.h"
#include "trainer/runtime/heartbeat.h"
#include "trainer/runtime/job.h"

namespace {

int Fail(const fleetps::Status& st) {
  std::cerr << "cpu-trainer: " << st.ToString() << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fleetps;
  CLI::App cli{"fleetps CPU trainer"};
  std::string config_path, mode = "train", servers, heter_trainers, sync_mode, train_data, test_data, log_level,
      model_dir;
  std::optional<uint32_t> trainer_id, trainers, epochs, threads, print_interval;
  trainer::JobFlags flags;
  trainer::TrainerRpcOptions rpc;
  std::optional<int64_t> rpc_timeout_ms, connect_timeout_ms, heartbeat_interval_ms;
  std::optional<uint16_t> metrics_port;
  std::optional<std::string> metrics_bind;
  cli.add_option("-c,--config", config_path, "job YAML (PaddleRec runner + hyper_parameters)")->required();
  cli.add_option("--mode", mode, "train | infer")->check(CLI::IsMember({"train", "infer"}));
  cli.add_option("--servers", servers, "pserver endpoints (overrides PADDLE_PSERVERS_IP_PORT_LIST)");
  cli.add_option("--trainer-id", trainer_id, "this trainer's id (overrides PADDLE_TRAINER_ID)");
  cli.add_option("--trainers", trainers, "number of trainers (overrides PADDLE_TRAINERS_NUM)");
  cli.add_option("--heter-trainers", heter_trainers,
                 "heter-trainer endpoints: train in heter mode (overrides PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST)");
  cli.add_option("--sync-mode", sync_mode,
                 "async | sync | geo | heter | collective (overrides runner.sync_mode)");
  cli.add_option("--epochs", epochs, "epochs (overrides runner.epochs)");
  cli.add_option("--threads", threads, "worker threads (overrides runner.thread_num)");
  cli.add_option("--metrics-port", metrics_port,
                 "serve /metrics (examples/s, loss, AUC, pull/push latency), /healthz, /readyz on this port "
                 "(default: FLEETPS_TRAINER_METRICS_PORT; unset: off)");
  cli.add_option("--metrics-bind", metrics_bind,
                 "the address --metrics-port listens on (default: FLEETPS_TRAINER_METRICS_BIND, else this "
                 "trainer's host in PADDLE_TRAINER_ENDPOINTS, else POD_IP, else 127.0.0.1)");
  cli.add_option("--print-interval", print_interval,
                 "steps between progress log lines and --report curve points (overrides runner.print_interval)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--train-data", train_data, "training file or directory (overrides runner.train_data_dir)");
  cli.add_option("--test-data", test_data, "test file or directory (overrides runner.test_data_dir)");
  cli.add_option("--model", model_dir, "infer: saved model directory (overrides runner.infer_load_path)");
  cli.add_option("--report", flags.report_path,
                 "write a JSON summary here ({trainer_id} in the path: this trainer's id)");
  cli.add_option("--predictions", flags.predictions_path, "write 'label prediction' lines here (evaluation; {trainer_id} as in --report)");
  cli.add_option("--log-level", log_level, "trace|debug|info|warn|error|off");
  cli.add_option("--rpc-timeout-ms", rpc_timeout_ms,
                 "deadline of every pserver request; an unresponsive pserver fails the trainer after this long "
                 "(default 60000)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--connect-timeout-ms", connect_timeout_ms,
                 "how long to wait for the pservers to accept connections at start-up (default 60000)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--heartbeat-interval-ms", heartbeat_interval_ms,
                 "how often the trainer renews its lease on the pservers (default 5000; keep it well below "
                 "server.trainer_lease_s)")
      ->check(CLI::PositiveNumber);
  cli.set_version_flag("--version", std::string("cpu-trainer (fleetps) ") + FLEETPS_VERSION);
  CLI11_PARSE(cli, argc, argv);
  // Training stops gracefully on SIGTERM or SIGINT (common/stop_request.h): the steps in
  // flight finish and their updates are pushed.
  StopRequest stop;
  std::optional<StopSignals> stop_signals;
  if (mode == "train") {
    stop_signals.emplace(&stop, "cpu-trainer");
    flags.stop = &stop;
  }

  auto options = config::LoadTrainerYaml(config_path);
  if (!options.ok()) return Fail(options.status());
  if (auto st = config::ApplyTrainerEnv(config::ProcessEnv(), &*options); !st.ok()) return Fail(st);
  if (!servers.empty()) {
    auto eps = net::ParseEndpointList(servers);
    if (!eps.ok()) return Fail(eps.status().WithContext("--servers"));
    options->pservers = *eps;
  }
  if (trainer_id) options->trainer_id = *trainer_id;
  if (trainers) options->trainers_num = *trainers;
  if (epochs) options->epochs = *epochs;
  if (threads) options->worker_threads = *threads;
  if (print_interval) options->print_interval = *print_interval;
  if (!train_data.empty()) options->data.train_paths = {train_data};
  if (!test_data.empty()) options->data.test_paths = {test_data};
  if (!log_level.empty()) options->log_level = log_level;
  // The pservers resolve a relative model path below their checkpoint root; the flag's is the shell's.
  if (!model_dir.empty()) options->infer_load_path = std::filesystem::absolute(model_dir).lexically_normal().string();
  if (rpc_timeout_ms) rpc.request_timeout = std::chrono::milliseconds(*rpc_timeout_ms);
  if (connect_timeout_ms) rpc.connect_timeout = std::chrono::milliseconds(*connect_timeout_ms);
  if (heartbeat_interval_ms) rpc.heartbeat_interval = std::chrono::milliseconds(*heartbeat_interval_ms);
  if (!sync_mode.empty() && !config::SyncModeFromName(sync_mode, &options->sync_mode)) {
    return Fail(Status::InvalidArgument("--sync-mode must be async, sync, geo, heter or collective"));
  }
  if (options->gpubox_mode() && mode == "train") {
    return Fail(Status::InvalidArgument(
        "runner.sync_mode gpubox (GPU-PS passes) is trained by heter-trainer, one process per node driving the "
        "devices of FLAGS_selected_gpus (scripts/run_gpubox.sh), not by cpu-trainer"));
  }
  if (options->gpubox_mode()) options->sync_mode = config::SyncMode::kAsync;  // infer: score alone
  if (!heter_trainers.empty()) {
    auto eps = net::ParseEndpointList(heter_trainers);
    if (!eps.ok()) return Fail(eps.status().WithContext("--heter-trainers"));
    options->heter_trainers = *eps;
    options->sync_mode = config::SyncMode::kHeter;
  }
  // Scoring a saved model needs no heter-trainer or other rank: the forward pass runs here.
  if (mode == "infer" && (options->heter_mode() || options->collective_mode())) {
    options->sync_mode = config::SyncMode::kAsync;
    if (options->local()) {  // a collective job's rank: score alone
      options->trainers_num = 1;
      options->trainer_id = 0;
    }
  }
  if (auto st = config::ValidateTrainerOptions(*options); !st.ok()) return Fail(st);
  flags.report_path = trainer::PerTrainerPath(flags.report_path, options->trainer_id);
  flags.predictions_path = trainer::PerTrainerPath(flags.predictions_path, options->trainer_id);
  if (auto st = SetUpLogging({options->log_level, "trainer:" + std::to_string(options->trainer_id)}); !st.ok()) {
    return Fail(st);
  }

  // The cluster's shared secret and TLS files, when it has them: the job YAML's
  // fleetps.server section (what the pservers read), overridden by FLEETPS_AUTH_SECRET_FILE
  // and FLEETPS_TLS_*_FILE. For the pservers, and for a collective job's rendezvous (whose
  // ranks may run without pservers, in local mode).
  net::ClusterSecurity cluster;
  if (!options->local() || options->collective_mode()) {
    auto security = config::LoadClusterSecurity(config_path, config::ProcessEnv());
    if (!security.ok()) return Fail(security.status());
    cluster = std::move(*security);
  }
  // Local mode: an in-process pserver with the job's tables, on a loopback port.
  std::unique_ptr<server::App> local_server;
  trainer::PsClientOptions client_options = trainer::JobClientOptions(*options, rpc);
  if (options->local()) {
    config::ServerOptions server_options;
    server_options.endpoints = {{"127.0.0.1", 0}};
    server_options.bind_host = "127.0.0.1";
    server_options.tables = config::JobTables(*options);
    for (auto& t : server_options.tables) {
      if (t.kind == TableKind::kSparse) t.shards = options->local_shards;
      if (t.memory_budget_bytes > 0 && server_options.data_dir.empty()) {
        // The cold tier of a budgeted table needs a directory; a private one per process.
        server_options.data_dir =
            (std::filesystem::temp_directory_path() / ("fleetps-local-" + std::to_string(::getpid()))).string();
      }
    }
    server_options.source = "local tables of " + config_path;
    // This process saves and loads its model through its own server.
    const std::string& model = mode == "infer" ? options->infer_load_path : options->model_save_path;
    if (!model.empty()) {
      server_options.checkpoint_root = std::filesystem::absolute(model).lexically_normal().parent_path().string();
    }
    local_server = std::make_unique<server::App>(server_options);
    if (auto st = local_server->Start(); !st.ok()) return Fail(st);
    client_options.servers = {{"127.0.0.1", local_server->port()}};
  } else {
    client_options.rpc.auth_key = cluster.auth_key;
    client_options.rpc.tls = cluster.tls;
  }
  // Metrics are opt-in on trainers: --metrics-port or FLEETPS_TRAINER_METRICS_PORT.
  auto port = trainer::TrainerMetricsPort(metrics_port, config::ProcessEnv());
  if (!port.ok()) return Fail(port.status());
  metrics::Registry metrics_registry;
  std::unique_ptr<net::HttpEndpoint> metrics_endpoint;
  if (*port) {
    auto bind = trainer::TrainerMetricsBind(metrics_bind, config::ProcessEnv(), *options);
    if (!bind.ok()) return Fail(bind.status());
    auto served = trainer::ServeTrainerMetrics(metrics_registry, *bind, **port);
    if (!served.ok()) return Fail(served.status());
    metrics_endpoint = std::move(*served);
    flags.metrics = &metrics_registry;
  }
  // The dense layers' backend, where this process computes them (a heter job's cpu-trainers
  // leave them to the heter-trainers).
  if (!options->heter_mode()) {
    auto backend = dense::OpenDenseBackend(options->dense, "trainer " + std::to_string(options->trainer_id),
                                           flags.metrics);
    if (!backend.ok()) return Fail(backend.status());
    flags.dense = *std::move(backend);
  }
  auto client = trainer::PsClient::Connect(client_options);
  if (!client.ok()) return Fail(client.status());
  std::unique_ptr<trainer::HeterClient> heter;
  if (options->heter_mode()) {
    auto heter_options = trainer::JobHeterClientOptions(*options, rpc);
    heter_options.rpc.auth_key = client_options.rpc.auth_key;
    heter_options.rpc.tls = client_options.rpc.tls;
    auto connected = trainer::HeterClient::Connect(std::move(heter_options));
    if (!connected.ok()) return Fail(connected.status());
    heter = std::move(*connected);
  }
  std::unique_ptr<trainer::collective::Communicator> comm;
  if (mode == "train" && options->collective_mode()) {
    trainer::collective::CollectiveOptions co;
    co.rank = options->trainer_id;
    co.endpoints = options->trainer_endpoints;
    if (co.endpoints.empty()) co.endpoints = {{"127.0.0.1", 0}};  // a single rank
    co.timeout = std::chrono::milliseconds(options->collective.timeout_ms);
    co.store_budget_bytes = options->collective.store_budget_bytes;
    co.auth_key = cluster.auth_key;
    co.tls = cluster.tls;
    std::string reason;
    auto made = trainer::collective::MakeRankCommunicator(options->collective, co, heter::BuildNcclBackend(), &reason);
    if (!made.ok()) return Fail(made.status());
    spdlog::info("collective rank {}: {}", co.rank, reason);
    comm = std::move(*made);
  }
  // Distributed training keeps a lease on every pserver (and heter-trainer) and says when
  // it has ended.
  std::optional<trainer::Heartbeat> heartbeat, heter_heartbeat;
  if (mode == "train" && !options->local()) {
    heartbeat.emplace(**client, options->trainer_id, options->trainers_num, rpc.heartbeat_interval, &stop);
  }
  if (heter) {
    heter_heartbeat.emplace(
        "the heter-trainers",
        [&heter](const trainer::HeartbeatState& state, std::chrono::milliseconds timeout) {
          return heter->Heartbeat(state, timeout);
        },
        options->trainer_id, rpc.heartbeat_interval, &stop);
  }
  // Under a Type=notify unit (fleetps-trainer@): READY=1 once connected and past the job's
  // start barrier, WATCHDOG=1 while the process runs (a stuck pserver fails the job through
  // the RPC deadlines instead), STOPPING=1 when the job has ended.
  systemd::Notifier notifier;
  auto started = [&notifier, &mode, id = options->trainer_id] {
    notifier.Ready("cpu-trainer " + std::to_string(id) + " " + (mode == "train" ? "training" : "scoring")).IgnoreError();
    notifier.StartWatchdog([] { return true; });
  };
  flags.on_started = started;
  if (mode != "train") started();
  const Status st = [&]() -> Status {
    if (mode != "train") return trainer::RunInferJob(*options, **client, flags);
    ASSIGN_OR_RETURN(flags.online_start, trainer::ResumeOnline(*options, **client, flags));
    return trainer::RunTrainJob(*options, **client, flags, heter.get(), comm.get());
  }();
  notifier.Stopping(st.ok() ? "job finished" : "job failed: " + st.message()).IgnoreError();
  if (heter_heartbeat) heter_heartbeat->Finish(st);
  if (heartbeat) heartbeat->Finish(st);
  if (st.ok() && mode == "train") {
    if (auto stopped = trainer::StopServersAtEnd(*options, **client); !stopped.ok()) return Fail(stopped);
  }
  heter.reset();
  comm.reset();
  client->reset();
  if (local_server) {
    local_server->Shutdown();
    std::error_code ignored;  // best effort: a private scratch directory
    if (!local_server->options().data_dir.empty()) std::filesystem::remove_all(local_server->options().data_dir, ignored);
  }
  if (!st.ok()) {
    Fail(st);
    if (stop.requested()) StopSignals::ExitBySignal(stop.signal());  // the status says what stopped it
    return 1;
  }
  return 0;
}
