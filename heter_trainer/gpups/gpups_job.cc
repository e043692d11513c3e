#include "heter_trainer/gpups/gpups_job.h"

#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/dense/open_backend.h"
#include "heter_trainer/gpups/gpups_sync.h"
#include "heter_trainer/gpups/pass_table.h"
#include "trainer/runtime/heartbeat.h"

namespace fleetps::heter {

StatusOr<std::unique_ptr<PassTable>> MakeJobPassTable(const config::TrainerOptions& o) {
  PassTableOptions table;
  table.table = o.sparse_table;
  table.devices = static_cast<uint32_t>(o.gpups.devices.size());
  table.device_ids = o.gpups.devices;
  table.device_memory_bytes = o.gpups.device_memory_mb << 20;
  table.cuda_wait = o.gpups.cuda_wait;
  if (o.gpups.device != "cpu") {
    auto cuda = MakeCudaPassTable(table);
    if (cuda.ok() || o.gpups.device != "auto" || !cuda.status().IsUnavailable()) return cuda;
    spdlog::info("GPU-PS: HETER_DEVICE_TYPE auto: the pass table is the host-memory twin ({})",
                 cuda.status().message());
  }
  return MakeHostPassTable(table);
}

Status RunGpuPsJob(const config::TrainerOptions& o, const trainer::TrainerRpcOptions& rpc,
                   const net::ClusterSecurity& security, const trainer::JobFlags& flags) {
  trainer::PsClientOptions client_options = trainer::JobClientOptions(o, rpc);
  client_options.rpc.auth_key = security.auth_key;
  client_options.rpc.tls = security.tls;
  // The devices first: a missing GPU fails at once, not after the pservers' connect deadline.
  ASSIGN_OR_RETURN(auto table, MakeJobPassTable(o));
  ASSIGN_OR_RETURN(auto client, trainer::PsClient::Connect(client_options));
  const uint32_t devices = table->devices();
  const uint32_t workers = devices * o.gpups.workers_per_device;
  spdlog::info(
      "trainer {}/{}: GPU-PS (gpubox) on {} {} device(s) (FLAGS_selected_gpus), {} worker(s) per device, "
      "{} dense ranks in all; prefetch helpers {} (fleetps.gpups.prefetch: {})",
      o.trainer_id, o.trainers_num, devices, table->device_name(), o.gpups.workers_per_device, workers * o.trainers_num,
      PrefetchOn(o.gpups, workers) ? "on" : "off",
      o.gpups.prefetch.has_value() ? (*o.gpups.prefetch ? "true" : "false")
                                   : fmt::format("auto, {} hardware threads", std::thread::hardware_concurrency()));
  if (o.data.dataset == config::DatasetKind::kQueue) {
    spdlog::info(
        "trainer {}: reader_type QueueDataset parses the data twice per pass (its keys, then training); "
        "InMemoryDataset (--reader-type) parses it once, as Paddle's load_into_memory",
        o.trainer_id);
  }
  const bool gpus = table->device_name() == "cuda";
  std::shared_ptr<const dense::CpuGemm> gemm = flags.dense;
  if (!gpus && gemm == nullptr) {  // the host twin computes the dense layers on this CPU
    ASSIGN_OR_RETURN(gemm, dense::OpenDenseBackend(o.dense, "trainer " + std::to_string(o.trainer_id), flags.metrics));
  }
  ASSIGN_OR_RETURN(auto comms, MakeDeviceCommunicators(o, workers, gpus, security.auth_key, security.tls));
  config::TrainerOptions job = o;
  job.worker_threads = workers;
  std::optional<trainer::Heartbeat> heartbeat;
  heartbeat.emplace(*client, o.trainer_id, o.trainers_num, rpc.heartbeat_interval, flags.stop);
  Status st;
  {
    // An online job's restart loads its last checkpoint before the dense replica is made.
    trainer::JobFlags job_flags = flags;
    job_flags.dense = gemm;
    auto start = trainer::ResumeOnline(job, *client, flags);
    if (start.ok()) job_flags.online_start = *start;
    auto sync = start.ok() ? GpuPsSync::Create(job, *client, std::move(table), std::move(comms), gemm)
                           : StatusOr<std::unique_ptr<GpuPsSync>>(start.status());
    if (sync.ok() && flags.metrics != nullptr) (*sync)->SetMetrics(*flags.metrics);
    st = sync.ok() ? trainer::RunTrainJob(job, *client, job_flags, std::move(sync).value()) : sync.status();
  }
  heartbeat->Finish(st);
  RETURN_IF_ERROR(st);
  return trainer::StopServersAtEnd(o, *client);
}

}  // namespace fleetps::heter
