#pragma once
// The cpu-trainer jobs: train (epochs, evaluation on the test split, model save, cluster
// shutdown) and infer (score a data set with a saved model). Both run over a PsClient
// that main() connects either to the pservers or to an in-process server (local mode).

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/config/server_config.h"
#include "common/config/trainer_config.h"
#include "common/dense/cpu_gemm.h"
#include "common/net/http_endpoint.h"
#include "common/status.h"
#include "common/stop_request.h"
#include "trainer/client/heter_client.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/communicator.h"
#include "trainer/runtime/online_resume.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::metrics {
class Registry;
}  // namespace fleetps::metrics

namespace fleetps::trainer {

// How a cpu-trainer talks to the pservers. The job YAML has no keys for these yet (they
// would be fleetps.request_timeout_ms, fleetps.connect_timeout_ms,
// fleetps.admin_timeout_ms, fleetps.keepalive_interval_ms and fleetps.barrier_margin_ms);
// until it does, these defaults hold and cpu-trainer flags override them.
struct TrainerRpcOptions {
  // Every pull, push, Ping or metric call fails (naming the pserver) after this long, a
  // frozen or partitioned pserver included.
  std::chrono::milliseconds request_timeout{60000};
  std::chrono::milliseconds connect_timeout{60000};     // start-up: pservers not listening yet
  std::chrono::milliseconds admin_timeout{3600000};     // Save, Load, Shrink
  std::chrono::milliseconds keepalive_interval{10000};  // silence before a liveness Ping
  std::chrono::milliseconds barrier_margin{10000};      // a barrier waits barrier_timeout_ms + this
  // Heartbeat period (trainer leases, server.trainer_lease_s: keep it well below the lease).
  std::chrono::milliseconds heartbeat_interval{5000};
};

// The PsClient options of a job: its pservers and `rpc`.
PsClientOptions JobClientOptions(const config::TrainerOptions& options, const TrainerRpcOptions& rpc);
// The HeterClient options of a heter-mode job: its heter-trainers and fleetps.heter.
HeterClientOptions JobHeterClientOptions(const config::TrainerOptions& options, const TrainerRpcOptions& rpc);

// Trainer 0 of a distributed job with fleetps.stop_servers_at_end: asks every pserver to
// stop (after the job and its final heartbeat; the others have passed the last barrier).
Status StopServersAtEnd(const config::TrainerOptions& options, PsClient& client);

struct JobFlags {
  std::string report_path;               // JSON summary written at the end ("" = none)
  std::string predictions_path;          // infer/eval: "label prediction" per output, a line per example ("" = none)
  metrics::Registry* metrics = nullptr;  // training series go here (outlives the job; null: none)
  // The dense backend the role opened from fleetps.dense (dense::OpenDenseBackend); null:
  // fp32 with the CPU's best kernels.
  std::shared_ptr<const dense::CpuGemm> dense;
  // Called once training can begin: connected to the pservers, past the start barrier
  // (a service manager's READY=1). Null: none.
  std::function<void()> on_started;
  // Once requested, training ends early without losing a trained step (Trainer::SetStopRequest)
  // and the job returns Aborted naming the reason: no test pass, no save. Null: never.
  const StopRequest* stop = nullptr;
  // Where an online job starts (ResumeOnline); nullopt: runner.start_pass of the first day.
  std::optional<OnlinePosition> online_start;
};

// `path` with every "{trainer_id}" replaced by `trainer_id`: the trainers of a job started
// with one command line (fleetps-launch) write their reports to distinct files.
std::string PerTrainerPath(std::string path, uint32_t trainer_id);

// The port of a trainer's opt-in /metrics (cpu-trainer, and heter-trainer in GPU-PS mode):
// `flag` (--metrics-port), else FLEETPS_TRAINER_METRICS_PORT from `env`; nullopt when neither
// is set. InvalidArgument naming the variable when its value is not a port number.
StatusOr<std::optional<uint16_t>> TrainerMetricsPort(std::optional<uint16_t> flag, const config::EnvLookup& env);

// The address a trainer's /metrics binds to: `flag` (--metrics-bind), else
// FLEETPS_TRAINER_METRICS_BIND from `env`, else the trainer's own address: the host of its
// entry of PADDLE_TRAINER_ENDPOINTS, else POD_IP (as a pserver derives its bind address from
// its endpoint: an IP address as is, localhost 127.0.0.1, a host name 0.0.0.0), else
// 127.0.0.1 (loopback: name an address above to be scraped from elsewhere).
// InvalidArgument naming the source when the value is not an IP address.
StatusOr<std::string> TrainerMetricsBind(const std::optional<std::string>& flag, const config::EnvLookup& env,
                                         const config::TrainerOptions& options);

// cpu-trainer --metrics-port: serves `registry` as /metrics, and /healthz and /readyz
// (200 while the process runs), on host:port (port 0: any free one), with the HTTP
// endpoint's default limits. Errors name the address and `what`: the options choosing it.
inline constexpr const char* kTrainerMetricsOptions =
    "--metrics-port / FLEETPS_TRAINER_METRICS_PORT, --metrics-bind / FLEETPS_TRAINER_METRICS_BIND";
StatusOr<std::unique_ptr<net::HttpEndpoint>> ServeTrainerMetrics(metrics::Registry& registry, const std::string& host,
                                                                 uint16_t port,
                                                                 const std::string& what = kTrainerMetricsOptions);

// An online job (runner.days) with model_save_path starts after the newest checkpoint that
// an earlier run of it recorded in model_save_path/donefile.txt (online_resume.h): trainer 0
// loads that checkpoint into the pservers, and the job trains from the pass after it, or from
// the configured start when that is later. Every trainer learns trainer 0's choice at the
// barrier 'online-resume', so only trainer 0 reads the donefile; trainer 0 loads after that
// barrier, and the others wait for it at the barrier 'start'. Call before anything sets or
// reads the dense parameters (Trainer::Start, the replicas of GPU-PS and of the collective
// hybrid), and pass the result in JobFlags::online_start. Returns the configured start for an
// offline job, an online one without model_save_path, and a first run (no donefile).
StatusOr<OnlinePosition> ResumeOnline(const config::TrainerOptions& options, PsClient& client, const JobFlags& flags);

// `heter`: the heter-trainers of a heter-mode job, `comm`: the ranks of a collective job
// (null otherwise).
Status RunTrainJob(const config::TrainerOptions& options, PsClient& client, const JobFlags& flags,
                   HeterClient* heter = nullptr, collective::Communicator* comm = nullptr);
// GPU-PS pass mode: the same job with the heter-trainer's ParamSync (its device tables).
Status RunTrainJob(const config::TrainerOptions& options, PsClient& client, const JobFlags& flags,
                   std::unique_ptr<ParamSync> sync);
Status RunInferJob(const config::TrainerOptions& options, PsClient& client, const JobFlags& flags);

}  // namespace fleetps::trainer
