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
//     own the dense part); a heter-trainer's side (MakeHeterDenseSync) is Async for the
//     dense table only.
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
  std::span<const uint64_t> keys;        // unique
  std::span<const float> key_grads;      // keys.size() * dim
  std::span<const float> shows;
  std::span<const float> clicks;
  std::span<const float> dense_grads;    // the dense table's size
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

class ParamSync {
 public:
  virtual ~ParamSync() = default;

  // Publishes the pending pushes in `gauges` (modes with a background communicator: async,
  // heter; the others push synchronously and leave them untouched). Before the workers start.
  virtual void SetPushQueueGauges(PushQueueGauges gauges) {}

  // Rows of `keys` (unique) into rows[keys.size() * dim].
  virtual Status PullSparse(uint32_t worker, std::span<const uint64_t> keys, float* rows) = 0;
  // The dense parameters to use for the next step.
  virtual Status DenseParams(uint32_t worker, std::vector<float>* params) = 0;
  // The same, read in place where the mode allows it (GPU-PS: the node's replica, which no
  // step changes before every worker's EndStep), else DenseParams into *scratch. Valid until
  // the worker's next EndStep (or Push, in modes without EndStep).
  virtual StatusOr<std::span<const float>> DenseParamsView(uint32_t worker, std::vector<float>* scratch) {
    RETURN_IF_ERROR(DenseParams(worker, scratch));
    return std::span<const float>(*scratch);
  }
  // The same, shared: the snapshot stays valid while held, and the same pointer comes back
  // until the parameters are refreshed (so a device copy can be kept until it changes).
  virtual StatusOr<std::shared_ptr<const std::vector<float>>> DenseSnapshot(uint32_t worker);
  // Where `worker`'s dense step may write its dense gradient for Push to take it without a
  // copy (GPU-PS: the worker's buffer in the node's replica), valid until that Push; empty:
  // the Trainer's own buffer.
  virtual std::span<float> DenseGradsBuffer(uint32_t worker) { return {}; }
  virtual Status Push(uint32_t worker, const StepGrads& grads) = 0;
  // Sync and collective mode: called by every worker once per step, also by workers
  // without data (`out_of_data`); returns true when the pass is over for every worker of
  // every trainer. Other modes return out_of_data.
  virtual StatusOr<bool> EndStep(uint32_t worker, bool out_of_data) { return out_of_data; }
  // Sends everything pushed before the call and waits for it (end of a pass), then
  // refreshes the dense snapshot. Pushes of other threads during the call may go along.
  // GPU-PS pass mode: end_pass (the pass's rows written back to the pservers).
  virtual Status Flush() = 0;
  // Start of a pass over `dataset`, before its StartPass and the workers (driver thread).
  // GPU-PS pass mode: begin_pass (reads the pass's keys from the dataset, pulls their rows
  // and builds the device table); once `stop` (null: never) is requested it ends between
  // those steps, Aborted, with no pass begun. Other modes: nothing.
  virtual Status BeginPass(data::Dataset& dataset, const StopRequest* stop) { return Status::OK(); }
  // Where `worker` runs its dense steps; null: the Trainer's own DenseNet on the worker thread.
  virtual DenseStepper* dense_stepper(uint32_t worker) { return nullptr; }
  // True when a worker's next batch may be read, de-duplicated, pulled and pooled on a helper
  // thread while the worker's current step runs (GPU-PS: fleetps.gpups.prefetch).
  virtual bool prefetch() const { return false; }
  // With prefetch: whether `worker`'s next Push changes what its next PullSparse reads. When
  // false (the push only adds to the worker's merge buffer), the next step's pull may run
  // before that Push; when true, it waits for the Push. Called by the worker's thread.
  virtual bool NextPushUpdatesRows(uint32_t worker) const { return true; }
  // A worker failed with `why` and stops: whatever the other workers of this process wait
  // for from it (GPU-PS: its share of the dense allreduce) ends with that error at once
  // instead of at the collective timeout. Any thread; later calls keep the first reason.
  virtual void Abort(const Status& why) {}
};

// Whether async mode's workers prepare their next batch on helper threads (fleetps.prefetch:
// as given, or auto: when the machine has two hardware threads per worker thread).
bool AsyncPrefetchOn(const config::TrainerOptions& options);

// Creates the ParamSync for options.sync_mode (Direct for local training; heter mode:
// the sparse table only). `client` outlives the result.
StatusOr<std::unique_ptr<ParamSync>> MakeParamSync(const config::TrainerOptions& options, PsClient& client,
                                                  uint32_t worker_threads);
// A heter-trainer's ParamSync: the dense table only, through the async communicator
// (fleetps.heter.dense_sync: pserver; allreduce_dense_sync.h for allreduce).
std::unique_ptr<ParamSync> MakeHeterDenseSync(const config::TrainerOptions& options, PsClient& client);
// The sparse table only, through the async communicator (heter-mode cpu-trainers, the
// collective hybrid).
std::unique_ptr<ParamSync> MakeSparseAsyncSync(const config::TrainerOptions& options, PsClient& client);

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
