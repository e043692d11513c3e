#include "heter_trainer/gpups/gpubox_app.h"

#include <memory>

#include "common/config/heter_config.h"
#include "common/config/security_config.h"
#include "common/metrics/registry.h"
#include "common/net/http_endpoint.h"
#include "common/systemd/notifier.h"
#include "heter_trainer/gpups/gpups_job.h"
#include "trainer/runtime/job.h"

namespace fleetps::heter {

StatusOr<GpuBoxAppOptions> ResolveGpuBoxApp(const GpuBoxFlags& f, const config::EnvLookup& env) {
  ASSIGN_OR_RETURN(config::TrainerOptions o, config::LoadTrainerYaml(f.config_path));
  o.sync_mode = config::SyncMode::kGpuBox;
  RETURN_IF_ERROR(config::ApplyTrainerEnv(env, &o));
  if (!f.servers.empty()) {
    auto eps = net::ParseEndpointList(f.servers);
    if (!eps.ok()) return eps.status().WithContext("--servers");
    o.pservers = *eps;
  }
  if (!f.device.empty()) o.gpups.device = f.device;
  if (!f.gpus.empty()) {
    ASSIGN_OR_RETURN(auto list, config::ParseUintList(f.gpus, "--gpus"));
    o.gpups.devices.assign(list.begin(), list.end());
  }
  if (!f.train_data.empty()) o.data.train_paths = {f.train_data};
  if (!f.test_data.empty()) o.data.test_paths = {f.test_data};
  if (f.epochs) o.epochs = *f.epochs;
  if (!f.merge.empty()) o.gpups.average_merge = f.merge == "average";
  if (!f.reader_type.empty() && !config::DatasetKindFromName(f.reader_type, &o.data.dataset)) {
    return Status::InvalidArgument("--reader-type " + f.reader_type +
                                   ": not QueueDataset, InMemoryDataset or InmemoryDataset");
  }
  if (!f.log_level.empty()) o.log_level = f.log_level;
  RETURN_IF_ERROR(config::ValidateTrainerOptions(o));
  GpuBoxAppOptions out;
  // One command line for every node (fleetps-launch): --report out/trainer{trainer_id}.json.
  out.report_path = trainer::PerTrainerPath(f.report_path, o.trainer_id);
  out.job = std::move(o);
  out.config_path = f.config_path;
  out.metrics_port = f.metrics_port;
  out.metrics_bind = f.metrics_bind;
  return out;
}

GpuBoxApp::GpuBoxApp(GpuBoxAppOptions options, const StopRequest* stop) : options_(std::move(options)), stop_(stop) {}

Status GpuBoxApp::Run() {
  const config::TrainerOptions& o = options_.job;
  trainer::JobFlags flags;
  flags.stop = stop_;
  flags.report_path = options_.report_path;
  // Opt-in /metrics, as cpu-trainer's (--metrics-port or FLEETPS_TRAINER_METRICS_PORT): the
  // training series and the passes'.
  ASSIGN_OR_RETURN(auto port, trainer::TrainerMetricsPort(options_.metrics_port, config::ProcessEnv()));
  metrics::Registry metrics_registry;
  std::unique_ptr<net::HttpEndpoint> metrics_endpoint;
  if (port) {
    ASSIGN_OR_RETURN(auto bind, trainer::TrainerMetricsBind(options_.metrics_bind, config::ProcessEnv(), o));
    ASSIGN_OR_RETURN(metrics_endpoint, trainer::ServeTrainerMetrics(metrics_registry, bind, *port));
    flags.metrics = &metrics_registry;
  }
  // Under a Type=notify unit (fleetps-heter-trainer@): READY=1 once connected to the
  // pservers and past the job's start barrier; the job then runs to its end.
  systemd::Notifier notifier;
  flags.on_started = [&notifier, id = o.trainer_id] {
    notifier.Ready("heter-trainer (gpubox) trainer " + std::to_string(id) + " training").IgnoreError();
    // The unit's WatchdogSec=: a gpubox job serves no requests, so there is no io thread to
    // probe; the pings say the process runs, and a stuck pserver fails the job through the
    // RPC deadlines instead.
    notifier.StartWatchdog([] { return true; });
  };
  // The cluster's secret and TLS, found as a cpu-trainer finds them.
  ASSIGN_OR_RETURN(auto security, config::LoadClusterSecurity(options_.config_path, config::ProcessEnv()));
  const Status st = RunGpuPsJob(o, trainer::TrainerRpcOptions{}, security, flags);
  notifier.Stopping(st.ok() ? "job finished" : "job failed").IgnoreError();
  return st;
}

}  // namespace fleetps::heter
