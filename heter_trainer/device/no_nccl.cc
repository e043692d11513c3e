// BuildNcclBackend of a build without CUDA and NCCL: collectives run on Gloo.

#include "heter_trainer/device/nccl_backend.h"

namespace fleetps::heter {

const trainer::collective::NcclBackend* BuildNcclBackend() { return nullptr; }

}  // namespace fleetps::heter
