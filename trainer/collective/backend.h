#pragma once
// Which communicator a collective rank uses (fleetps.collective.backend,
// PADDLE_DISTRI_BACKEND): NCCL on the rank's GPU, or Gloo over TCP on the CPU. The decision
// is plain logic over what the build and the machine offer, so it is tested without a GPU;
// the composition root (trainer/main.cc) makes the communicator it names.
#include <string>

#include "common/config/trainer_config.h"
#include "common/status.h"

namespace fleetps::trainer::collective {

struct BackendChoice {
  config::CollectiveBackend backend = config::CollectiveBackend::kGloo;  // kGloo or kNccl
  int gpu = -1;        // NCCL: the rank's GPU
  std::string reason;  // why, for the log
};

// `build_has_nccl`: this binary has the NCCL backend; `visible_gpus`: the CUDA devices this
// process sees. auto falls back to Gloo, saying why; an explicit nccl that cannot run is an
// error naming what is missing and how to fix it.
StatusOr<BackendChoice> ChooseBackend(const config::DataParallelOptions& options, bool build_has_nccl,
                                      int visible_gpus);

}  // namespace fleetps::trainer::collective
