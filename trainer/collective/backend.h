#pragma once
// Which communicator a collective rank uses (fleetps.collective.backend,
// PADDLE_DISTRI_BACKEND): NCCL on the rank's GPU, or Gloo over TCP on the CPU. The decision
// is plain logic over what the build and the machine offer, so it is tested without a GPU.
// MakeRankCommunicator makes the communicator it names; the NCCL backend comes from the CUDA
// library (heter_trainer/device/nccl_backend.h), handed in by the composition roots, so that
// nothing here links CUDA.
#include <functional>
#include <memory>
#include <string>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "trainer/collective/communicator.h"

namespace fleetps::trainer::collective {

struct BackendChoice {
  config::CollectiveBackend backend = config::CollectiveBackend::kGloo;  // kGloo or kNccl
  int gpu = -1;                                                          // NCCL: the rank's GPU
  std::string reason;                                                    // why, for the log
};

// `build_has_nccl`: this binary has the NCCL backend; `visible_gpus`: the CUDA devices this
// process sees. auto falls back to Gloo, saying why; an explicit nccl that cannot run is an
// error naming what is missing and how to fix it.
StatusOr<BackendChoice> ChooseBackend(const config::DataParallelOptions& options, bool build_has_nccl,
                                      int visible_gpus);

// What a build with NCCL offers: the CUDA devices this process sees, and the NCCL
// communicator of a rank on one of them.
struct NcclBackend {
  std::function<int()> visible_gpus;
  std::function<StatusOr<std::unique_ptr<Communicator>>(const CollectiveOptions& options, int gpu)> make;
};

// The communicator of one collective rank, NCCL through `nccl` (null: this build has none)
// or Gloo, as ChooseBackend decides. `options.gpu`: the rank's GPU, -1 for none (then auto
// means Gloo). `reason` (may be null) receives why that backend, for the log.
StatusOr<std::unique_ptr<Communicator>> MakeRankCommunicator(const config::DataParallelOptions& options,
                                                             const CollectiveOptions& co, const NcclBackend* nccl,
                                                             std::string* reason);

}  // namespace fleetps::trainer::collective
