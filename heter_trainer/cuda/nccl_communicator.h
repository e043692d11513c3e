#pragma once
// The NCCL backend of trainer::collective::Communicator, on one GPU per rank. Plain C++
// header (no CUDA or NCCL include), so non-CUDA code can name it.
//
// Set-up, as Paddle's gen_nccl_id: rank 0 creates the NCCL unique id and publishes it in the
// collective rendezvous it serves on its PADDLE_TRAINER_ENDPOINTS entry (trainer/collective/
// rendezvous.h, over fleetps RPC); every other rank reads it there; then every rank joins
// the communicator on its GPU. Operations take host spans: each one copies the data to the
// device, runs the NCCL collective on the communicator's stream, copies the result back and
// waits — the same semantics as the Gloo backend, so the two are interchangeable (and
// compared in heter_cuda_test). Every CUDA and NCCL failure comes back as a Status naming
// the call and NCCL's error string. As with Gloo, set-up and each operation are bounded by
// CollectiveOptions::timeout (the communicator is non-blocking and polled): a rank that
// died, hangs or never joined fails the others with TimedOut instead of a hang, and a
// failed operation aborts the communicator (every later one returns the same error).

#include <memory>

#include "common/status.h"
#include "trainer/collective/communicator.h"

namespace fleetps::heter {

// The NCCL communicator of options.rank among options.endpoints.size() ranks on CUDA device
// `gpu`. Unavailable when no GPU is visible (with the hint to use the Gloo backend).
StatusOr<std::unique_ptr<trainer::collective::Communicator>> MakeNcclCommunicator(
    const trainer::collective::CollectiveOptions& options, int gpu);

}  // namespace fleetps::heter
