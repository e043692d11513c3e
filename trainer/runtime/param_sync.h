#pragma once
// ParamSync: how a trainer's worker threads read and update parameters in one training
// mode. One instance per trainer, shared by its workers; `worker` identifies the
// calling thread (0 .. threads-1).
//
//   Direct (local mode, sync mode): pull sparse rows and the dense vector every step,
//     push gradients and wait for the acknowledgement. In sync mode the dense gradient
//     is accumulated on the servers until every worker of every trainer pushed, then
//     their average is applied once; EndStep() is the per-step barrier.
//   Async: pulls sparse rows directly; dense parameters come from a snapshot that a
//     background communicator refreshes; pushes go to the communicator, which sends them in
//     the background, in order, each step as its own push (fleetps.max_merge_steps 1, the
//     default), or up to max_merge_steps steps merged into one (summed per key, dense
//     averaged) when asked for.
//   Heter: a cpu-trainer's side is Async for the sparse table only (the heter-trainers
//     own the dense part); a heter-trainer's side is Async for the dense table only
//     (AsyncParts).
//   Geo: workers train local copies (sparse rows cached on first use, the dense vector)
//     with the local optimizer rule; every geo_step steps the trainer pushes the deltas
//     since the last exchange (scaled by 1/trainers) and refreshes its copies. The other
//     workers keep training during an exchange; their progress is kept on top of the
//     refreshed values and sent with the next one.
//
// Thread-safety: every method may be called concurrently by the workers.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/metrics/registry.h"
#include "common/status.h"
#include "common/stop_request.h"
#include "trainer/client/ps_client.h"
#include "trainer/data/dataset.h"

namespace fleetps::trainer {

// One step's gradients. shows/clicks are empty, or (CTR tables) one per key: how often the
// key occurs in the batch, and in its clicked examples.
struct StepGrads {
  std::span<const uint64_t> keys;    // unique
  std::span<const float> key_grads;  // keys.size() * dim
  std::span<const float> shows;
  std::span<const float> clicks;
  std::span<const float> dense_grads;  // the dense table's size
};

// Runs the dense part of a training step on a device of its own (GPU-PS mode: the worker's
// GPU, or the CPU twin's BLAS): forward, loss and backward of the mean loss over `batch` rows
// of `activations` with `params`, writing predictions [batch], activation_grads and
// param_grads; returns the mean loss. One stepper per worker, used by that worker only.
class DenseStepper {
 public:
  virtual ~DenseStepper() = default;
  virtual StatusOr<float> Step(std::span<const float> params, std::span<const float> activations,
                               std::span<const float> labels, size_t batch, std::span<float> predictions,
                               std::span<float> activation_grads, std::span<float> param_grads) = 0;
};

// The async communicator's queue, as gauges (cpu-trainer --metrics-port): the steps handed
// to it whose send has not completed, and the keys of those steps' merge windows (the one
// merging and the one being sent, summed; a key counts once per window).
struct PushQueueGauges {
  metrics::Gauge steps;
  metrics::Gauge keys;
};

// A ParamSync's core: what every mode offers, the loops of trainer/runtime call nothing
// else in every mode. What only some modes offer is a capability below, asked for once
// when a run is built (null: the mode has none).
class PassLifecycle;
class DeviceStepping;
class Prefetching;

class ParamSync {
 public:
  virtual ~ParamSync() = default;

  // Rows of `keys` (unique) into rows[keys.size() * dim].
  virtual Status PullSparse(uint32_t worker, std::span<const uint64_t> keys, float* rows) = 0;
  // The dense parameters to use for the next step.
  virtual Status DenseParams(uint32_t worker, std::vector<float>* params) = 0;
  // The same, shared: the snapshot stays valid while held, and the same pointer comes back
  // until the parameters are refreshed (so a device copy can be kept until it changes).
  virtual StatusOr<std::shared_ptr<const std::vector<float>>> DenseSnapshot(uint32_t worker);
  virtual Status Push(uint32_t worker, const StepGrads& grads) = 0;
  // Sync and collective mode: called by every worker once per step, also by workers
  // without data (`out_of_data`); returns true when the pass is over for every worker of
  // every trainer. Other modes return out_of_data.
  virtual StatusOr<bool> EndStep(uint32_t worker, bool out_of_data) { return out_of_data; }
  // Sends everything pushed before the call and waits for it (end of a pass), then
  // refreshes the dense snapshot. Pushes of other threads during the call may go along.
  // GPU-PS pass mode: end_pass (the pass's rows written back to the pservers).
  virtual Status Flush() = 0;
  // A worker failed with `why` and stops: whatever the other workers of this process wait
  // for from it (GPU-PS: its share of the dense allreduce) ends with that error at once
  // instead of at the collective timeout. Any thread; later calls keep the first reason.
  virtual void Abort(const Status& why) {}

  // Capabilities, each valid as long as the ParamSync.
  virtual PassLifecycle* pass_lifecycle() { return nullptr; }
  virtual DeviceStepping* device_stepping() { return nullptr; }
  virtual Prefetching* prefetching() { return nullptr; }
};

// Passes with a beginning (GPU-PS pass mode: begin_pass); a pass ends with ParamSync::Flush.
class PassLifecycle {
 public:
  virtual ~PassLifecycle() = default;
  // Start of a pass over `dataset`, before its StartPass and the workers (driver thread):
  // reads the pass's keys from the dataset, pulls their rows and builds the device table;
  // once `stop` (null: never) is requested it ends between those steps, Aborted, with no
  // pass begun.
  virtual Status BeginPass(data::Dataset& dataset, const StopRequest* stop) = 0;
};

// The dense step on a device of the mode's own (GPU-PS: the worker's GPU, or the CPU twin's
// lane), with the parameters and gradient buffers the mode keeps.
class DeviceStepping {
 public:
  virtual ~DeviceStepping() = default;
  // Where `worker` runs its dense steps.
  virtual DenseStepper& stepper(uint32_t worker) = 0;
  // The dense parameters read in place (GPU-PS: the node's replica, which no step changes
  // before every worker's EndStep), valid until the worker's next EndStep.
  virtual StatusOr<std::span<const float>> DenseParamsView(uint32_t worker) = 0;
  // Where `worker`'s dense step writes its dense gradient for Push to take without a copy,
  // valid until that Push.
  virtual std::span<float> DenseGradsBuffer(uint32_t worker) = 0;
};

// A worker's next batch may be read, de-duplicated, pulled and pooled on a helper thread
// while its current step runs (async: fleetps.prefetch; GPU-PS: fleetps.gpups.prefetch).
class Prefetching {
 public:
  virtual ~Prefetching() = default;
  // Whether `worker`'s next Push changes what its next PullSparse reads. When false (the
  // push only adds to a merge buffer or a queue), the next step's pull may run before that
  // Push; when true, it waits for the Push. Called by the worker's thread.
  virtual bool NextPushUpdatesRows(uint32_t worker) const = 0;
};

// Whether async mode's workers prepare their next batch on helper threads (fleetps.prefetch:
// as given, or auto: when the machine has two hardware threads per worker thread).
bool AsyncPrefetchOn(const config::TrainerOptions& options);

// Creates the ParamSync for options.sync_mode (Direct for local training; heter mode:
// the sparse table only). `client` outlives the result. `queue`: where modes with a
// background communicator (async, heter) publish their pending pushes.
StatusOr<std::unique_ptr<ParamSync>> MakeParamSync(const config::TrainerOptions& options, PsClient& client,
                                                   uint32_t worker_threads, PushQueueGauges queue = {});

// One implementation per file: direct_sync.cc (local and sync mode), async_sync.cc (the
// async communicator, for both tables or one side of heter mode), geo_sync.cc;
// collective_sync.h and heter_trainer/gpups/gpups_sync.h take more than a client.
std::unique_ptr<ParamSync> MakeDirectSync(const config::TrainerOptions& options, PsClient& client,
                                          uint32_t worker_threads);
// Which tables an async communicator sends: both (async mode), the sparse table only
// (heter-mode cpu-trainers, the collective hybrid) or the dense table only (a
// heter-trainer's, fleetps.heter.dense_sync: pserver; allreduce_dense_sync.h for allreduce).
enum class AsyncParts : uint8_t { kBoth, kSparseOnly, kDenseOnly };
std::unique_ptr<ParamSync> MakeAsyncSync(const config::TrainerOptions& options, PsClient& client, AsyncParts parts,
                                         PushQueueGauges queue = {});
StatusOr<std::unique_ptr<ParamSync>> MakeGeoSync(const config::TrainerOptions& options, PsClient& client);

// A job's initial dense parameters, by the one trainer (or rank) that sets them: `*params`
// (freshly drawn) goes to the pservers only where they hold none yet (PsClient::
// InitDenseParam). When they kept parameters (a model loaded from a checkpoint, or set by an
// earlier run of that trainer) it logs so, as `who`, warns when only some servers kept
// theirs, and with `adopt` pulls the whole table into *params, so that replicas start from
// it, and with `state` (sized for the caller's dense rule) its optimizer state too, so that
// a replica that steps the dense rule itself resumes it. Returns the floats kept.
StatusOr<uint64_t> InitDenseParams(PsClient& client, uint32_t table_id, std::string_view who, bool adopt,
                                   std::vector<float>* params, PsClient::DenseState* state = nullptr);

// The dense rule's fresh optimizer state for `params` floats, or InvalidArgument naming the
// bad option.
StatusOr<PsClient::DenseState> FreshDenseState(const OptimizerOptions& rule, size_t params);
// [params | state.element | state.shared] in one vector, for one broadcast; Unpack splits
// such a vector back by the sizes *params and *state already have.
std::vector<float> PackDenseState(std::span<const float> params, const PsClient::DenseState& state);
void UnpackDenseState(std::span<const float> packed, std::vector<float>* params, PsClient::DenseState* state);

// FNV-1a 64 of the parameters' bytes, in hex: replicas that agree bitwise have equal ones.
std::string DenseChecksum(std::span<const float> params);

}  // namespace fleetps::trainer
