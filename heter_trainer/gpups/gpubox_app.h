#pragma once
// GpuBoxApp: a heter-trainer in GPU-PS pass mode (runner.sync_mode: gpubox, or --sync-mode
// gpubox) as an object; apps/heter_trainer/main.cc is its thin root. The node is itself the
// trainer of its devices, as a PaddleRec gpubox job (scripts/run_gpubox.sh):
//   TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=0 PADDLE_TRAINERS_NUM=1 FLAGS_selected_gpus=0,1
//   PADDLE_PSERVERS_IP_PORT_LIST=... [HETER_DEVICE_TYPE=cpu] heter-trainer --config job.yaml
// ResolveGpuBoxApp reads the job YAML as a cpu-trainer reads it (precedence: flags >
// environment > YAML > defaults); Run serves the opt-in /metrics, loads the cluster's
// security, runs the job (RunGpuPsJob) and tells a service manager when it is ready.
// Thread-safety: one thread calls Run.

#include <cstdint>
#include <optional>
#include <string>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "common/stop_request.h"

namespace fleetps::heter {

// The command line's overrides of a GPU-PS job (empty / nullopt: the YAML's or the
// environment's).
struct GpuBoxFlags {
  std::string config_path;
  std::string device, gpus, servers, log_level, train_data, test_data, merge, reader_type;
  std::optional<uint32_t> epochs;
  std::optional<uint16_t> metrics_port;
  std::optional<std::string> metrics_bind;
  std::string report_path;  // "{trainer_id}" is replaced by the trainer's id
};

struct GpuBoxAppOptions {
  config::TrainerOptions job;  // validated, gpubox mode
  std::string config_path;     // the job YAML: its fleetps.server section holds the cluster's security files
  std::string report_path;     // this trainer's ("" = none)
  std::optional<uint16_t> metrics_port;
  std::optional<std::string> metrics_bind;
};

// The job's options from `flags` and the environment `env`; errors name the flag at fault.
StatusOr<GpuBoxAppOptions> ResolveGpuBoxApp(const GpuBoxFlags& flags, const config::EnvLookup& env);

class GpuBoxApp {
 public:
  // `stop` (outlives the app; null: never): the pass in progress is written back to the
  // pservers and the job ends, Aborted.
  GpuBoxApp(GpuBoxAppOptions options, const StopRequest* stop);
  Status Run();

 private:
  const GpuBoxAppOptions options_;
  const StopRequest* const stop_;
};

}  // namespace fleetps::heter
