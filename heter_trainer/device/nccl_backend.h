#pragma once
// The NCCL backend of this build, for trainer::collective::MakeRankCommunicator: NCCL on a
// rank's GPU (heter_trainer/cuda/nccl_communicator.cc) where the build has CUDA and NCCL,
// else null (no_nccl.cc). The composition roots that run collectives hand it in:
// cpu-trainer's collective mode, the heter-trainers' dense allreduce, GPU-PS's nodes.

#include "trainer/collective/backend.h"

namespace fleetps::heter {

// Valid for the life of the process; null without NCCL.
const trainer::collective::NcclBackend* BuildNcclBackend();

}  // namespace fleetps::heter
