#include "trainer/collective/backend.h"

namespace fleetps::trainer::collective {

using config::CollectiveBackend;

StatusOr<BackendChoice> ChooseBackend(const config::DataParallelOptions& o, bool build_has_nccl, int visible_gpus) {
  BackendChoice gloo;
  if (o.backend == CollectiveBackend::kGloo) {
    gloo.reason = "backend: gloo";
    return gloo;
  }
  const std::string gpu = "GPU " + std::to_string(o.gpu);
  std::string missing;
  if (o.gpu < 0) {
    missing = "no GPU was given to this rank (FLAGS_selected_gpus is unset; fleetps-launch --gpus 0,1 sets it)";
  } else if (!build_has_nccl) {
    missing = gpu + " was selected, but this build has no NCCL (rebuild with the CUDA toolkit and NCCL)";
  } else if (o.gpu >= visible_gpus) {
    missing = gpu + " was selected, but this process sees " + std::to_string(visible_gpus) +
              " CUDA device(s) (check FLAGS_selected_gpus and CUDA_VISIBLE_DEVICES)";
  }
  if (o.backend == CollectiveBackend::kNccl) {
    if (!missing.empty())
      return Status::InvalidArgument("collective backend nccl: " + missing + "; or use backend: gloo");
    return BackendChoice{CollectiveBackend::kNccl, o.gpu, "backend: nccl on " + gpu};
  }
  if (!missing.empty()) {
    gloo.reason = "backend auto: Gloo, " + missing;
    return gloo;
  }
  return BackendChoice{CollectiveBackend::kNccl, o.gpu, "backend auto: NCCL on " + gpu + " (FLAGS_selected_gpus)"};
}

StatusOr<std::unique_ptr<Communicator>> MakeRankCommunicator(const config::DataParallelOptions& options,
                                                             const CollectiveOptions& co, const NcclBackend* nccl,
                                                             std::string* reason) {
  const int visible = nccl != nullptr && options.gpu >= 0 ? nccl->visible_gpus() : 0;
  ASSIGN_OR_RETURN(auto choice, ChooseBackend(options, nccl != nullptr, visible));
  if (reason != nullptr) *reason = choice.reason;
  if (choice.backend == CollectiveBackend::kNccl) return nccl->make(co, choice.gpu);
  return MakeGlooCommunicator(co);
}

}  // namespace fleetps::trainer::collective
