#pragma once
// EpochRun: one training epoch of a Trainer (TrainEpoch): its passes' worker threads, the
// epoch's metrics (AUC, the per-interval curve and log lines, the progress line), the first
// failure, and the workers' per-step state and times, summed into its PassReport. The
// stepping style (step_loop.h) is the Trainer's, chosen when it started.
// Thread-safety: Run from one thread; the workers it starts call the methods in the
// "for the step loops" part concurrently.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/progress.h"
#include "trainer/client/ps_client.h"
#include "trainer/model/output_metrics.h"
#include "trainer/runtime/progress.h"
#include "trainer/runtime/step_loop.h"
#include "trainer/runtime/trainer.h"
#include "trainer/runtime/worker_step.h"

namespace fleetps::trainer {

// The Trainer's training series (Trainer::SetMetrics; no-op handles without a registry).
struct TrainerSeries {
  metrics::Counter examples, steps;
  metrics::Gauge loss, auc, rate, epoch;
  std::vector<metrics::Gauge> output_auc;  // per model output (label output=<name>)
  metrics::Histogram pull, push;
  metrics::Gauge data_queue;   // QueueDataset's reader -> worker queue, batches
  PushQueueGauges push_queue;  // the async communicator's pending steps and keys
  // The last training pass's metrics, all trainers: auc, loss, actual_ctr, predicted_ctr,
  // copc, mae, rmse, bucket_error (kPassMetrics).
  std::array<metrics::Gauge, 8> pass;
  static constexpr std::array<const char*, 8> kPassMetrics = {"auc",  "loss", "actual_ctr", "predicted_ctr",
                                                              "copc", "mae",  "rmse",       "bucket_error"};
};

// What an epoch's run uses of its Trainer; everything outlives the run.
struct EpochContext {
  const config::TrainerOptions& options;
  PsClient& client;            // the cluster-wide "epoch so far" metric
  bool cluster_metric = true;  // report it (false: one trainer, or local collective ranks)
  ParamSync& sync;
  StepRunner& steps;
  StepLoop& loop;
  TrainerSeries& series;
  ProgressLine& progress;
  const StopRequest* stop = nullptr;
  uint64_t examples_before = 0;      // this trainer's, in the epochs before this one
  std::optional<uint64_t> expected;  // the previous epoch's examples (the progress line's ETA)
};

class EpochRun {
 public:
  EpochRun(EpochContext context, uint32_t epoch, data::Dataset& dataset);

  // `passes` passes over the dataset (GPU-PS passes_per_epoch; set_part(pass) selects each
  // one's records first, when given), each begun by `lifecycle` when the mode has one and
  // ended by the sync's Flush; the last pass's Flush too. Stops early, its passes flushed,
  // after a stop request.
  Status Run(uint32_t passes, const std::function<void(uint32_t pass)>& set_part, PassLifecycle* lifecycle);
  // This trainer's report of the run (the metrics over every trainer are the caller's).
  PassReport Report() const;
  const model::OutputMetrics& metrics() const { return epoch_metrics_; }
  uint64_t examples() const { return examples_; }

  // ---- For the step loops -----------------------------------------------------------
  data::Dataset& dataset() { return dataset_; }
  StepRunner& steps() { return context_.steps; }
  ParamSync& sync() { return context_.sync; }
  WorkerState& state(uint32_t worker) { return states_[worker]; }
  bool stop_requested() const { return StopRequest::Requested(context_.stop); }
  bool failed() const { return failed_; }
  // The next batch of the pass into *batch, its read timed in `times`; false at the end of the
  // data.
  StatusOr<bool> NextBatch(data::Batch* batch, StepTimes& times);
  // Metrics of one finished step.
  void Record(const StepResult& step, const data::Batch& batch);
  // The end of a step, timed (sync, collective, GPU-PS modes: waiting for the others);
  // true when the pass is over for every worker.
  StatusOr<bool> EndStep(uint32_t worker, bool out_of_data);
  // A worker failed: the run ends with the first error, and the sync stops whatever the
  // other workers wait for from this one.
  void Fail(const Status& st);

 private:
  EpochContext context_;
  const uint32_t epoch_;
  data::Dataset& dataset_;
  const std::chrono::steady_clock::time_point start_;
  const double cpu_start_;
  std::vector<WorkerState> states_;
  std::atomic<uint64_t> steps_{0}, examples_{0};
  std::atomic<bool> failed_{false};
  double pass_sync_seconds_ = 0;  // begin_pass and the flushes

  std::mutex mu_;  // guards the metrics below and first_error_
  Status first_error_;
  model::OutputMetrics epoch_metrics_, interval_metrics_;  // per output of the model
  double interval_loss_ = 0;
  uint64_t interval_batches_ = 0, interval_examples_ = 0;
  std::chrono::steady_clock::time_point interval_start_;
  std::vector<CurvePoint> curve_;
  TrainingProgress shown_;  // the last interval's loss and AUC, for the progress line
};

}  // namespace fleetps::trainer
