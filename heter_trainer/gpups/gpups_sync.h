#pragma once
// GpuPsSync: the ParamSync of GPU-PS pass mode (runner.sync_mode: gpubox), as Paddle's
// PSGPU: per pass (epoch) the sparse rows of the pass live in a PassTable sharded over the
// process's devices, and the dense part is replicated on every worker (workers_per_device
// per device) and kept equal by allreduce.
//
//   BeginPass (begin_pass)  the pass's unique keys read from the dataset (or the last pass's,
//                           when the dataset says it reads the same records); their full rows
//                           (weights, optimizer state, show/click) pulled from the pservers
//                           (PullRows); the device table built (refused when it does not fit)
//   PullSparse / Push       on the device table: lookups routed to the owning device; a
//                           batch's push is one step of the sparse optimizer per key in the
//                           table (the pservers' RowAccessor code), applied before the
//                           worker's next lookup, as local training steps; dense gradients to
//                           the node's replica. With fleetps.max_merge_steps N > 1 (asked for
//                           explicitly) a worker's sparse gradients of N steps are summed per
//                           key first and applied as one step: frequent keys get fewer updates
//                           (see max_merge_steps in trainer_config.h)
//   dense_stepper           the worker's dense forward/backward on its device (a CUDA lane
//                           of heter_trainer/device with the CUDA table, else the CPU lane)
//   EndStep                 the dense allreduce step of the process's replica (DenseReplica:
//                           the workers of a node summed in memory, the nodes over Gloo or
//                           NCCL; rank = trainer_id * workers + worker; each worker then
//                           steps its slice of the one replica)
//   Flush (end_pass)        the rows the pass touched written back (WritePassBack: ranges of
//                           rows, each exported while the one before is being written; a
//                           row is written exact, or added as a difference where another
//                           trainer wrote it meanwhile),
//                           the table freed; rank 0 writes the dense replica to the pservers
//
// Worker w drives device w % devices: the Trainer runs fleetps.gpups.workers_per_device worker
// threads per device, each with its own lane on the device and merge buffer; the process's
// workers share one dense replica.
// Thread-safety: PullSparse, DenseParams, Push and EndStep from the workers (each its own
// `worker`; PullSparse also from a worker's prefetch helper, fleetps.gpups.prefetch);
// BeginPass and Flush from the driver thread between passes.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/metrics/registry.h"
#include "common/status.h"
#include "heter_trainer/device/dense_device.h"
#include "heter_trainer/gpups/dense_replica.h"
#include "heter_trainer/gpups/pass_table.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/communicator.h"
#include "trainer/runtime/param_sync.h"
#include "trainer/client/sparse_merge.h"

namespace fleetps::heter {

namespace collective = ::fleetps::trainer::collective;

// What the last pass did (for logs and benchmarks).
struct PassStats {
  uint64_t keys = 0;           // unique keys in the pass
  bool keys_reused = false;    // the last pass's keys (the same records: Dataset::PassRecordsId)
  double collect_seconds = 0;  // reading the keys from the dataset (0 when reused)
  double pull_seconds = 0;     // PullRows from the pservers
  double build_seconds = 0;    // building the device table
  uint64_t written = 0;        // rows written back exactly
  uint64_t merged = 0;         // rows another trainer had changed: difference added
  double write_seconds = 0;    // Export + WriteRows
};

// Whether the `workers` workers of a process run with prefetch helpers: fleetps.gpups.prefetch,
// or when auto, whether the machine has two hardware threads per worker (the helpers of more
// workers would compete with the workers for the cores).
bool PrefetchOn(const config::GpuPsOptions& options, uint32_t workers);

class GpuPsSync : public trainer::ParamSync,
                  public trainer::PassLifecycle,
                  public trainer::DeviceStepping,
                  public trainer::Prefetching {
 public:
  // `client` outlives the result. `comms[w]`: worker w's communicator (rank trainer_id *
  // workers + w among trainers * workers, workers = table devices x workers_per_device), set
  // up by the caller. Broadcasts the initial dense parameters (rank 0's draw) to every worker.
  // `gemm`: the host twin's dense backend (fleetps.dense); null: fp32, the CPU's best kernels.
  // CUDA devices compute fp32: fleetps.dense.precision bf16 there is InvalidArgument.
  static StatusOr<std::unique_ptr<GpuPsSync>> Create(const config::TrainerOptions& options, trainer::PsClient& client,
                                                     std::unique_ptr<PassTable> table,
                                                     std::vector<std::unique_ptr<collective::Communicator>> comms,
                                                     std::shared_ptr<const dense::CpuGemm> gemm = nullptr);
  ~GpuPsSync() override;

  const PassTable& table() const { return *table_; }
  const PassStats& last_pass() const { return last_; }
  // Records the passes in `registry` (which outlives this), for the trainer's /metrics:
  // fleetps_gpups_passes_total, fleetps_gpups_pass_keys and fleetps_gpups_pass_seconds{step}
  // (the latest pass's), fleetps_gpups_rows_written_total{merge="exact"|"added"}.
  void SetMetrics(metrics::Registry& registry);

  // ParamSync
  Status PullSparse(uint32_t worker, std::span<const uint64_t> keys, float* rows) override;
  Status DenseParams(uint32_t worker, std::vector<float>* params) override;
  Status Push(uint32_t worker, const trainer::StepGrads& grads) override;
  StatusOr<bool> EndStep(uint32_t worker, bool out_of_data) override;
  Status Flush() override;
  // Ends the other workers' waits in the dense allreduce with `why` (their local group).
  void Abort(const Status& why) override;
  trainer::PassLifecycle* pass_lifecycle() override { return this; }
  trainer::DeviceStepping* device_stepping() override { return this; }
  // With fleetps.gpups.prefetch (PrefetchOn).
  trainer::Prefetching* prefetching() override;

  // PassLifecycle
  Status BeginPass(data::Dataset& dataset, const StopRequest* stop) override;
  // DeviceStepping
  trainer::DenseStepper& stepper(uint32_t worker) override { return *steppers_.at(worker); }
  StatusOr<std::span<const float>> DenseParamsView(uint32_t worker) override;
  std::span<float> DenseGradsBuffer(uint32_t worker) override;
  // Prefetching: true when the worker's next Push changes the table: always with
  // max_merge_steps 1, else when it applies the worker's merge buffer (its
  // max_merge_steps-th step).
  bool NextPushUpdatesRows(uint32_t worker) const override;

  // begin_pass with the keys given (distinct): pulls their rows and builds the table (not
  // once `stop` is requested: Aborted, no pass begun).
  Status BeginPassWithKeys(std::span<const uint64_t> keys, const StopRequest* stop = nullptr);
  // end_pass: writes the touched rows back and frees the table.
  Status EndPass();

 private:
  GpuPsSync(const config::TrainerOptions& options, trainer::PsClient& client, std::unique_ptr<PassTable> table,
            std::vector<std::unique_ptr<collective::Communicator>> comms, std::shared_ptr<const dense::CpuGemm> gemm);

  const config::TrainerOptions& o_;
  trainer::PsClient& client_;
  std::unique_ptr<PassTable> table_;
  const trainer::model::DenseNet net_;                            // outlives devices_
  std::vector<std::unique_ptr<DenseDevice>> devices_;             // one per table device
  std::vector<std::unique_ptr<trainer::DenseStepper>> steppers_;  // per worker: a lane of its device
  std::vector<std::unique_ptr<collective::Communicator>> comms_;  // declared before dense_: outlives it
  std::unique_ptr<DenseReplica> dense_;                           // the process's workers'
  Status ApplyMerged(trainer::SparseMerge& m);
  Status CheckWorker(uint32_t worker) const;  // InvalidArgument naming the workers it has
  uint32_t MergeWindow() const;               // steps a worker's gradients are merged over

  PassStats last_;
  uint32_t passes_ = 0;
  // The keys BeginPass last read, and the records it read them from: a pass over the same
  // records (the next epoch's, one pass per epoch, an InMemoryDataset) takes them again.
  std::vector<uint64_t> pass_keys_;
  std::optional<uint64_t> pass_keys_records_;
  struct Series {  // no-op handles until SetMetrics
    metrics::Counter passes, rows_exact, rows_added;
    metrics::Gauge keys, collect, pull, build, write;
  } series_;
  // Per worker, each touched only by its worker; with max_merge_steps > 1: its sparse
  // gradients (and show/click) of up to max_merge_steps steps, summed per key in arrival
  // order; applied to the table when full and at end_pass. Unused with 1 (each push goes to
  // the table).
  std::vector<trainer::SparseMerge> merge_;
};

// end_pass's write-back of `table`'s pass to sparse table `table_id` on the pservers: the
// touched rows exported `range_rows` rows at a time (ExportRange), each range handed to
// WriteRows before the next is exported, so that the export overlaps the network and the
// pservers' work. At most kWriteBackInFlight ranges are written at once (the next export
// waits for the oldest): however large the pass and however slow the pservers, the host
// holds a few ranges' requests, and no write waits in a queue long enough to time out.
// Waits for every write; returns the first error; `written` receives the summed counts.
inline constexpr size_t kWriteBackInFlight = 8;
Status WritePassBack(const PassTable& table, trainer::PsClient& client, uint32_t table_id, bool average,
                     uint64_t range_rows, trainer::PsClient::RowsWritten* written);

// The distinct keys of the batches of one pass of `dataset` (StartPass .. EndPass), read by
// `threads` threads at once into a set partitioned by the keys' hash, a lock per partition.
// Each key once, in no particular order. Once `stop` is requested the threads take no new
// batch and it returns Aborted.
StatusOr<std::vector<uint64_t>> CollectPassKeys(data::Dataset& dataset, uint32_t threads,
                                                const StopRequest* stop = nullptr);

// Communicators for the `workers` workers of this trainer (devices x workers_per_device):
// rank trainer_id * workers + w of trainers * workers. A local group
// (trainer/collective/local_group.h): the workers sum their host replicas in memory, and the
// trainers all-reduce that sum over one rank each at options.trainer_endpoints (none for one
// trainer): Gloo, or NCCL on the node's first GPU when `gpus` (the CUDA pass table) and
// fleetps.collective.backend is nccl. Never several NCCL ranks in one process: there, a
// worker's cudaFree on a GPU would wait for a rank's NCCL kernel that waits for the rank of
// that same worker. `auth_key` and `tls`: the cluster's, for the trainers' rendezvous.
StatusOr<std::vector<std::unique_ptr<collective::Communicator>>> MakeDeviceCommunicators(
    const config::TrainerOptions& options, uint32_t workers, bool gpus, std::shared_ptr<const net::AuthKey> auth_key,
    std::shared_ptr<net::TlsContext> tls = nullptr);

}  // namespace fleetps::heter
