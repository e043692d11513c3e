#include "trainer/runtime/trainer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/metrics/process_metrics.h"
#include "common/metrics/registry.h"
#include "trainer/data/file_list.h"
#include "trainer/data/in_memory_dataset.h"
#include "trainer/data/queue_dataset.h"
#include "trainer/model/auc_calculator.h"
#include "trainer/model/dense_net.h"
#include "trainer/model/embedding_pool.h"
#include "trainer/model/layers.h"
#include "trainer/runtime/collective_sync.h"
#include "trainer/runtime/global_shuffle.h"
#include "trainer/runtime/progress.h"

namespace fleetps::trainer {

using Clock = std::chrono::steady_clock;
using fleetps::ModelType;

namespace {

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Per-thread buffers, reused from batch to batch.
struct WorkerState {
  model::DenseNet::Workspace ws;
  std::vector<model::SlotIdsView> views;
  std::vector<uint64_t> keys;
  std::vector<uint32_t> index;
  KeyIndex dedup;  // DedupKeys' table, reused batch after batch
  std::vector<float> rows;
  std::vector<float> activations;
  std::vector<float> activation_grads;
  std::vector<float> key_grads;
  std::vector<float> shows;   // CTR tables: per unique key
  std::vector<float> clicks;
  std::vector<float> params;
  std::vector<float> param_grads;
  std::vector<float> predictions;  // heter mode: the answer's; GPU-PS: the device's (stepped)
  bool stepped = false;            // the last step's predictions are in `predictions`, not ws
  double dense_seconds = 0;
  double read_seconds = 0, pull_seconds = 0, push_seconds = 0, end_step_seconds = 0;  // PassReport's
  double prefetch_wait_seconds = 0;
};

// GPU-PS with prefetch: one step of a worker, prepared by its helper thread.
struct Prefetched {
  data::Batch batch;
  WorkerState state;
  Status status;     // of the read or the preparation
  bool got = false;  // a batch was read
};

// Heter mode: one micro-batch from its read to its sparse push. The request's spans point
// into batch and state, so a slot is reused only after its answer arrived.
struct InFlight {
  data::Batch batch;
  WorkerState state;
  std::future<StatusOr<HeterStep>> reply;
};

// The pass's quality metrics from the AUC state of every trainer.
void FillPassMetrics(const model::AucCalculator& global, PassReport* report) {
  report->auc = global.Auc();
  report->loss = global.MeanLoss();
  report->actual_ctr = global.ActualCtr();
  report->predicted_ctr = global.PredictedCtr();
  report->copc = global.Copc();
  report->mae = global.Mae();
  report->rmse = global.Rmse();
  report->bucket_error = global.BucketError();
}

}  // namespace

struct Trainer::Impl {
  Impl(const config::TrainerOptions& o, PsClient& c, HeterClient* h, collective::Communicator* m,
       std::shared_ptr<const dense::CpuGemm> gemm)
      : options(o),
        client(c),
        heter(h),
        comm(m),
        net(model::DenseNet::FromOptions(o.model, std::move(gemm))),
        pool(HasSparseSlots(o.model) ? std::make_unique<model::EmbeddingPool>(
                                                      model::EmbeddingPool::FromOptions(o.model))
                                                : nullptr) {}

  const config::TrainerOptions& options;
  PsClient& client;
  HeterClient* const heter;  // heter mode only
  collective::Communicator* const comm;  // collective mode only
  CollectiveSync* collective = nullptr;  // collective mode: `sync`, typed
  std::atomic<uint64_t> next_batch_id{0};
  const model::DenseNet net;
  const std::unique_ptr<model::EmbeddingPool> pool;  // null for mlp (no sparse slots)
  std::unique_ptr<ParamSync> sync;
  std::unique_ptr<data::Dataset> train_data;  // kept across epochs (InMemoryDataset loads once)
  uint64_t examples_before_epoch = 0;  // this trainer's, in the epochs before the current one
  std::optional<uint64_t> last_epoch_examples;  // the previous epoch's: the progress line's ETA
  ProgressLine progress;  // a status line instead of interval log lines, on a terminal
  // SetMetrics' series (no-op handles without a registry).
  struct Series {
    metrics::Counter examples, steps;
    metrics::Gauge loss, auc, rate, epoch;
    metrics::Histogram pull, push;
    metrics::Gauge data_queue;     // QueueDataset's reader -> worker queue, batches
    PushQueueGauges push_queue;    // the async communicator's pending steps and keys
    // The last training pass's metrics, all trainers: auc, loss, actual_ctr, predicted_ctr,
    // copc, mae, rmse, bucket_error (kPassMetrics).
    std::array<metrics::Gauge, 8> pass;
  } series;
  static constexpr std::array<const char*, 8> kPassMetrics = {"auc",  "loss", "actual_ctr", "predicted_ctr",
                                                              "copc", "mae",  "rmse",       "bucket_error"};

  void PublishPass(const PassReport& r) {
    const double values[] = {r.auc, r.loss, r.actual_ctr, r.predicted_ctr, r.copc, r.mae, r.rmse, r.bucket_error};
    for (size_t i = 0; i < series.pass.size(); ++i) series.pass[i].Set(values[i]);
  }

  // Activations of a batch: pooled embeddings + dense features (the sparse models), or the
  // dense features (mlp). Pulls the sparse rows through `pull`.
  template <typename Pull>
  Status BuildActivations(const data::Batch& batch, WorkerState& w, Pull pull) {
    const size_t b = batch.size();
    if (pool == nullptr) {
      if (batch.dense_dim != net.in_dim()) {
        return Status::InvalidArgument("the mlp model expects " + std::to_string(net.in_dim()) +
                                       " dense features per example, the data has " +
                                       std::to_string(batch.dense_dim));
      }
      w.activations.assign(batch.dense.begin(), batch.dense.end());
      return Status::OK();
    }
    w.views.clear();
    for (const auto& slot : batch.slots) w.views.push_back({slot.offsets, slot.ids});
    model::DedupKeys(w.views, &w.keys, &w.index, &w.dedup);
    w.rows.resize(w.keys.size() * pool->dim());
    RETURN_IF_ERROR(pull(w.keys, w.rows.data()));
    w.activations.resize(b * pool->output_dim());
    pool->Forward(w.views, w.index, w.rows, batch.dense, w.activations);
    return Status::OK();
  }

  // CTR statistics of the batch's unique keys: occurrences, and occurrences in clicked
  // examples (the show/click counts Paddle's CtrCommonAccessor keeps).
  static void CountShowsClicks(const data::Batch& batch, WorkerState& w) {
    w.shows.assign(w.keys.size(), 0.0f);
    w.clicks.assign(w.keys.size(), 0.0f);
    size_t pos = 0;  // position in the concatenated ids of all slots (DedupKeys' index)
    for (const auto& slot : batch.slots) {
      for (size_t row = 0; row + 1 < slot.offsets.size(); ++row) {
        for (uint32_t k = slot.offsets[row]; k < slot.offsets[row + 1]; ++k, ++pos) {
          w.shows[w.index[pos]] += 1.0f;
          w.clicks[w.index[pos]] += batch.labels[row];
        }
      }
    }
  }

  // The sparse pull of a step, timed (the pull histogram and the worker's pull seconds).
  Status TimedPull(uint32_t worker, WorkerState& w, std::span<const uint64_t> keys, float* rows) {
    const auto t0 = Clock::now();
    Status st = sync->PullSparse(worker, keys, rows);
    const double seconds = Seconds(t0);
    series.pull.Observe(seconds);
    w.pull_seconds += seconds;
    return st;
  }

  // The first part of a training step: the batch's activations, its sparse rows pulled.
  Status Prepare(uint32_t worker, const data::Batch& batch, WorkerState& w) {
    return BuildActivations(batch, w, [&](std::span<const uint64_t> keys, float* rows) {
      return TimedPull(worker, w, keys, rows);
    });
  }

  // One training step.
  StatusOr<float> Step(uint32_t worker, const data::Batch& batch, WorkerState& w) {
    RETURN_IF_ERROR(Prepare(worker, batch, w));
    return Finish(worker, batch, w);
  }

  // The rest of a prepared step: the dense part, the embedding backward and the pushes.
  StatusOr<float> Finish(uint32_t worker, const data::Batch& batch, WorkerState& w) {
    ASSIGN_OR_RETURN(const std::span<const float> params, sync->DenseParamsView(worker, &w.params));
    const size_t b = batch.size();
    std::span<float> param_grads = sync->DenseGradsBuffer(worker);
    if (param_grads.size() != net.num_params()) {
      w.param_grads.resize(net.num_params());
      param_grads = w.param_grads;
    }
    w.activation_grads.resize(pool ? w.activations.size() : 0);
    const auto t0 = Clock::now();
    // Collective mode: each layer's gradients go to the allreduce as soon as they are final.
    model::DenseNet::GradsReady ready;
    if (collective != nullptr && options.collective.overlap) {
      ready = [&](size_t begin, size_t end) { collective->GradsReady(param_grads, begin, end); };
    }
    float loss = 0;
    if (DenseStepper* stepper = sync->dense_stepper(worker)) {  // GPU-PS: the worker's device
      w.predictions.resize(b);
      ASSIGN_OR_RETURN(loss, stepper->Step(params, w.activations, batch.labels, b, w.predictions,
                                           w.activation_grads, param_grads));
      w.stepped = true;
    } else {
      loss = net.ForwardBackward(params, w.activations, batch.labels, b, param_grads, w.activation_grads, &w.ws,
                                 ready);
    }
    w.dense_seconds += Seconds(t0);
    w.shows.clear();
    w.clicks.clear();
    if (pool) {
      w.key_grads.resize(w.keys.size() * pool->dim());
      pool->Backward(w.views, w.index, w.activation_grads, w.key_grads);
      if (options.sparse_table.accessor.kind == AccessorKind::kCtr) CountShowsClicks(batch, w);
    } else {
      w.keys.clear();
      w.key_grads.clear();
    }
    const auto push_start = Clock::now();
    RETURN_IF_ERROR(sync->Push(worker, StepGrads{w.keys, w.key_grads, w.shows, w.clicks, param_grads}));
    const double push_seconds = Seconds(push_start);
    series.push.Observe(push_seconds);
    w.push_seconds += push_seconds;
    return loss;
  }

  // Heter mode, first half of a step: activations of the batch, sent to a heter-trainer.
  Status BeginHeterStep(uint32_t worker, InFlight& f) {
    WorkerState& w = f.state;
    RETURN_IF_ERROR(BuildActivations(f.batch, w, [&](std::span<const uint64_t> keys, float* rows) {
      return TimedPull(worker, w, keys, rows);
    }));
    f.reply = heter->Train(next_batch_id++, static_cast<uint32_t>(f.batch.size()), w.activations, f.batch.labels);
    return Status::OK();
  }

  // Second half: the heter-trainer's answer back-propagated into the embeddings and the
  // sparse gradients pushed. Leaves the predictions in f.state.predictions.
  StatusOr<float> FinishHeterStep(uint32_t worker, InFlight& f) {
    WorkerState& w = f.state;
    const auto t0 = Clock::now();
    auto answer = f.reply.get();
    w.dense_seconds += Seconds(t0);
    RETURN_IF_ERROR(answer.status());
    w.predictions.assign(answer->predictions.begin(), answer->predictions.end());
    w.shows.clear();
    w.clicks.clear();
    if (pool) {
      w.key_grads.resize(w.keys.size() * pool->dim());
      pool->Backward(w.views, w.index, answer->activation_grads, w.key_grads);
      if (options.sparse_table.accessor.kind == AccessorKind::kCtr) CountShowsClicks(f.batch, w);
    } else {
      w.keys.clear();
      w.key_grads.clear();
    }
    const auto push_start = Clock::now();
    RETURN_IF_ERROR(sync->Push(worker, StepGrads{w.keys, w.key_grads, w.shows, w.clicks, {}}));
    w.push_seconds += Seconds(push_start);
    return answer->loss;
  }

  // `stop`: a stop request ends an InMemoryDataset's load (Aborted).
  StatusOr<std::unique_ptr<data::Dataset>> OpenDataset(const std::vector<std::string>& paths, size_t batch_size,
                                                       bool allow_in_memory, const StopRequest* stop = nullptr) {
    // The distributed sampler shares records, not files: every trainer loads every file.
    const bool sampled = allow_in_memory && options.data.sampler == config::SamplerKind::kDistributed;
    ASSIGN_OR_RETURN(auto files, data::ListTrainerFiles(paths, options.data.split_file_list && !sampled,
                                                       options.trainer_id, options.trainers_num,
                                                       options.online.data_donefile));
    if (allow_in_memory && options.data.dataset == config::DatasetKind::kInMemory) {
      auto ds = std::make_unique<data::InMemoryDataset>(options.data, files, batch_size, options.trainer_id);
      // A line on a terminal, else a log line every 10 s of a long load.
      ProgressReporter progress;
      const std::string what = "trainer " + std::to_string(options.trainer_id) + ": loading data";
      RETURN_IF_ERROR(ds->LoadIntoMemory([&](size_t done, size_t total, uint64_t examples) {
        progress.Update(WorkProgress{what, done, total, "files", examples, "examples", 0});
      }, stop));
      progress.Done();
      spdlog::info("trainer {}: loaded {} examples into memory ({:.1f} MB)", options.trainer_id, ds->size(),
                   ds->MemoryBytes() / 1e6);
      return std::unique_ptr<data::Dataset>(std::move(ds));
    }
    auto ds = std::make_unique<data::QueueDataset>(options.data, files, batch_size);
    if (allow_in_memory) {  // the training data (evaluation passes leave the gauge alone)
      ds->SetDepthObserver([gauge = series.data_queue](size_t depth) { gauge.Set(static_cast<double>(depth)); });
    }
    return std::unique_ptr<data::Dataset>(std::move(ds));
  }

  // Sums the AUC state of every trainer; returns the merged calculator. After a stop request
  // (`stop`), this trainer's own.
  StatusOr<model::AucCalculator> GlobalAuc(const std::string& name, const model::AucCalculator& local,
                                           const StopRequest* stop) {
    model::AucCalculator merged;
    if (comm != nullptr) {
      std::vector<double> state(local.state().begin(), local.state().end());
      RETURN_IF_ERROR(comm->AllreduceSum(state).WithContext(name + " metrics"));
      merged.MergeState(state);
      return merged;
    }
    // A trainer that was asked to stop reports its own metrics rather than wait for the others.
    if (options.trainers_num == 1 || StopRequest::Requested(stop)) {
      merged.Merge(local);
      return merged;
    }
    auto result = client.Barrier(name, options.trainer_id, options.trainers_num,
                                 std::chrono::milliseconds(options.barrier_timeout_ms), local.state(), false, stop);
    if (!result.ok() && StopRequest::Requested(stop)) {
      merged.Merge(local);
      return merged;
    }
    RETURN_IF_ERROR(result.status());
    merged.MergeState(result->sum);
    return merged;
  }
};

Trainer::Trainer(config::TrainerOptions options, PsClient& client, HeterClient* heter, collective::Communicator* comm,
                 std::unique_ptr<ParamSync> sync, std::shared_ptr<const dense::CpuGemm> dense)
    : options_(std::move(options)),
      client_(client),
      heter_(options_.heter_mode() ? heter : nullptr),
      comm_(options_.collective_mode() ? comm : nullptr),
      given_sync_(options_.gpubox_mode() ? std::move(sync) : nullptr),
      impl_(std::make_unique<Impl>(options_, client_, heter_, comm_, std::move(dense))) {}

Trainer::~Trainer() = default;

Status Trainer::Barrier(const std::string& name) {
  if (comm_ != nullptr) return comm_->Barrier().WithContext("barrier '" + name + "'");
  // Every barrier of a job follows a Flush, so a stop while waiting loses no update.
  const Status st = client_
                        .Barrier(name, options_.trainer_id, options_.trainers_num,
                                 std::chrono::milliseconds(options_.barrier_timeout_ms), {}, false, stop_)
                        .status();
  if (st.code() == StatusCode::kAborted && stop_requested()) {
    return Status::Aborted(st.message() + " for the other trainers; the updates of every step trained were written "
                           "to the pservers");
  }
  return st;
}

Status Trainer::StartBarrier() {
  if (options_.trainers_num > 1) {
    spdlog::info("trainer {}: waiting for the job's {} trainers to start (barrier 'start', at most {} s)",
                 options_.trainer_id, options_.trainers_num, options_.barrier_timeout_ms / 1000);
  }
  return Barrier("start");
}

Status Trainer::Start() {
  auto& impl = *impl_;
  // The servers must hold the tables this model needs, with the right shapes.
  ASSIGN_OR_RETURN(auto dense, client_.Table(options_.dense_table.id));
  if (!dense.dense || dense.dim != impl.net.num_params()) {
    return Status::InvalidArgument("pserver table " + std::to_string(dense.id) + " ('" + dense.name + "') has " +
                                   std::to_string(dense.dim) + " floats but the model has " +
                                   std::to_string(impl.net.num_params()) +
                                   " dense parameters (start the pservers with the same job YAML)");
  }
  if (impl.pool) {
    ASSIGN_OR_RETURN(auto sparse, client_.Table(options_.sparse_table.id));
    if (sparse.dense || sparse.dim != impl.pool->dim()) {
      return Status::InvalidArgument("pserver table " + std::to_string(sparse.id) + " ('" + sparse.name +
                                     "') has dim " + std::to_string(sparse.dim) + " but the model's embedding is " +
                                     std::to_string(impl.pool->dim()) + " wide");
    }
  }
  if (options_.gpubox_mode()) {
    if (given_sync_ == nullptr) return Status::InvalidArgument("GPU-PS (gpubox) mode needs its device tables' sync");
    impl.sync = std::move(given_sync_);
    return StartBarrier();
  }
  if (options_.collective_mode()) {
    if (comm_ == nullptr) return Status::InvalidArgument("collective mode needs a communicator");
    ASSIGN_OR_RETURN(auto collective, CollectiveSync::Create(options_, client_, *comm_));
    // Each rank starts from its own draw; the broadcast makes them all rank 0's.
    std::vector<float> params(impl.net.num_params());
    impl.net.InitParams(params, options_.model.init_seed + options_.trainer_id);
    RETURN_IF_ERROR(collective->SetInitialParams(std::move(params)));
    impl.collective = collective.get();
    impl.sync = std::move(collective);
    return StartBarrier();
  }
  ASSIGN_OR_RETURN(impl.sync, MakeParamSync(options_, client_, options_.worker_threads));
  impl.sync->SetPushQueueGauges(impl.series.push_queue);
  if (options_.trainer_id == 0) {
    // Only where the pservers hold no parameters yet: a model loaded from a checkpoint (a
    // warm start, a resumed job) and a job a restarted trainer 0 rejoins keep theirs.
    std::vector<float> params(impl.net.num_params());
    impl.net.InitParams(params, options_.model.init_seed);
    RETURN_IF_ERROR(InitDenseParams(client_, options_.dense_table.id, "trainer 0", false, &params).status());
  }
  return StartBarrier();
}

void Trainer::SetMetrics(metrics::Registry* registry) {
  if (registry == nullptr) return;
  auto& s = impl_->series;
  // Pull/push latency: 50 us x 4^k up to ~52 s.
  const auto buckets = metrics::ExponentialBuckets(50e-6, 4, 11);
  s.examples = registry->GetCounter("fleetps_trainer_examples_total", "Examples trained by this trainer");
  s.steps = registry->GetCounter("fleetps_trainer_steps_total", "Steps (batches) trained by this trainer");
  s.loss = registry->GetGauge("fleetps_trainer_loss", "Mean log loss of the last print_interval steps");
  s.auc = registry->GetGauge("fleetps_trainer_auc", "AUC of the last print_interval steps");
  s.rate = registry->GetGauge("fleetps_trainer_examples_per_second", "Examples/s of the last print_interval steps");
  s.epoch = registry->GetGauge("fleetps_trainer_epoch", "The epoch being trained (1-based)");
  s.pull = registry->GetHistogram("fleetps_trainer_pull_seconds", "Sparse pulls of a step, as the worker waits",
                                  {}, buckets);
  s.push = registry->GetHistogram("fleetps_trainer_push_seconds",
                                  "Pushes of a step, as the worker waits (async: handing to the communicator)", {},
                                  buckets);
  s.data_queue = registry->GetGauge("fleetps_trainer_data_queue_batches",
                                    "Batches read and waiting for a worker (QueueDataset's reader -> worker queue; "
                                    "0 for InMemoryDataset, whose workers read memory directly)");
  registry->GetGauge("fleetps_trainer_data_queue_capacity", "Capacity of that queue, batches (runner.queue_capacity)")
      .Set(static_cast<double>(options_.data.queue_capacity));
  s.push_queue.steps = registry->GetGauge(
      "fleetps_trainer_push_queue_steps",
      "Steps handed to the async communicator whose push to the pservers has not completed (async and heter modes)");
  s.push_queue.keys = registry->GetGauge(
      "fleetps_trainer_push_queue_keys",
      "Keys of those steps' merge windows (merging and being sent; a key counts once per window)");
  for (size_t i = 0; i < s.pass.size(); ++i) {
    s.pass[i] = registry->GetGauge("fleetps_trainer_pass_metric",
                                   "The last training pass's (epoch's) metrics over every trainer's examples: AUC, "
                                   "log loss, CTRs and calibration (COPC, MAE, RMSE, bucket error)",
                                   {{"metric", Impl::kPassMetrics[i]}});
  }
}

void Trainer::SetTrainPaths(std::vector<std::string> paths) {
  options_.data.train_paths = std::move(paths);
  impl_->train_data.reset();  // an InMemoryDataset's records are released here
}

StatusOr<PassReport> Trainer::TrainEpoch(uint32_t epoch) {
  auto& impl = *impl_;
  if (options_.heter_mode() && heter_ == nullptr) {
    return Status::InvalidArgument("heter mode needs the heter-trainers (no HeterClient given)");
  }
  if (impl.train_data == nullptr) {
    ASSIGN_OR_RETURN(impl.train_data, impl.OpenDataset(options_.data.train_paths, options_.data.batch_size, true, stop_));
  }
  if (auto* mem = dynamic_cast<data::InMemoryDataset*>(impl.train_data.get())) {
    const uint64_t seed = options_.data.shuffle_seed + epoch * 1000003ull;
    if (options_.data.sampler == config::SamplerKind::kDistributed) {
      mem->SampleShard(options_.trainer_id, options_.trainers_num,
                       options_.data.shuffle != config::ShuffleMode::kNone, seed);
    } else if (options_.data.shuffle == config::ShuffleMode::kGlobal && options_.trainers_num > 1) {
      GlobalShuffleOptions shuffle;
      shuffle.trainer_id = options_.trainer_id;
      shuffle.trainers_num = options_.trainers_num;
      shuffle.seed = seed;
      shuffle.timeout = std::chrono::milliseconds(options_.barrier_timeout_ms);
      shuffle.stop = stop_;
      RETURN_IF_ERROR(GlobalShuffle(client_, *mem, shuffle).status());
    } else if (options_.data.shuffle != config::ShuffleMode::kNone) {
      mem->LocalShuffle(seed + options_.trainer_id);
    }
  }
  data::Dataset& dataset = *impl.train_data;
  // GPU-PS: the epoch's records in passes_per_epoch consecutive passes (an InMemoryDataset,
  // as ValidateTrainerOptions requires for more than one).
  auto* parted = dynamic_cast<data::InMemoryDataset*>(&dataset);
  const uint32_t passes = options_.gpubox_mode() && parted != nullptr ? options_.gpups.passes_per_epoch : 1;

  std::mutex mu;  // guards the metrics and first_error below
  model::AucCalculator epoch_auc, interval_auc;
  double interval_loss = 0;
  uint64_t interval_batches = 0, interval_examples = 0;
  Status first_error;
  std::atomic<uint64_t> steps{0}, examples{0};
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  const double cpu_start = metrics::ProcessCpuSeconds();
  auto interval_start = start;
  const uint32_t threads = options_.worker_threads;
  std::vector<WorkerState> states(threads);
  double pass_sync_seconds = 0;  // begin_pass and the flushes

  impl.series.epoch.Set(epoch);
  std::vector<CurvePoint> curve;  // guarded by mu
  TrainingProgress shown;         // guarded by mu: the last interval's loss and AUC, for the progress line
  shown.epoch = epoch;
  shown.epochs = options_.epochs;
  shown.expected = impl.last_epoch_examples;

  // Metrics of one finished step.
  auto record = [&](float loss, std::span<const float> predictions, const data::Batch& batch) {
    const uint64_t so_far = examples += batch.size();
    const uint64_t step = ++steps;
    impl.series.examples.Increment(static_cast<double>(batch.size()));
    impl.series.steps.Increment();
    std::unique_lock<std::mutex> lock(mu);
    epoch_auc.Add(predictions, batch.labels);
    interval_auc.Add(predictions, batch.labels);
    interval_loss += loss;
    ++interval_batches;
    interval_examples += batch.size();
    if (impl.progress.enabled()) {
      shown.examples = so_far;
      shown.seconds = Seconds(start);
      impl.progress.Update(FormatTrainingProgress(shown));
    }
    if (step % options_.print_interval != 0) return;
    const double secs = Seconds(interval_start);
    CurvePoint point;
    point.epoch = epoch;
    point.step = step;
    point.examples = impl.examples_before_epoch + so_far;
    point.loss = interval_loss / interval_batches;
    point.auc = interval_auc.Auc();
    point.examples_per_sec = interval_examples / std::max(secs, 1e-9);
    curve.push_back(point);
    shown.loss = point.loss;
    shown.auc = point.auc;
    impl.series.loss.Set(point.loss);
    impl.series.auc.Set(point.auc);
    impl.series.rate.Set(point.examples_per_sec);
    const std::string line =
        fmt::format("trainer {} epoch {} step {}: loss {:.5f} auc {:.5f} ({} examples, {:.0f} examples/s)",
                    options_.trainer_id, epoch, step, point.loss, point.auc, interval_examples,
                    point.examples_per_sec);
    const std::vector<double> cumulative(epoch_auc.state().begin(), epoch_auc.state().end());
    interval_auc.Reset();
    interval_loss = 0;
    interval_batches = 0;
    interval_examples = 0;
    interval_start = Clock::now();
    lock.unlock();
    if (impl.progress.enabled()) return;  // the status line shows it
    if (options_.trainers_num == 1 || (comm_ != nullptr && options_.local())) {
      spdlog::info("{}", line);
      return;
    }
    // The epoch so far on every trainer: each reports its cumulative buckets to server 0
    // and gets back the sum of everyone's latest report (no waiting).
    auto global = client_.ReportMetric("auc-epoch-" + std::to_string(epoch), options_.trainer_id, cumulative);
    if (global.ok()) {
      model::AucCalculator merged;
      merged.MergeState(global->sum);
      spdlog::info("{}; epoch so far, {}/{} trainers: auc {:.5f} loss {:.5f}", line, global->reporters,
                   options_.trainers_num, merged.Auc(), merged.MeanLoss());
    } else {
      spdlog::info("{} (cluster metric unavailable: {})", line, global.status().ToString());
    }
  };
  auto fail = [&](const Status& st) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) first_error = st;
      failed = true;
    }
    impl.sync->Abort(st);  // the other workers may be waiting for this one's step
  };

  auto worker = [&](uint32_t w) {
    WorkerState& ws = states[w];
    data::Batch batch;
    bool done = false;
    while (!done && !failed) {
      // After a stop request this worker is out of data: sync mode's EndStep still meets the others.
      Status st;
      bool got = false;
      if (!stop_requested()) {
        const auto t0 = Clock::now();
        auto has = dataset.NextBatch(&batch);
        ws.read_seconds += Seconds(t0);
        st = has.status();
        got = st.ok() && *has && !batch.empty();
      }
      if (st.ok() && got) {
        auto loss = impl.Step(w, batch, ws);
        st = loss.status();
        if (st.ok()) record(*loss, ws.stepped ? std::span<const float>(ws.predictions) : ws.ws.predictions(), batch);
      }
      if (st.ok()) {
        // Sync mode keeps every worker stepping until all are out of data.
        const auto t0 = Clock::now();
        auto all_done = impl.sync->EndStep(w, !got);
        ws.end_step_seconds += Seconds(t0);
        st = all_done.status();
        done = st.ok() && *all_done;
      }
      if (!st.ok()) fail(st);
    }
  };

  // GPU-PS with prefetch (ParamSync::prefetch): a helper thread reads step k+1's batch and
  // prepares it (de-duplication, pull, pooling) while the worker runs step k, in two slots.
  // The pull waits for step k's push when that push updates the rows it reads.
  auto prefetching_worker = [&](uint32_t w) {
    WorkerState& ws = states[w];
    std::array<Prefetched, 2> slots;
    std::mutex m;
    std::condition_variable cv;
    uint64_t prepared = 0;  // steps the helper has prepared
    uint64_t finished = 0;  // steps the worker is done with: their slots are free again
    uint64_t may_pull = 0;  // the last step the helper may pull for
    bool stop = false;
    auto advance = [&](uint64_t& counter, uint64_t to) {
      {
        std::lock_guard<std::mutex> lock(m);
        counter = std::max(counter, to);
      }
      cv.notify_all();
    };
    auto wait_until = [&](auto ready) {  // false once stopped
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return stop || ready(); });
      return !stop;
    };
    std::thread helper([&] {
      for (uint64_t k = 0;; ++k) {
        Prefetched& p = slots[k % 2];
        if (!wait_until([&] { return finished + 1 >= k; })) return;  // step k - 2 freed the slot
        const auto t0 = Clock::now();
        auto has = dataset.NextBatch(&p.batch);
        p.state.read_seconds += Seconds(t0);
        p.status = has.status();
        p.got = p.status.ok() && *has && !p.batch.empty();
        if (p.got) {
          if (!wait_until([&] { return may_pull >= k; })) return;
          p.status = impl.Prepare(w, p.batch, p.state);
        }
        const bool last = !p.got || !p.status.ok();
        advance(prepared, k + 1);
        if (last) return;
      }
    });
    bool out_of_data = false, done = false;
    for (uint64_t k = 0; !done && !failed; ++k) {
      Status st;
      bool got = false;
      if (stop_requested()) out_of_data = true;  // a batch the helper prepared is not trained
      if (!out_of_data) {
        const auto t0 = Clock::now();
        wait_until([&] { return prepared > k; });  // only this thread stops the helper
        ws.prefetch_wait_seconds += Seconds(t0);
        Prefetched& p = slots[k % 2];
        st = p.status;
        got = st.ok() && p.got;
        out_of_data = !got;
        if (got) {
          if (!impl.sync->NextPushUpdatesRows(w)) advance(may_pull, k + 1);
          auto loss = impl.Finish(w, p.batch, p.state);
          advance(may_pull, k + 1);
          st = loss.status();
          if (st.ok()) {
            record(*loss, p.state.stepped ? std::span<const float>(p.state.predictions) : p.state.ws.predictions(),
                   p.batch);
          }
        }
        for (auto field : {&WorkerState::read_seconds, &WorkerState::pull_seconds, &WorkerState::dense_seconds,
                           &WorkerState::push_seconds}) {
          ws.*field += p.state.*field;
          p.state.*field = 0;
        }
        advance(finished, k + 1);
      }
      if (st.ok()) {
        const auto t0 = Clock::now();
        auto all_done = impl.sync->EndStep(w, !got);
        ws.end_step_seconds += Seconds(t0);
        st = all_done.status();
        done = st.ok() && *all_done;
      }
      if (!st.ok()) fail(st);
    }
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    cv.notify_all();
    helper.join();
  };

  // Heter mode: up to heter.inflight micro-batches of this worker in flight at once.
  auto heter_worker = [&](uint32_t w) {
    const size_t depth = options_.heter.inflight;
    std::deque<std::unique_ptr<InFlight>> pending, free;
    bool out_of_data = false;
    while (true) {
      if (stop_requested()) out_of_data = true;  // the micro-batches in flight still finish
      if (!out_of_data && !failed && pending.size() < depth) {
        std::unique_ptr<InFlight> slot;
        if (free.empty()) {
          slot = std::make_unique<InFlight>();
        } else {
          slot = std::move(free.front());
          free.pop_front();
        }
        const auto t0 = Clock::now();
        auto has = dataset.NextBatch(&slot->batch);
        states[w].read_seconds += Seconds(t0);
        Status st = has.status();
        if (st.ok() && *has && !slot->batch.empty()) {
          st = impl.BeginHeterStep(w, *slot);
          if (st.ok()) {
            pending.push_back(std::move(slot));
            continue;
          }
        } else if (st.ok()) {
          out_of_data = true;
        }
        if (!st.ok()) fail(st);
        free.push_back(std::move(slot));
      }
      if (pending.empty()) break;
      // The oldest answer; after a failure the rest are still awaited (they hold spans
      // into their slots) but nothing new is sent.
      std::unique_ptr<InFlight> slot = std::move(pending.front());
      pending.pop_front();
      auto loss = impl.FinishHeterStep(w, *slot);
      if (!loss.ok()) {
        fail(loss.status());
      } else if (!failed) {
        record(*loss, slot->state.predictions, slot->batch);
      }
      states[w].dense_seconds += slot->state.dense_seconds;
      states[w].pull_seconds += slot->state.pull_seconds;
      states[w].push_seconds += slot->state.push_seconds;
      slot->state.dense_seconds = 0;
      slot->state.pull_seconds = 0;
      slot->state.push_seconds = 0;
      free.push_back(std::move(slot));
    }
  };
  for (uint32_t pass = 0; pass < passes; ++pass) {
    std::string where = "trainer " + std::to_string(options_.trainer_id) + " epoch " + std::to_string(epoch);
    if (passes > 1) where += " pass " + std::to_string(pass + 1) + "/" + std::to_string(passes);
    if (parted != nullptr) parted->SetPassPart(pass, passes);
    auto pass_start = Clock::now();
    const Status begun = impl.sync->BeginPass(dataset, stop_);
    pass_sync_seconds += Seconds(pass_start);
    if (begun.code() == StatusCode::kAborted && stop_requested()) {
      // Nothing of this pass was trained: the epoch ends with its Flush, as a pass cut short.
      spdlog::info("{} begin_pass: {}", where, begun.message());
      break;
    }
    RETURN_IF_ERROR(begun.WithContext(where + " begin_pass"));
    RETURN_IF_ERROR(dataset.StartPass());
    std::vector<std::thread> pool;
    for (uint32_t w = 0; w < threads; ++w) {
      if (heter_ != nullptr) {
        pool.emplace_back(heter_worker, w);
      } else if (impl.sync->prefetch()) {
        pool.emplace_back(prefetching_worker, w);
      } else {
        pool.emplace_back(worker, w);
      }
    }
    for (auto& t : pool) t.join();
    impl.progress.Clear();
    dataset.EndPass();
    RETURN_IF_ERROR(first_error.WithContext(where));
    // The last pass, and a pass a stop request cut short, end with the epoch's Flush below.
    if (pass + 1 == passes || stop_requested()) break;
    pass_start = Clock::now();
    RETURN_IF_ERROR(impl.sync->Flush().WithContext(where + " end_pass"));
    pass_sync_seconds += Seconds(pass_start);
  }
  impl.examples_before_epoch += examples;
  impl.last_epoch_examples = examples.load();
  const auto flush_start = Clock::now();
  RETURN_IF_ERROR(impl.sync->Flush());
  pass_sync_seconds += Seconds(flush_start);
  if (heter_ != nullptr) RETURN_IF_ERROR(heter_->Flush().WithContext("flushing the heter-trainers' dense gradients"));
  if (impl.collective != nullptr) {
    spdlog::info("trainer {} epoch {}: {} steps on {} ranks, {:.2f} s waiting for allreduces, parameter checksum {}",
                 options_.trainer_id, epoch, impl.collective->steps(), comm_->size(),
                 impl.collective->comm_wait_seconds(), impl.collective->Checksum());
  }

  PassReport report;
  report.epoch = epoch;
  report.seconds = Seconds(start);
  report.cpu_seconds = metrics::ProcessCpuSeconds() - cpu_start;
  report.examples = examples;
  report.examples_per_sec = report.examples / std::max(report.seconds, 1e-9);
  for (const auto& s : states) {
    report.dense_compute_sec += s.dense_seconds;
    report.read_sec += s.read_seconds;
    report.pull_sec += s.pull_seconds;
    report.push_sec += s.push_seconds;
    report.end_step_sec += s.end_step_seconds;
    report.prefetch_wait_sec += s.prefetch_wait_seconds;
  }
  report.pass_sync_sec = pass_sync_seconds;
  report.skipped_lines = dataset.stats().bad_lines;
  report.curve = std::move(curve);
  ASSIGN_OR_RETURN(auto global, impl.GlobalAuc("epoch-" + std::to_string(epoch), epoch_auc, stop_));
  FillPassMetrics(global, &report);
  impl.PublishPass(report);
  return report;
}

StatusOr<PassReport> Trainer::Evaluate(const std::vector<std::string>& paths, const std::string& predictions_path) {
  auto& impl = *impl_;
  ASSIGN_OR_RETURN(auto dataset, impl.OpenDataset(paths, options_.data.test_batch_size, false));
  RETURN_IF_ERROR(dataset->StartPass());
  std::vector<float> params(impl.net.num_params());
  RETURN_IF_ERROR(client_.PullDense(options_.dense_table.id, params).get());

  std::ofstream predictions;
  if (!predictions_path.empty()) {
    predictions.open(predictions_path, std::ios::trunc);
    if (!predictions) return Status::IOError("cannot write predictions to " + predictions_path);
  }
  std::mutex mu;  // guards auc, predictions, first_error
  model::AucCalculator auc;
  Status first_error;
  std::atomic<uint64_t> examples{0};
  const auto start = Clock::now();
  const double cpu_start = metrics::ProcessCpuSeconds();
  auto worker = [&] {
    WorkerState ws;
    data::Batch batch;
    while (!stop_requested()) {
      auto has = dataset->NextBatch(&batch);
      Status st = has.status();
      if (st.ok() && !*has) break;
      if (st.ok()) {
        st = impl.BuildActivations(batch, ws, [&](std::span<const uint64_t> keys, float* rows) {
          return client_.PullSparse(options_.sparse_table.id, keys, rows).get();
        });
      }
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = st;
        break;
      }
      auto p = impl.net.Forward(params, ws.activations, batch.size(), &ws.ws);
      examples += batch.size();
      std::lock_guard<std::mutex> lock(mu);
      auc.Add(p, batch.labels);
      if (predictions.is_open()) {
        for (size_t i = 0; i < batch.size(); ++i) predictions << batch.labels[i] << ' ' << p[i] << '\n';
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t w = 0; w < options_.worker_threads; ++w) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  dataset->EndPass();
  RETURN_IF_ERROR(first_error.WithContext("evaluation"));
  if (stop_requested()) {  // scoring changes nothing on the pservers: nothing to finish
    return Status::Aborted(fmt::format("{} in the test pass, after {} of its examples; training had ended and the "
                                       "updates of every step trained were written to the pservers",
                                       stop_->reason(), examples.load()));
  }
  PassReport report;
  report.seconds = Seconds(start);
  report.cpu_seconds = metrics::ProcessCpuSeconds() - cpu_start;
  report.examples = examples;
  report.examples_per_sec = report.examples / std::max(report.seconds, 1e-9);
  ASSIGN_OR_RETURN(auto global, impl.GlobalAuc("eval", auc, stop_));
  FillPassMetrics(global, &report);
  return report;
}

}  // namespace fleetps::trainer
