#include "trainer/app/trainer_app.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>

#include "common/config/security_config.h"
#include "common/config/server_config.h"
#include "common/dense/open_backend.h"
#include "common/metrics/registry.h"
#include "common/net/http_endpoint.h"
#include "common/systemd/notifier.h"
#include "server/app/app.h"
#include "trainer/client/heter_client.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/communicator.h"
#include "trainer/runtime/heartbeat.h"

namespace fleetps::trainer {
namespace {

// Local mode's in-process pserver; shut down, and its private scratch directory removed,
// however the run ends.
struct LocalServer {
  std::unique_ptr<server::App> app;
  ~LocalServer() {
    if (app == nullptr) return;
    app->Shutdown();
    std::error_code ignored;  // best effort: a private scratch directory
    if (!app->options().data_dir.empty()) std::filesystem::remove_all(app->options().data_dir, ignored);
  }
};

// Local mode's pserver: the job's tables, on a loopback port of this process.
StatusOr<std::unique_ptr<server::App>> StartLocalServer(const TrainerAppOptions& options) {
  const config::TrainerOptions& o = options.job;
  config::ServerOptions server_options;
  server_options.endpoints = {{"127.0.0.1", 0}};
  server_options.bind_host = "127.0.0.1";
  server_options.tables = config::JobTables(o);
  for (auto& t : server_options.tables) {
    if (t.kind == TableKind::kSparse) t.shards = o.local_shards;
    if (t.memory_budget_bytes > 0 && server_options.data_dir.empty()) {
      // The cold tier of a budgeted table needs a directory; a private one per process.
      server_options.data_dir =
          (std::filesystem::temp_directory_path() / ("fleetps-local-" + std::to_string(::getpid()))).string();
    }
  }
  server_options.source = "local tables of " + options.config_path;
  // This process saves and loads its model through its own server.
  const std::string& model = options.infer ? o.infer_load_path : o.model_save_path;
  if (!model.empty()) {
    server_options.checkpoint_root = std::filesystem::absolute(model).lexically_normal().parent_path().string();
  }
  auto app = std::make_unique<server::App>(server_options);
  RETURN_IF_ERROR(app->Start());
  return app;
}

// Collective mode's rank among PADDLE_TRAINER_ENDPOINTS (one rank without), NCCL or Gloo.
StatusOr<std::unique_ptr<collective::Communicator>> JoinCollective(const config::TrainerOptions& o,
                                                                   const net::ClusterSecurity& cluster,
                                                                   const collective::NcclBackend* nccl) {
  collective::CollectiveOptions co;
  co.rank = o.trainer_id;
  co.endpoints = o.trainer_endpoints;
  if (co.endpoints.empty()) co.endpoints = {{"127.0.0.1", 0}};  // a single rank
  co.timeout = std::chrono::milliseconds(o.collective.timeout_ms);
  co.store_budget_bytes = o.collective.store_budget_bytes;
  co.auth_key = cluster.auth_key;
  co.tls = cluster.tls;
  std::string reason;
  ASSIGN_OR_RETURN(auto comm, collective::MakeRankCommunicator(o.collective, co, nccl, &reason));
  spdlog::info("collective rank {}: {}", co.rank, reason);
  return comm;
}

}  // namespace

StatusOr<TrainerAppOptions> ResolveTrainerApp(const TrainerFlags& f, const config::EnvLookup& env) {
  TrainerAppOptions out;
  out.config_path = f.config_path;
  out.infer = f.mode == "infer";
  ASSIGN_OR_RETURN(config::TrainerOptions o, config::LoadTrainerYaml(f.config_path));
  RETURN_IF_ERROR(config::ApplyTrainerEnv(env, &o));
  if (!f.servers.empty()) {
    auto eps = net::ParseEndpointList(f.servers);
    if (!eps.ok()) return eps.status().WithContext("--servers");
    o.pservers = *eps;
  }
  if (f.trainer_id) o.trainer_id = *f.trainer_id;
  if (f.trainers) o.trainers_num = *f.trainers;
  if (f.epochs) o.epochs = *f.epochs;
  if (f.threads) o.worker_threads = *f.threads;
  if (f.print_interval) o.print_interval = *f.print_interval;
  if (!f.train_data.empty()) o.data.train_paths = {f.train_data};
  if (!f.test_data.empty()) o.data.test_paths = {f.test_data};
  if (!f.log_level.empty()) o.log_level = f.log_level;
  // The pservers resolve a relative model path below their checkpoint root; the flag's is the shell's.
  if (!f.model_dir.empty()) o.infer_load_path = std::filesystem::absolute(f.model_dir).lexically_normal().string();
  if (f.rpc_timeout_ms) out.rpc.request_timeout = std::chrono::milliseconds(*f.rpc_timeout_ms);
  if (f.connect_timeout_ms) out.rpc.connect_timeout = std::chrono::milliseconds(*f.connect_timeout_ms);
  if (f.heartbeat_interval_ms) out.rpc.heartbeat_interval = std::chrono::milliseconds(*f.heartbeat_interval_ms);
  if (!f.sync_mode.empty() && !config::SyncModeFromName(f.sync_mode, &o.sync_mode)) {
    return Status::InvalidArgument("--sync-mode must be async, sync, geo, heter or collective");
  }
  if (o.gpubox_mode() && !out.infer) {
    return Status::InvalidArgument(
        "runner.sync_mode gpubox (GPU-PS passes) is trained by heter-trainer, one process per node driving the "
        "devices of FLAGS_selected_gpus (scripts/run_gpubox.sh), not by cpu-trainer");
  }
  if (o.gpubox_mode()) o.sync_mode = config::SyncMode::kAsync;  // infer: score alone
  if (!f.heter_trainers.empty()) {
    auto eps = net::ParseEndpointList(f.heter_trainers);
    if (!eps.ok()) return eps.status().WithContext("--heter-trainers");
    o.heter_trainers = *eps;
    o.sync_mode = config::SyncMode::kHeter;
  }
  // Scoring a saved model needs no heter-trainer or other rank: the forward pass runs here.
  if (out.infer && (o.heter_mode() || o.collective_mode())) {
    o.sync_mode = config::SyncMode::kAsync;
    if (o.local()) {  // a collective job's rank: score alone
      o.trainers_num = 1;
      o.trainer_id = 0;
    }
  }
  RETURN_IF_ERROR(config::ValidateTrainerOptions(o));
  out.report_path = PerTrainerPath(f.report_path, o.trainer_id);
  out.predictions_path = PerTrainerPath(f.predictions_path, o.trainer_id);
  out.metrics_port = f.metrics_port;
  out.metrics_bind = f.metrics_bind;
  out.job = std::move(o);
  return out;
}

TrainerApp::TrainerApp(TrainerAppOptions options, const collective::NcclBackend* nccl, const StopRequest* stop)
    : options_(std::move(options)), nccl_(nccl), stop_(stop) {}

Status TrainerApp::Run() {
  const config::TrainerOptions& o = options_.job;
  JobFlags flags;
  flags.report_path = options_.report_path;
  flags.predictions_path = options_.predictions_path;
  flags.stop = options_.infer ? nullptr : stop_;  // a stop request ends training; scoring is not held
  // The cluster's shared secret and TLS files, when it has them: the job YAML's
  // fleetps.server section (what the pservers read), overridden by FLEETPS_AUTH_SECRET_FILE
  // and FLEETPS_TLS_*_FILE. For the pservers, and for a collective job's rendezvous (whose
  // ranks may run without pservers, in local mode).
  net::ClusterSecurity cluster;
  if (!o.local() || o.collective_mode()) {
    ASSIGN_OR_RETURN(cluster, config::LoadClusterSecurity(options_.config_path, config::ProcessEnv()));
  }
  // Local mode: an in-process pserver with the job's tables, on a loopback port.
  LocalServer local_server;
  PsClientOptions client_options = JobClientOptions(o, options_.rpc);
  if (o.local()) {
    ASSIGN_OR_RETURN(local_server.app, StartLocalServer(options_));
    client_options.servers = {{"127.0.0.1", local_server.app->port()}};
  } else {
    client_options.rpc.auth_key = cluster.auth_key;
    client_options.rpc.tls = cluster.tls;
  }
  // Metrics are opt-in on trainers: --metrics-port or FLEETPS_TRAINER_METRICS_PORT.
  ASSIGN_OR_RETURN(auto port, TrainerMetricsPort(options_.metrics_port, config::ProcessEnv()));
  metrics::Registry metrics_registry;
  std::unique_ptr<net::HttpEndpoint> metrics_endpoint;
  if (port) {
    ASSIGN_OR_RETURN(auto bind, TrainerMetricsBind(options_.metrics_bind, config::ProcessEnv(), o));
    ASSIGN_OR_RETURN(metrics_endpoint, ServeTrainerMetrics(metrics_registry, bind, *port));
    flags.metrics = &metrics_registry;
  }
  // The dense layers' backend, where this process computes them (a heter job's cpu-trainers
  // leave them to the heter-trainers).
  if (!o.heter_mode()) {
    ASSIGN_OR_RETURN(flags.dense,
                     dense::OpenDenseBackend(o.dense, "trainer " + std::to_string(o.trainer_id), flags.metrics));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client, PsClient::Connect(client_options));
  std::unique_ptr<HeterClient> heter;
  if (o.heter_mode()) {
    auto heter_options = JobHeterClientOptions(o, options_.rpc);
    heter_options.rpc.auth_key = client_options.rpc.auth_key;
    heter_options.rpc.tls = client_options.rpc.tls;
    ASSIGN_OR_RETURN(heter, HeterClient::Connect(std::move(heter_options)));
  }
  std::unique_ptr<collective::Communicator> comm;
  if (!options_.infer && o.collective_mode()) {
    ASSIGN_OR_RETURN(comm, JoinCollective(o, cluster, nccl_));
  }
  return RunJob(*client, heter.get(), comm.get(), flags);
}

Status TrainerApp::RunJob(PsClient& client, HeterClient* heter, collective::Communicator* comm, JobFlags& flags) {
  const config::TrainerOptions& o = options_.job;
  // Distributed training keeps a lease on every pserver (and heter-trainer) and says when
  // it has ended.
  std::optional<Heartbeat> heartbeat, heter_heartbeat;
  if (!options_.infer && !o.local()) {
    heartbeat.emplace(client, o.trainer_id, o.trainers_num, options_.rpc.heartbeat_interval, stop_);
  }
  if (heter) {
    heter_heartbeat.emplace(
        "the heter-trainers",
        [heter](const HeartbeatState& state, std::chrono::milliseconds timeout) {
          return heter->Heartbeat(state, timeout);
        },
        o.trainer_id, options_.rpc.heartbeat_interval, stop_);
  }
  // Under a Type=notify unit (fleetps-trainer@): READY=1 once connected and past the job's
  // start barrier, WATCHDOG=1 while the process runs (a stuck pserver fails the job through
  // the RPC deadlines instead), STOPPING=1 when the job has ended.
  systemd::Notifier notifier;
  auto started = [&notifier, infer = options_.infer, id = o.trainer_id] {
    notifier.Ready("cpu-trainer " + std::to_string(id) + " " + (infer ? "scoring" : "training")).IgnoreError();
    notifier.StartWatchdog([] { return true; });
  };
  flags.on_started = started;
  if (options_.infer) started();
  const Status st = [&]() -> Status {
    if (options_.infer) return RunInferJob(o, client, flags);
    ASSIGN_OR_RETURN(flags.online_start, ResumeOnline(o, client, flags));
    return RunTrainJob(o, client, flags, heter, comm);
  }();
  notifier.Stopping(st.ok() ? "job finished" : "job failed: " + st.message()).IgnoreError();
  if (heter_heartbeat) heter_heartbeat->Finish(st);
  if (heartbeat) heartbeat->Finish(st);
  if (st.ok() && !options_.infer) RETURN_IF_ERROR(StopServersAtEnd(o, client));
  return st;
}

}  // namespace fleetps::trainer
