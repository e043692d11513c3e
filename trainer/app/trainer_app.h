#pragma once
// TrainerApp: cpu-trainer as an object (apps/cpu_trainer/main.cc is its thin root; tests may
// run it in-process). ResolveTrainerApp turns the command line's values into the job's
// options (precedence: flags > environment > YAML > defaults, common/config/trainer_config.h);
// Run connects to the pservers (local mode: starts an in-process pserver with the job's
// tables on a loopback port), to the heter-trainers (heter mode) or the other ranks
// (collective mode), keeps the leases, trains or scores the job, and stops.
// Thread-safety: one thread calls Run.

#include <cstdint>
#include <optional>
#include <string>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "common/stop_request.h"
#include "trainer/collective/backend.h"
#include "trainer/runtime/job.h"

namespace fleetps::trainer {

class PsClient;
class HeterClient;

// cpu-trainer's command line, as given (empty / nullopt: not given).
struct TrainerFlags {
  std::string config_path;     // --config, required
  std::string mode = "train";  // train | infer
  std::string servers, heter_trainers, sync_mode, train_data, test_data, log_level, model_dir;
  std::optional<uint32_t> trainer_id, trainers, epochs, threads, print_interval;
  std::optional<int64_t> rpc_timeout_ms, connect_timeout_ms, heartbeat_interval_ms;
  std::optional<uint16_t> metrics_port;
  std::optional<std::string> metrics_bind;
  std::string report_path, predictions_path;  // "{trainer_id}" is replaced by the trainer's id
};

// A resolved, validated cpu-trainer run.
struct TrainerAppOptions {
  config::TrainerOptions job;
  std::string config_path;  // the job YAML: its fleetps.server section holds the cluster's security files
  bool infer = false;       // --mode infer: score a saved model
  TrainerRpcOptions rpc;
  std::string report_path, predictions_path;  // this trainer's
  std::optional<uint16_t> metrics_port;
  std::optional<std::string> metrics_bind;
};

// The job's options from `flags` and the environment `env`; errors name the flag, variable or
// YAML key at fault.
StatusOr<TrainerAppOptions> ResolveTrainerApp(const TrainerFlags& flags, const config::EnvLookup& env);

class TrainerApp {
 public:
  // `nccl`: the build's NCCL backend for collective mode (heter::BuildNcclBackend; null: Gloo
  // only). `stop` (null: never): a stop request ends training gracefully, the steps in flight
  // pushed. Both outlive the app.
  TrainerApp(TrainerAppOptions options, const collective::NcclBackend* nccl, const StopRequest* stop);

  // The whole run; its status is the job's (Aborted after a stop request).
  Status Run();

 private:
  // The connected run: leases on the pservers (and heter-trainers), the service manager's
  // notifications, the job itself, the pservers stopped at its end.
  Status RunJob(PsClient& client, HeterClient* heter, collective::Communicator* comm, JobFlags& flags);

  const TrainerAppOptions options_;
  const collective::NcclBackend* const nccl_;
  const StopRequest* const stop_;
};

}  // namespace fleetps::trainer
