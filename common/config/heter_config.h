#pragma once
// heter-trainer options: the job YAML (the same file the cpu-trainers and pservers read)
// plus Paddle's heterogeneous-PS environment.
//
// Environment (as Paddle's PaddleCloudRoleMaker reads it for a heter worker):
//   TRAINING_ROLE=HETER_TRAINER (when set)
//   POD_IP, PADDLE_PORT                        this heter-trainer's endpoint
//   PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST      every heter-trainer (this one included; Paddle
//                                              2.0-2.1 and the paddle-operator: PADDLE_HETER_TRAINER_IP_PORT_LIST)
//   PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST the stage before (the cpu-trainers' endpoints; informative)
//   PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST     the stage after (must be empty: fleetps runs two stages)
//   STAGE_ID, STAGE_NUM                         this stage (2) of how many (2); stage 1 is the cpu-trainers
//   PADDLE_STAGE_TRAINERS_NUM                   processes per stage, e.g. "[2, 1]"
//   HETER_DEVICE_TYPE                            gpu | cpu (unset: gpu when one is visible, else cpu;
//                                                Paddle 2.0-2.1: PADDLE_HETER_TRAINER_DEVICE)
//   FLAGS_selected_gpus                          e.g. "0": the GPU this process uses
//   PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM   as for the cpu-trainers
//   FLEETPS_LOG_LEVEL, FLEETPS_AUTH_SECRET_FILE         as for the pservers
// Precedence: flags > environment > YAML > defaults.

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/server_config.h"
#include "common/config/trainer_config.h"
#include "common/net/endpoint.h"
#include "common/status.h"

namespace fleetps::config {

struct HeterTrainerOptions {
  // The job: model, tables, pservers, PADDLE_TRAINERS_NUM (the cpu-trainers it serves),
  // fleetps.heter (lanes), the dense communicator's settings (dense_pull_interval,
  // max_merge_steps).
  TrainerOptions job;
  // Its RPC server, from the job YAML's fleetps.server map (limits, auth, trainer_lease_s):
  // endpoints = every heter-trainer, index = this one.
  ServerOptions server;
  std::string device = "auto";           // HETER_DEVICE_TYPE: gpu | cpu | auto (the GPU when usable, else the CPU)
  std::vector<int> gpus = {0};           // FLAGS_selected_gpus: the first one is used
  uint32_t stage_id = 2;                 // STAGE_ID (1 = the cpu-trainers)
  uint32_t stage_num = 2;                // STAGE_NUM
  std::vector<uint32_t> stage_trainers;  // PADDLE_STAGE_TRAINERS_NUM; empty = not given
  std::vector<net::Endpoint> previous;   // PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST
  std::vector<net::Endpoint> next;       // PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST
  // /metrics, /healthz, /readyz on this port (0: off, the default): FLEETPS_HETER_METRICS_PORT
  // or --metrics-port.
  uint16_t metrics_port = 0;
  // The address metrics_port listens on: FLEETPS_HETER_METRICS_BIND or --metrics-bind (an IP
  // address). Empty (default): the RPC server's (BindHost(server)).
  std::string metrics_bind;
};

// The job YAML read as a heter-trainer reads it (job + fleetps.server).
StatusOr<HeterTrainerOptions> LoadHeterTrainerYaml(const std::string& path);
Status ApplyHeterTrainerEnv(const EnvLookup& env, HeterTrainerOptions* options);
Status ValidateHeterTrainerOptions(const HeterTrainerOptions& options);

// "[2, 1]", "2,1" or "2 1" -> {2, 1}.
StatusOr<std::vector<uint32_t>> ParseUintList(const std::string& text, const std::string& what);

}  // namespace fleetps::config
