#include "trainer/runtime/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/metrics/process_metrics.h"
#include "common/metrics/registry.h"
#include "trainer/data/file_list.h"
#include "trainer/data/in_memory_dataset.h"
#include "trainer/data/queue_dataset.h"
#include "trainer/model/output_metrics.h"
#include "trainer/model/dense_net.h"
#include "trainer/model/embedding_pool.h"
#include "trainer/runtime/collective_sync.h"
#include "trainer/runtime/epoch_run.h"
#include "trainer/runtime/global_shuffle.h"
#include "trainer/runtime/progress.h"
#include "trainer/runtime/step_loop.h"
#include "trainer/runtime/worker_step.h"

namespace fleetps::trainer {

using Clock = std::chrono::steady_clock;

namespace {

// The pass's quality metrics from the metric state of every trainer.
void FillPassMetrics(const model::OutputMetrics& global, PassReport* report) {
  const model::AucCalculator& first = global.output(0);
  report->auc = first.Auc();
  report->loss = first.MeanLoss();
  report->actual_ctr = first.ActualCtr();
  report->predicted_ctr = first.PredictedCtr();
  report->copc = first.Copc();
  report->mae = first.Mae();
  report->rmse = first.Rmse();
  report->bucket_error = first.BucketError();
  report->outputs.clear();
  for (size_t o = 0; o < global.size(); ++o) {
    const model::AucCalculator& m = global.output(o);
    report->outputs.push_back(OutputReport{.name = global.name(o),
                                           .label = global.label(o),
                                           .auc = m.Auc(),
                                           .loss = m.MeanLoss(),
                                           .actual_ctr = m.ActualCtr(),
                                           .predicted_ctr = m.PredictedCtr(),
                                           .copc = m.Copc()});
  }
}

// A "label prediction" pair per output of the model, one line per example.
void WritePredictions(const model::DenseNet& net, const data::Batch& batch, std::span<const float> p,
                      std::ostream& out) {
  const size_t outputs = net.num_outputs(), labels = net.num_labels();
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t o = 0; o < outputs; ++o) {
      out << (o ? " " : "") << batch.labels[i * labels + net.graph().output_label(o)] << ' ' << p[i * outputs + o];
    }
    out << '\n';
  }
}

}  // namespace

struct Trainer::Impl {
  Impl(const config::TrainerOptions& o, PsClient& c, collective::Communicator* m,
       std::shared_ptr<const dense::CpuGemm> gemm)
      : options(o),
        client(c),
        comm(m),
        net(model::DenseNet::FromOptions(o.model, std::move(gemm))),
        pool(HasSparseSlots(o.model)
                 ? std::make_unique<model::EmbeddingPool>(model::EmbeddingPool::FromOptions(o.model))
                 : nullptr) {}

  const config::TrainerOptions& options;
  PsClient& client;
  collective::Communicator* const comm;  // collective mode only
  CollectiveSync* collective = nullptr;  // collective mode: `sync`, typed
  const model::DenseNet net;
  const std::unique_ptr<model::EmbeddingPool> pool;  // null for mlp (no sparse slots)
  std::unique_ptr<ParamSync> sync;
  std::unique_ptr<StepRunner> steps;            // Start: the step every loop runs, over `sync`
  std::unique_ptr<StepLoop> loop;               // Start: the stepping style
  std::unique_ptr<data::Dataset> train_data;    // kept across epochs (InMemoryDataset loads once)
  data::InMemoryDataset* in_memory = nullptr;   // train_data, when it is one
  uint64_t examples_before_epoch = 0;           // this trainer's, in the epochs before the current one
  std::optional<uint64_t> last_epoch_examples;  // the previous epoch's: the progress line's ETA
  ProgressLine progress;                        // a status line instead of interval log lines, on a terminal
  TrainerSeries series;                         // SetMetrics'

  void PublishPass(const PassReport& r) {
    const double values[] = {r.auc, r.loss, r.actual_ctr, r.predicted_ctr, r.copc, r.mae, r.rmse, r.bucket_error};
    for (size_t i = 0; i < series.pass.size(); ++i) series.pass[i].Set(values[i]);
  }

  // `stop`: a stop request ends an InMemoryDataset's load (Aborted). `in_memory` (when
  // given): the dataset, typed, when it is an InMemoryDataset; else null.
  StatusOr<std::unique_ptr<data::Dataset>> OpenDataset(const std::vector<std::string>& paths, size_t batch_size,
                                                       bool allow_in_memory, const StopRequest* stop = nullptr,
                                                       data::InMemoryDataset** in_memory = nullptr) {
    // The distributed sampler shares records, not files: every trainer loads every file.
    const bool sampled = allow_in_memory && options.data.sampler == config::SamplerKind::kDistributed;
    ASSIGN_OR_RETURN(auto files,
                     data::ListTrainerFiles(paths, options.data.split_file_list && !sampled, options.trainer_id,
                                            options.trainers_num, options.online.data_donefile));
    if (allow_in_memory && options.data.dataset == config::DatasetKind::kInMemory) {
      auto ds = std::make_unique<data::InMemoryDataset>(options.data, files, batch_size, options.trainer_id);
      // A line on a terminal, else a log line every 10 s of a long load.
      ProgressReporter progress;
      const std::string what = "trainer " + std::to_string(options.trainer_id) + ": loading data";
      RETURN_IF_ERROR(ds->LoadIntoMemory(
          [&](size_t done, size_t total, uint64_t examples) {
            progress.Update(WorkProgress{what, done, total, "files", examples, "examples", 0});
          },
          stop));
      progress.Done();
      spdlog::info("trainer {}: loaded {} examples into memory ({:.1f} MB)", options.trainer_id, ds->size(),
                   ds->MemoryBytes() / 1e6);
      if (in_memory != nullptr) *in_memory = ds.get();
      return std::unique_ptr<data::Dataset>(std::move(ds));
    }
    if (in_memory != nullptr) *in_memory = nullptr;
    auto ds = std::make_unique<data::QueueDataset>(options.data, files, batch_size);
    if (allow_in_memory) {  // the training data (evaluation passes leave the gauge alone)
      ds->SetDepthObserver([gauge = series.data_queue](size_t depth) { gauge.Set(static_cast<double>(depth)); });
    }
    return std::unique_ptr<data::Dataset>(std::move(ds));
  }

  // Sums the AUC state of every trainer; returns the merged calculator. After a stop request
  // (`stop`), this trainer's own.
  StatusOr<model::OutputMetrics> GlobalMetrics(const std::string& name, const model::OutputMetrics& local,
                                               const StopRequest* stop) {
    model::OutputMetrics merged(net);
    if (comm != nullptr) {
      std::vector<double> state = local.State();
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
                                 std::chrono::milliseconds(options.barrier_timeout_ms), local.State(), false, stop);
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
      impl_(std::make_unique<Impl>(options_, client_, comm_, std::move(dense))) {}

Trainer::~Trainer() = default;

Status Trainer::Barrier(const std::string& name) {
  if (comm_ != nullptr) return comm_->Barrier().WithContext("barrier '" + name + "'");
  // Every barrier of a job follows a Flush, so a stop while waiting loses no update.
  const Status st = client_
                        .Barrier(name, options_.trainer_id, options_.trainers_num,
                                 std::chrono::milliseconds(options_.barrier_timeout_ms), {}, false, stop_)
                        .status();
  if (st.code() == StatusCode::kAborted && stop_requested()) {
    return Status::Aborted(st.message() +
                           " for the other trainers; the updates of every step trained were written "
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
  if (options_.heter_mode() && heter_ == nullptr) {
    return Status::InvalidArgument("heter mode needs the heter-trainers (no HeterClient given)");
  }
  RETURN_IF_ERROR(OpenSync());
  // The stepping style, once: heter in-flight micro-batches, prefetching where the mode
  // offers it, else plain.
  impl.steps = std::make_unique<StepRunner>(options_, impl.net, impl.pool.get(), *impl.sync,
                                            options_.collective.overlap ? impl.collective : nullptr, impl.series.pull,
                                            impl.series.push);
  if (heter_ != nullptr) {
    impl.loop = MakeHeterLoop(*heter_, options_.heter.inflight);
  } else if (const Prefetching* prefetching = impl.sync->prefetching()) {
    impl.loop = MakePrefetchLoop(*prefetching);
  } else {
    impl.loop = MakePlainLoop();
  }
  return StartBarrier();
}

Status Trainer::OpenSync() {
  auto& impl = *impl_;
  if (options_.gpubox_mode()) {
    if (given_sync_ == nullptr) return Status::InvalidArgument("GPU-PS (gpubox) mode needs its device tables' sync");
    impl.sync = std::move(given_sync_);
    return Status::OK();
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
    return Status::OK();
  }
  ASSIGN_OR_RETURN(impl.sync, MakeParamSync(options_, client_, options_.worker_threads, impl.series.push_queue));
  if (options_.trainer_id == 0) {
    // Only where the pservers hold no parameters yet: a model loaded from a checkpoint (a
    // warm start, a resumed job) and a job a restarted trainer 0 rejoins keep theirs.
    std::vector<float> params(impl.net.num_params());
    impl.net.InitParams(params, options_.model.init_seed);
    RETURN_IF_ERROR(InitDenseParams(client_, options_.dense_table.id, "trainer 0", false, &params).status());
  }
  return Status::OK();
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
  const model::OutputMetrics outputs(impl_->net);
  for (size_t o = 0; o < outputs.size(); ++o) {
    s.output_auc.push_back(registry->GetGauge(
        "fleetps_trainer_output_auc", "AUC of the last print_interval steps, per model output against its label",
        {{"output", outputs.name(o)}, {"label", outputs.label(o)}}));
  }
  s.rate = registry->GetGauge("fleetps_trainer_examples_per_second", "Examples/s of the last print_interval steps");
  s.epoch = registry->GetGauge("fleetps_trainer_epoch", "The epoch being trained (1-based)");
  s.pull = registry->GetHistogram("fleetps_trainer_pull_seconds", "Sparse pulls of a step, as the worker waits", {},
                                  buckets);
  s.push =
      registry->GetHistogram("fleetps_trainer_push_seconds",
                             "Pushes of a step, as the worker waits (async: handing to the communicator)", {}, buckets);
  s.data_queue = registry->GetGauge("fleetps_trainer_data_queue_batches",
                                    "Batches read and waiting for a worker (QueueDataset's reader -> worker queue; "
                                    "0 for InMemoryDataset, whose workers read memory directly)");
  registry->GetGauge("fleetps_trainer_data_queue_capacity", "Capacity of that queue, batches (runner.queue_capacity)")
      .Set(static_cast<double>(options_.data.queue_capacity));
  s.push_queue.steps = registry->GetGauge(
      "fleetps_trainer_push_queue_steps",
      "Steps handed to the async communicator whose push to the pservers has not completed (async and heter modes)");
  s.push_queue.keys =
      registry->GetGauge("fleetps_trainer_push_queue_keys",
                         "Keys of those steps' merge windows (merging and being sent; a key counts once per window)");
  for (size_t i = 0; i < s.pass.size(); ++i) {
    s.pass[i] = registry->GetGauge("fleetps_trainer_pass_metric",
                                   "The last training pass's (epoch's) metrics over every trainer's examples: AUC, "
                                   "log loss, CTRs and calibration (COPC, MAE, RMSE, bucket error)",
                                   {{"metric", TrainerSeries::kPassMetrics[i]}});
  }
}

void Trainer::SetTrainPaths(std::vector<std::string> paths) {
  options_.data.train_paths = std::move(paths);
  impl_->train_data.reset();  // an InMemoryDataset's records are released here
}

StatusOr<PassReport> Trainer::TrainEpoch(uint32_t epoch) {
  auto& impl = *impl_;
  if (impl.loop == nullptr) return Status::Internal("TrainEpoch before Start");
  if (impl.train_data == nullptr) {
    ASSIGN_OR_RETURN(impl.train_data, impl.OpenDataset(options_.data.train_paths, options_.data.batch_size, true, stop_,
                                                       &impl.in_memory));
  }
  if (data::InMemoryDataset* mem = impl.in_memory) {
    const uint64_t seed = options_.data.shuffle_seed + epoch * 1000003ull;
    if (options_.data.sampler == config::SamplerKind::kDistributed) {
      mem->SampleShard(options_.trainer_id, options_.trainers_num, options_.data.shuffle != config::ShuffleMode::kNone,
                       seed);
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
  // GPU-PS: the epoch's records in passes_per_epoch consecutive passes (an InMemoryDataset,
  // as ValidateTrainerOptions requires for more than one).
  PassLifecycle* lifecycle = impl.sync->pass_lifecycle();
  const uint32_t passes = lifecycle != nullptr && impl.in_memory != nullptr ? options_.gpups.passes_per_epoch : 1;
  std::function<void(uint32_t)> set_part;
  if (impl.in_memory != nullptr) {
    set_part = [mem = impl.in_memory, passes](uint32_t pass) { mem->SetPassPart(pass, passes); };
  }

  EpochContext context{.options = options_,
                       .client = client_,
                       // Local collective ranks and a single trainer have no one to sum with.
                       .cluster_metric = options_.trainers_num > 1 && !(comm_ != nullptr && options_.local()),
                       .sync = *impl.sync,
                       .steps = *impl.steps,
                       .loop = *impl.loop,
                       .series = impl.series,
                       .progress = impl.progress,
                       .stop = stop_,
                       .examples_before = impl.examples_before_epoch,
                       .expected = impl.last_epoch_examples};
  EpochRun run(context, epoch, *impl.train_data);
  const Status trained = run.Run(passes, set_part, lifecycle);
  impl.examples_before_epoch += run.examples();
  impl.last_epoch_examples = run.examples();
  RETURN_IF_ERROR(trained);
  if (impl.collective != nullptr) {
    spdlog::info("trainer {} epoch {}: {} steps on {} ranks, {:.2f} s waiting for allreduces, parameter checksum {}",
                 options_.trainer_id, epoch, impl.collective->steps(), comm_->size(),
                 impl.collective->comm_wait_seconds(), impl.collective->Checksum());
  }
  PassReport report = run.Report();
  ASSIGN_OR_RETURN(auto global, impl.GlobalMetrics("epoch-" + std::to_string(epoch), run.metrics(), stop_));
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
  std::mutex mu;  // guards metrics, predictions, first_error
  model::OutputMetrics metrics(impl.net);
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
        st = BuildActivations(impl.pool.get(), impl.net, batch, ws, [&](std::span<const uint64_t> keys, float* rows) {
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
      metrics.Add(p, batch.labels);
      if (predictions.is_open()) WritePredictions(impl.net, batch, p, predictions);
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t w = 0; w < options_.worker_threads; ++w) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  dataset->EndPass();
  RETURN_IF_ERROR(first_error.WithContext("evaluation"));
  if (stop_requested()) {  // scoring changes nothing on the pservers: nothing to finish
    return Status::Aborted(
        fmt::format("{} in the test pass, after {} of its examples; training had ended and the "
                    "updates of every step trained were written to the pservers",
                    stop_->reason(), examples.load()));
  }
  PassReport report;
  report.seconds = SecondsSince(start);
  report.cpu_seconds = metrics::ProcessCpuSeconds() - cpu_start;
  report.examples = examples;
  report.examples_per_sec = report.examples / std::max(report.seconds, 1e-9);
  ASSIGN_OR_RETURN(auto global, impl.GlobalMetrics("eval", metrics, stop_));
  FillPassMetrics(global, &report);
  return report;
}

}  // namespace fleetps::trainer
