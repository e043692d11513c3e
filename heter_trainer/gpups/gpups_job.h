#pragma once
// The GPU-PS job of a heter-trainer (runner.sync_mode: gpubox), as a PaddleRec gpubox
// trainer: one process per node drives the devices of FLAGS_selected_gpus (CUDA tables, or
// the host-memory twin with HETER_DEVICE_TYPE=cpu), trains every epoch as one pass
// (begin_pass, train, end_pass) against the pservers, evaluates, saves, and stops the
// pservers at the end (trainer 0, fleetps.stop_servers_at_end). It keeps a lease on the
// pservers like a cpu-trainer.

#include "common/config/trainer_config.h"
#include "common/net/security.h"
#include "common/status.h"
#include "trainer/runtime/job.h"

namespace fleetps::heter {

// `options`: the job (validated, gpubox mode); `rpc`: the pserver client's deadlines;
// `security`: the cluster's secret and TLS (config::LoadClusterSecurity), for the pservers
// and the nodes' dense allreduce rendezvous.
Status RunGpuPsJob(const config::TrainerOptions& options, const trainer::TrainerRpcOptions& rpc,
                   const net::ClusterSecurity& security, const trainer::JobFlags& flags);

// The pass table for options.gpups: CUDA when device is gpu (or auto with a GPU visible and
// CUDA built), else the host twin; sized by fleetps.gpups.device_memory_mb.
StatusOr<std::unique_ptr<class PassTable>> MakeJobPassTable(const config::TrainerOptions& options);

}  // namespace fleetps::heter
