#pragma once
// MakeRankCommunicator: the communicator of one collective rank — NCCL on the rank's GPU,
// or Gloo over TCP — as trainer/collective/backend.h's ChooseBackend decides from
// fleetps.collective.backend (PADDLE_DISTRI_BACKEND) and what the build and the machine
// offer. One place for the composition roots that run collectives: cpu-trainer's collective
// mode, the heter-trainers' dense allreduce and GPU-PS's devices.
//
// Header-only because the NCCL backend exists only in builds with CUDA and NCCL:
// FLEETPS_HAVE_NCCL is then a public compile definition of fleetps::heter_device, so every
// target that links fleetps::heter_device (as every includer of this header must) sees the
// same definition.

#include <memory>
#include <string>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "heter_trainer/device/dense_device.h"
#include "trainer/collective/backend.h"
#include "trainer/collective/communicator.h"
#if defined(FLEETPS_HAVE_NCCL)
#include "heter_trainer/cuda/nccl_communicator.h"
#endif

namespace fleetps::heter {

// `options.gpu`: the rank's GPU, -1 for none (then auto means Gloo). `reason` (may be null)
// receives why that backend, for the log.
inline StatusOr<std::unique_ptr<trainer::collective::Communicator>> MakeRankCommunicator(
    const config::DataParallelOptions& options, const trainer::collective::CollectiveOptions& co,
    std::string* reason) {
#if defined(FLEETPS_HAVE_NCCL)
  constexpr bool kBuildHasNccl = true;
#else
  constexpr bool kBuildHasNccl = false;
#endif
  const int visible = options.gpu >= 0 ? VisibleCudaDevices() : 0;
  ASSIGN_OR_RETURN(auto choice, trainer::collective::ChooseBackend(options, kBuildHasNccl, visible));
  if (reason != nullptr) *reason = choice.reason;
#if defined(FLEETPS_HAVE_NCCL)
  if (choice.backend == config::CollectiveBackend::kNccl) return MakeNcclCommunicator(co, choice.gpu);
#endif
  return trainer::collective::MakeGlooCommunicator(co);
}

}  // namespace fleetps::heter
