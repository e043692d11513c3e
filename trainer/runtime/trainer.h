#pragma once
// Trainer: the cpu-trainer's training and evaluation loops over a PsClient.
//
// One Trainer per trainer process. Train() runs the Fleet lifecycle: trainer 0 pushes
// the initial dense parameters and everyone meets at a barrier; each epoch streams this
// trainer's files through worker threads (Hogwild over the shared client and ParamSync),
// printing loss / AUC / examples per second every print_interval steps; at the end of an
// epoch every pending push is flushed and the epoch's AUC is summed across trainers
// (a barrier all-reduce of the bucket counts). Evaluate() scores a data set with the
// current parameters, also summed across trainers.
//
// The model is one with sparse slots (ctr_dnn, wide_deep, deepfm, dcn, dlrm: embedding
// lookup + sum-pooling + DenseNet) or an mlp (DenseNet over the dense features).
//
// Heter mode (options.heter_mode(), with a HeterClient): the DenseNet runs on the
// heter-trainers. Each worker thread keeps up to heter.inflight micro-batches in flight:
// it reads, pulls and pools the next ones while earlier ones are computed remotely, and
// on each answer back-propagates into the embeddings and pushes the sparse gradients
// (async communicator, sparse table only). At the end of a pass the heter-trainers
// flush their dense gradients before the pass's barrier. Evaluation runs the forward
// pass here with the dense parameters pulled from the pservers.
// Collective mode (with a Communicator): every rank trains a replica of the dense part
// (CollectiveSync: initial parameters broadcast from rank 0, gradients averaged by
// allreduce each step); barriers and the AUC sums go through the communicator, and each
// rank logs its parameters' checksum at the end of every epoch.
// GPU-PS pass mode (a ParamSync given, options.gpubox_mode()): one worker thread per device;
// each epoch is a pass: the sync's BeginPass (begin_pass) before the workers start, its
// Flush (end_pass) after they finish.
// Each epoch is an EpochRun (epoch_run.h); how a worker steps through its batches (plain,
// prefetching, heter micro-batches in flight: step_loop.h) is chosen once, by Start.
// Thread-safety: one controlling thread calls the methods.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "common/stop_request.h"
#include "trainer/client/heter_client.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/communicator.h"
#include "trainer/data/dataset.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::metrics {
class Registry;
}  // namespace fleetps::metrics

namespace fleetps::trainer {

// One point of a training pass's curve, every print_interval steps: the interval's mean
// loss and AUC on this trainer, against the examples it has trained since the first epoch.
struct CurvePoint {
  uint32_t epoch = 0;
  uint64_t step = 0;      // steps of this trainer in the epoch
  uint64_t examples = 0;  // this trainer's, since the first epoch began
  double loss = 0;
  double auc = 0;
  double examples_per_sec = 0;  // the interval's
};

// One output's metrics over every trainer (a model with several outputs: MMoE, ESMM).
struct OutputReport {
  std::string name;   // the graph output's
  std::string label;  // the data label it predicts
  double auc = 0;
  double loss = 0;  // its mean log loss
  double actual_ctr = 0;
  double predicted_ctr = 0;
  double copc = 0;
};

struct PassReport {
  uint32_t epoch = 0;  // 1-based; 0 for evaluation
  std::string day;     // an online job's pass: its day and number (1-based)
  uint32_t pass = 0;
  uint64_t examples = 0;  // this trainer's
  double loss = 0;        // mean log loss, all trainers
  double auc = 0;         // bucketed AUC (4096 thresholds), all trainers
  double actual_ctr = 0;
  double predicted_ctr = 0;
  double copc = 0;  // calibration, all trainers (AucCalculator: Copc, Mae, Rmse,
  double mae = 0;   // BucketError, as Paddle's fleet_util reports them)
  double rmse = 0;
  double bucket_error = 0;
  double seconds = 0;            // wall time of the pass
  double examples_per_sec = 0;   // this trainer's
  double dense_compute_sec = 0;  // summed over worker threads: DenseNet forward/backward
                                 // (heter mode: waiting for the heter-trainers' answers)
  // Where else the worker threads' time went, seconds summed over them (training passes):
  double read_sec = 0;            // waiting for the next batch (the readers' queue, a memory copy)
  double pull_sec = 0;            // sparse pulls (GPU-PS: the pass table's lookups)
  double push_sec = 0;            // handing a step's gradients over (GPU-PS: the merge, the table's
                                  // updates and the dense replica's optimizer step)
  double end_step_sec = 0;        // the end-of-step synchronisation (sync, collective and GPU-PS
                                  // modes: waiting for the other workers and the dense allreduce)
  double pass_sync_sec = 0;       // wall time of begin_pass and the final flush (GPU-PS: building the
                                  // pass table and writing its rows back)
  double prefetch_wait_sec = 0;   // GPU-PS with fleetps.gpups.prefetch: the workers waiting for
                                  // their helpers' next batch (read_sec and pull_sec are then
                                  // the helpers' time, beside the workers')
  uint64_t skipped_lines = 0;     // bad lines skipped (skip_bad_lines)
  double cpu_seconds = 0;         // this process's CPU time (user + system, every thread) in the pass
  std::vector<CurvePoint> curve;  // training passes: the per-interval loss/AUC curve
  // Every output of the model, all trainers (the fields above from loss to bucket_error are
  // the first output's).
  std::vector<OutputReport> outputs;
};

class Trainer {
 public:
  // `client` (and `heter`, required in heter mode, and `comm`, required in collective mode,
  // else ignored) outlive the Trainer. `sync`: the ParamSync of GPU-PS pass mode (required
  // there, made by the heter-trainer with its device tables; else ignored). `dense`: the
  // backend of the dense layers' products (JobFlags::dense); null: fp32, the CPU's best kernels.
  Trainer(config::TrainerOptions options, PsClient& client, HeterClient* heter = nullptr,
          collective::Communicator* comm = nullptr, std::unique_ptr<ParamSync> sync = nullptr,
          std::shared_ptr<const dense::CpuGemm> dense = nullptr);
  ~Trainer();

  // Initial dense parameters (trainer 0) and the start barrier.
  Status Start();
  // One training pass over this trainer's share of the training files.
  StatusOr<PassReport> TrainEpoch(uint32_t epoch);
  // The next TrainEpoch reads `paths` (an online job's pass) instead of the data read so far,
  // which is released.
  void SetTrainPaths(std::vector<std::string> paths);
  // Scores `paths` (this trainer's share) with the current parameters; writes one
  // "label prediction" pair per model output, one line per example, to `predictions_path` when
  // not empty.
  StatusOr<PassReport> Evaluate(const std::vector<std::string>& paths, const std::string& predictions_path);
  // Meets every trainer at a named barrier. After a stop request the wait ends (Aborted).
  Status Barrier(const std::string& name);

  const config::TrainerOptions& options() const { return options_; }
  // Publishes the training's series in `registry` (it outlives the Trainer; null: none):
  // examples and steps trained, the last interval's loss, AUC and examples/s, the epoch,
  // and the latency of the sparse pulls and of the pushes (cpu-trainer --metrics-port).
  void SetMetrics(metrics::Registry* registry);
  // Once `stop` is requested (it outlives the Trainer; null: never), TrainEpoch takes no new
  // batch: the steps in flight finish, their updates are pushed (a GPU-PS pass is written
  // back), and the epoch ends early, its report counting what was trained (this trainer's
  // metrics alone). A load into memory, a test pass and a barrier wait (not collective
  // mode's) end at once with Aborted: none of them holds an update.
  void SetStopRequest(const StopRequest* stop) { stop_ = stop; }
  bool stop_requested() const { return StopRequest::Requested(stop_); }

 private:
  struct Impl;
  Status StartBarrier();  // Barrier("start"), said in the log when there are other trainers
  Status OpenSync();      // Start: the ParamSync of the mode

  config::TrainerOptions options_;
  PsClient& client_;
  HeterClient* heter_;                     // heter mode only
  collective::Communicator* comm_;         // collective mode only: barriers and metric sums go through it
  std::unique_ptr<ParamSync> given_sync_;  // gpubox mode: handed to impl_ by Start()
  const StopRequest* stop_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fleetps::trainer
