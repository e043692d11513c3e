#include "heter_trainer/gpups/gpups_sync.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/key_index.h"
#include "common/sharding.h"
#include "heter_trainer/device/nccl_backend.h"
#include "trainer/collective/local_group.h"
#include "trainer/data/batch.h"
#include "trainer/model/dense_net.h"

namespace fleetps::heter {
namespace {

using Clock = std::chrono::steady_clock;

// end_pass writes a pass back in ranges of this many rows (WritePassBack): 7.6 MB of rows
// (begin and end) at a time for ctr_dnn's Adam rows. Of 8K to 1M rows per range, 8K-32K
// were fastest (gpups_bench --write-back-rows, docs/BENCHMARKS.md); larger ranges overlap
// less, smaller ones pay more per call.
constexpr uint64_t kWriteBackRows = uint64_t{1} << 15;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Runs f(i) for i in [0, n) on n threads (devices or workers) and returns the first error.
template <typename F>
Status OnEveryWorker(uint32_t n, F f) {
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (uint32_t d = 0; d < n; ++d) threads.emplace_back([&, d] { results[d] = f(d); });
  for (auto& t : threads) t.join();
  for (uint32_t d = 0; d < n; ++d) {
    if (!results[d].ok()) return results[d].WithContext("worker " + std::to_string(d));
  }
  return Status::OK();
}

// A DenseLane as the Trainer's DenseStepper: the step's parameters, then the step.
class LaneStepper : public trainer::DenseStepper {
 public:
  explicit LaneStepper(std::unique_ptr<DenseLane> lane) : lane_(std::move(lane)) {}
  StatusOr<float> Step(std::span<const float> params, std::span<const float> activations, std::span<const float> labels,
                       size_t batch, std::span<float> predictions, std::span<float> activation_grads,
                       std::span<float> param_grads) override {
    RETURN_IF_ERROR(lane_->SetParams(params));
    return lane_->Step(activations, labels, batch, DenseStepOutput{predictions, activation_grads, param_grads});
  }

 private:
  std::unique_ptr<DenseLane> lane_;
};

// Aborted when `stop` is requested before begin_pass's step `what`.
Status CheckNotStopped(const StopRequest* stop, const char* what) {
  if (!StopRequest::Requested(stop)) return Status::OK();
  return Status::Aborted(fmt::format("{} before {}; no pass was begun", stop->reason(), what));
}

}  // namespace

StatusOr<std::vector<std::unique_ptr<collective::Communicator>>> MakeDeviceCommunicators(
    const config::TrainerOptions& o, uint32_t workers, bool gpus, std::shared_ptr<const net::AuthKey> auth_key,
    std::shared_ptr<net::TlsContext> tls) {
  const auto timeout = std::chrono::milliseconds(o.collective.timeout_ms);
  // The workers of this process sum their host replicas in memory; the processes all-reduce
  // that sum over one rank each (none for a single process).
  std::unique_ptr<collective::Communicator> nodes;
  if (o.trainer_endpoints.size() > 1) {
    collective::CollectiveOptions co;
    co.rank = o.trainer_id;
    co.endpoints = o.trainer_endpoints;
    co.prefix = "fleetps-gpups";
    co.timeout = timeout;
    co.store_budget_bytes = o.collective.store_budget_bytes;
    co.auth_key = auth_key;
    co.tls = std::move(tls);
    // NCCL on the node's first GPU with backend nccl and the CUDA pass table; else Gloo.
    const bool nccl = gpus && o.collective.backend == config::CollectiveBackend::kNccl;
    config::DataParallelOptions backend = o.collective;
    backend.backend = nccl ? config::CollectiveBackend::kNccl : config::CollectiveBackend::kGloo;
    backend.gpu = nccl ? o.gpups.devices.front() : -1;
    std::string reason;
    ASSIGN_OR_RETURN(nodes, collective::MakeRankCommunicator(backend, co, BuildNcclBackend(), &reason));
    spdlog::info("trainer {}: dense allreduce among the nodes, rank {} of {}: {}", o.trainer_id, co.rank,
                 co.endpoints.size(), reason);
  }
  return collective::MakeLocalGroup(workers, std::move(nodes), timeout);
}

GpuPsSync::GpuPsSync(const config::TrainerOptions& options, trainer::PsClient& client, std::unique_ptr<PassTable> table,
                     std::vector<std::unique_ptr<collective::Communicator>> comms,
                     std::shared_ptr<const dense::CpuGemm> gemm)
    : o_(options),
      client_(client),
      table_(std::move(table)),
      net_(trainer::model::DenseNet::FromOptions(options.model, std::move(gemm))),
      comms_(std::move(comms)),
      merge_(comms_.size(), trainer::SparseMerge(table_->dim())) {}

GpuPsSync::~GpuPsSync() = default;

void GpuPsSync::Abort(const Status& why) {
  for (auto& comm : comms_) comm->Abort(why);
  if (dense_ != nullptr) dense_->Abort(why);
}

trainer::Prefetching* GpuPsSync::prefetching() {
  return PrefetchOn(o_.gpups, static_cast<uint32_t>(comms_.size())) ? this : nullptr;
}

StatusOr<std::unique_ptr<GpuPsSync>> GpuPsSync::Create(const config::TrainerOptions& o, trainer::PsClient& client,
                                                       std::unique_ptr<PassTable> table,
                                                       std::vector<std::unique_ptr<collective::Communicator>> comms,
                                                       std::shared_ptr<const dense::CpuGemm> gemm) {
  const uint32_t devices = table->devices();
  const uint32_t workers = devices * std::max<uint32_t>(o.gpups.workers_per_device, 1);
  if (comms.size() != workers) {
    return Status::InvalidArgument("GPU-PS: " + std::to_string(comms.size()) + " communicators for " +
                                   std::to_string(workers) + " workers (" + std::to_string(devices) + " devices x " +
                                   std::to_string(o.gpups.workers_per_device) + " workers per device)");
  }
  ASSIGN_OR_RETURN(auto info, client.Table(o.sparse_table.id));
  if (info.dense || info.dim != table->dim()) {
    return Status::InvalidArgument("pserver table " + std::to_string(info.id) + " ('" + info.name + "') has dim " +
                                   std::to_string(info.dim) + " but the pass table " + std::to_string(table->dim()) +
                                   " (start the pservers with the same job YAML)");
  }
  // The dense part on each device: a CUDA lane next to the CUDA table, else the CPU lane.
  const bool gpu = table->device_name() == "cuda";
  if (gpu) RETURN_IF_ERROR(RequireFp32OnCuda(o.dense.precision, "GPU-PS"));
  std::unique_ptr<GpuPsSync> sync(new GpuPsSync(o, client, std::move(table), std::move(comms), std::move(gemm)));
  for (uint32_t d = 0; d < devices; ++d) {
    std::unique_ptr<DenseDevice> device;
    if (gpu) {
      const int id = d < o.gpups.devices.size() ? o.gpups.devices[d] : static_cast<int>(d);
      ASSIGN_OR_RETURN(device, MakeCudaDevice(sync->net_, id));
    } else {
      device = MakeCpuDevice(sync->net_);
    }
    sync->devices_.push_back(std::move(device));
  }
  // Worker w: a lane of device w % devices.
  for (uint32_t w = 0; w < workers; ++w) {
    ASSIGN_OR_RETURN(auto lane, sync->devices_[w % devices]->NewLane());
    sync->steppers_.push_back(std::make_unique<LaneStepper>(std::move(lane)));
  }
  // Every process draws; rank 0's broadcast makes them all its own. Rank 0 starts from the
  // pservers' dense table and its optimizer state instead when it holds parameters (loaded
  // from a checkpoint), as Flush left them there.
  const size_t n = sync->net_.num_params();
  std::vector<float> params(n);
  sync->net_.InitParams(params, o.model.init_seed + o.trainer_id);
  ASSIGN_OR_RETURN(auto state, trainer::FreshDenseState(o.dense_table.optimizer, n));
  if (o.trainer_id == 0) {
    RETURN_IF_ERROR(
        InitDenseParams(client, o.dense_table.id, "trainer 0", true, &params, &state).status().WithContext("GPU-PS"));
  }
  std::vector<std::vector<float>> drawn(workers, trainer::PackDenseState(params, state));
  RETURN_IF_ERROR(OnEveryWorker(workers, [&](uint32_t w) {
    return sync->comms_[w]->Broadcast(drawn[w], 0).WithContext("broadcasting the initial parameters from rank 0");
  }));
  trainer::UnpackDenseState(drawn[0], &params, &state);
  std::vector<collective::Communicator*> ranks;
  for (auto& comm : sync->comms_) ranks.push_back(comm.get());
  ASSIGN_OR_RETURN(sync->dense_, DenseReplica::Create(o, std::move(ranks), std::move(params), std::move(state)));
  return sync;
}

StatusOr<std::vector<uint64_t>> CollectPassKeys(data::Dataset& dataset, uint32_t threads, const StopRequest* stop) {
  threads = std::max<uint32_t>(threads, 1);
  // The distinct keys, in partitions by MixKey, each under its own lock. A thread gathers a
  // partition's keys in a small buffer and inserts them under the lock when it is full: few
  // lock round trips, and no more memory than the distinct keys (per-thread sets of them
  // could each grow to nearly all of them).
  constexpr size_t kFlush = 1024;
  const uint32_t parts = threads * 4;
  struct Part {
    std::mutex mu;
    KeyIndex keys;
  };
  std::vector<Part> part(parts);
  RETURN_IF_ERROR(dataset.StartPass());
  Status read = OnEveryWorker(threads, [&](uint32_t) -> Status {
    std::vector<std::vector<uint64_t>> pending(parts);
    auto flush = [&](uint32_t p) {
      std::lock_guard<std::mutex> lock(part[p].mu);
      for (uint64_t key : pending[p]) part[p].keys.Insert(key);
      pending[p].clear();
    };
    data::Batch batch;
    while (true) {
      if (StopRequest::Requested(stop)) return Status::Aborted(stop->reason() + "; no pass was begun");
      ASSIGN_OR_RETURN(const bool has, dataset.NextBatch(&batch));
      if (!has) break;
      for (const auto& slot : batch.slots) {
        for (uint64_t id : slot.ids) {
          const auto p = static_cast<uint32_t>(MixKey(id) % parts);
          pending[p].push_back(id);
          if (pending[p].size() == kFlush) flush(p);
        }
      }
    }
    for (uint32_t p = 0; p < parts; ++p) {
      if (!pending[p].empty()) flush(p);
    }
    return Status::OK();
  });
  dataset.EndPass();
  RETURN_IF_ERROR(read.WithContext("reading the pass's keys"));
  size_t total = 0;
  for (const Part& p : part) total += p.keys.size();
  std::vector<uint64_t> keys;
  keys.reserve(total);
  for (const Part& p : part) keys.insert(keys.end(), p.keys.keys().begin(), p.keys.keys().end());
  return keys;
}

Status WritePassBack(const PassTable& table, trainer::PsClient& client, uint32_t table_id, bool average,
                     uint64_t range_rows, trainer::PsClient::RowsWritten* written) {
  range_rows = std::max<uint64_t>(range_rows, 1);
  const uint64_t ranges = (table.size() + range_rows - 1) / range_rows;
  std::vector<trainer::PsClient::RowsWritten> counts(ranges);  // sized once: the calls write into them
  std::deque<std::future<Status>> calls;                       // in flight, oldest first
  Status st;
  auto wait_oldest = [&] {
    Status done = calls.front().get();
    calls.pop_front();
    if (st.ok()) st = std::move(done);
  };
  for (uint64_t r = 0; r < ranges && st.ok(); ++r) {
    PassRows rows;
    st = table.ExportRange(r * range_rows, range_rows, &rows);
    if (!st.ok()) break;
    if (rows.keys.empty()) continue;
    trainer::PsClient::RowsIn in{rows.begin, rows.end, rows.extended, rows.shows, rows.clicks, average};
    calls.push_back(client.WriteRows(table_id, rows.keys, table.core_floats(), in, &counts[r]));
    if (calls.size() >= kWriteBackInFlight) wait_oldest();
  }
  while (!calls.empty()) wait_oldest();  // every call is waited for, even after an error: counts outlive them
  *written = {};
  for (const auto& c : counts) {
    written->written += c.written;
    written->merged += c.merged;
  }
  return st;
}

Status GpuPsSync::BeginPass(data::Dataset& dataset, const StopRequest* stop) {
  const auto t0 = Clock::now();
  const std::optional<uint64_t> records = dataset.PassRecordsId();
  const bool reuse = records.has_value() && records == pass_keys_records_;
  if (reuse) {
    spdlog::info("trainer {} pass {}: begin_pass: the same records as the last pass: its {} keys", o_.trainer_id,
                 passes_ + 1, pass_keys_.size());
  } else {
    pass_keys_records_.reset();
    pass_keys_ = {};
    // Nothing else runs before the pass's training: every core may help (up to 16).
    const uint32_t threads = std::min(std::max(std::thread::hardware_concurrency(), 1u), 16u);
    ASSIGN_OR_RETURN(pass_keys_, CollectPassKeys(dataset, threads, stop));
    pass_keys_records_ = records;
    spdlog::info("trainer {} pass {}: begin_pass: {} distinct keys read from the dataset in {:.2f} s ({} threads)",
                 o_.trainer_id, passes_ + 1, pass_keys_.size(), Seconds(t0), threads);
  }
  const double collect = Seconds(t0);
  RETURN_IF_ERROR(BeginPassWithKeys(pass_keys_, stop));
  last_.collect_seconds = collect;
  last_.keys_reused = reuse;
  series_.collect.Set(collect);
  return Status::OK();
}

void GpuPsSync::SetMetrics(metrics::Registry& registry) {
  series_.passes = registry.GetCounter("fleetps_gpups_passes_total", "GPU-PS passes begun (begin_pass)");
  series_.keys = registry.GetGauge("fleetps_gpups_pass_keys", "Unique keys of the latest pass (its table's rows)");
  const std::string help =
      "Seconds of the latest pass's steps: collect (its keys from the dataset), pull "
      "(PullRows), build (the device table), write (end_pass: export and WriteRows)";
  series_.collect = registry.GetGauge("fleetps_gpups_pass_seconds", help, {{"step", "collect"}});
  series_.pull = registry.GetGauge("fleetps_gpups_pass_seconds", help, {{"step", "pull"}});
  series_.build = registry.GetGauge("fleetps_gpups_pass_seconds", help, {{"step", "build"}});
  series_.write = registry.GetGauge("fleetps_gpups_pass_seconds", help, {{"step", "write"}});
  const std::string rows =
      "Rows written back at end_pass: exact (no other trainer changed them meanwhile), or "
      "added (another trainer had: the pass's difference was merged)";
  series_.rows_exact = registry.GetCounter("fleetps_gpups_rows_written_total", rows, {{"merge", "exact"}});
  series_.rows_added = registry.GetCounter("fleetps_gpups_rows_written_total", rows, {{"merge", "added"}});
}

Status GpuPsSync::BeginPassWithKeys(std::span<const uint64_t> keys, const StopRequest* stop) {
  RETURN_IF_ERROR(CheckNotStopped(stop, "pulling the pass's rows"));
  ++passes_;
  last_ = PassStats{};
  last_.keys = keys.size();
  const uint32_t core = table_->core_floats();
  // Refused for memory before anything is pulled.
  RETURN_IF_ERROR(table_->CheckFits(keys).WithContext("begin_pass"));
  std::vector<float> rows(keys.size() * core);
  std::vector<uint8_t> flags(keys.size());
  const bool ctr = o_.sparse_table.accessor.kind == AccessorKind::kCtr;
  std::vector<float> stats(ctr ? keys.size() * 2 : 0);
  auto t0 = Clock::now();
  RETURN_IF_ERROR(
      client_.PullRows(o_.sparse_table.id, keys, core, {rows.data(), flags.data(), ctr ? stats.data() : nullptr})
          .get()
          .WithContext("begin_pass: pulling " + std::to_string(keys.size()) + " rows"));
  last_.pull_seconds = Seconds(t0);
  RETURN_IF_ERROR(CheckNotStopped(stop, "building the pass's table"));
  t0 = Clock::now();
  RETURN_IF_ERROR(table_->Build(keys, rows, flags, stats).WithContext("begin_pass"));
  last_.build_seconds = Seconds(t0);
  series_.passes.Increment();
  series_.keys.Set(static_cast<double>(keys.size()));
  series_.pull.Set(last_.pull_seconds);
  series_.build.Set(last_.build_seconds);
  spdlog::info(
      "trainer {} pass {}: begin_pass: {} keys, rows pulled in {:.2f} s ({:.0f} keys/s), {} table on {} "
      "device(s) built in {:.2f} s",
      o_.trainer_id, passes_, keys.size(), last_.pull_seconds, keys.size() / std::max(last_.pull_seconds, 1e-9),
      table_->device_name(), table_->devices(), last_.build_seconds);
  return Status::OK();
}

Status GpuPsSync::ApplyMerged(trainer::SparseMerge& m) {
  Status st = m.empty() ? Status::OK() : table_->Push(m.keys(), m.grads(), m.shows(), m.clicks());
  m.Clear();  // keeps its capacity for the next window
  return st;
}

Status GpuPsSync::EndPass() {
  const auto t0 = Clock::now();
  for (auto& m : merge_) RETURN_IF_ERROR(ApplyMerged(m).WithContext("end_pass: the last merged sparse gradients"));
  trainer::PsClient::RowsWritten written;
  RETURN_IF_ERROR(WritePassBack(*table_, client_, o_.sparse_table.id, o_.gpups.average_merge, kWriteBackRows, &written)
                      .WithContext("end_pass: writing the pass's " + std::to_string(table_->size()) + " rows back"));
  table_->Clear();
  last_.written = written.written;
  last_.merged = written.merged;
  last_.write_seconds = Seconds(t0);
  series_.write.Set(last_.write_seconds);
  series_.rows_exact.Increment(static_cast<double>(written.written));
  series_.rows_added.Increment(static_cast<double>(written.merged));
  spdlog::info(
      "trainer {} pass {}: end_pass: {} rows written back in {:.2f} s ({} exact, {} merged with another "
      "trainer's)",
      o_.trainer_id, passes_, written.written + written.merged, last_.write_seconds, written.written, written.merged);
  return Status::OK();
}

Status GpuPsSync::PullSparse(uint32_t, std::span<const uint64_t> keys, float* rows) {
  if (keys.empty()) return Status::OK();
  return table_->Pull(keys, rows);
}

Status GpuPsSync::DenseParams(uint32_t worker, std::vector<float>* params) {
  ASSIGN_OR_RETURN(auto view, DenseParamsView(worker));
  params->assign(view.begin(), view.end());
  return Status::OK();
}

Status GpuPsSync::CheckWorker(uint32_t worker) const {
  if (worker < merge_.size()) return Status::OK();
  return Status::InvalidArgument("GPU-PS: worker " + std::to_string(worker) + " has no device (" +
                                 std::to_string(merge_.size()) +
                                 " workers: fleetps.gpups.workers_per_device per device)");
}

uint32_t GpuPsSync::MergeWindow() const { return std::max<uint32_t>(o_.max_merge_steps, 1); }

StatusOr<std::span<const float>> GpuPsSync::DenseParamsView(uint32_t worker) {
  RETURN_IF_ERROR(CheckWorker(worker));
  return dense_->DenseParamsView(worker);
}

std::span<float> GpuPsSync::DenseGradsBuffer(uint32_t worker) { return dense_->GradsBuffer(worker); }

Status GpuPsSync::Push(uint32_t worker, const trainer::StepGrads& g) {
  RETURN_IF_ERROR(CheckWorker(worker));
  if (!g.keys.empty()) {
    const uint32_t dim = table_->dim();
    if (g.key_grads.size() != g.keys.size() * dim) {
      return Status::InvalidArgument("GPU-PS push: " + std::to_string(g.keys.size()) + " keys need " +
                                     std::to_string(g.keys.size() * dim) + " gradient floats, got " +
                                     std::to_string(g.key_grads.size()));
    }
    if (MergeWindow() == 1) {
      // One optimizer step per key of the batch, applied before this worker's next lookup
      // (the Trainer's prefetch waits for it): local training's rule.
      RETURN_IF_ERROR(table_->Push(g.keys, g.key_grads, g.shows, g.clicks));
      return dense_->Push(worker, g.dense_grads);
    }
    // Merging asked for (max_merge_steps > 1): summed per key over the window, in order.
    trainer::SparseMerge& m = merge_[worker];
    m.Add(g.keys, g.key_grads, g.shows, g.clicks);
    if (m.steps() >= MergeWindow()) RETURN_IF_ERROR(ApplyMerged(m));
  }
  return dense_->Push(worker, g.dense_grads);
}

bool PrefetchOn(const config::GpuPsOptions& options, uint32_t workers) {
  return options.prefetch.value_or(2 * uint64_t{workers} <= std::thread::hardware_concurrency());
}

bool GpuPsSync::NextPushUpdatesRows(uint32_t worker) const {
  return worker >= merge_.size() || merge_[worker].steps() + 1 >= MergeWindow();
}

StatusOr<bool> GpuPsSync::EndStep(uint32_t worker, bool out_of_data) {
  RETURN_IF_ERROR(CheckWorker(worker));
  return dense_->EndStep(worker, out_of_data);
}

Status GpuPsSync::Flush() {
  RETURN_IF_ERROR(EndPass());
  // Every process holds the same replica; rank 0's goes to the pservers' dense table with its
  // optimizer state, where evaluation and saving read them and a restart resumes them.
  if (comms_.front()->rank() == 0) {
    const trainer::PsClient::DenseState state = dense_->state();
    RETURN_IF_ERROR(
        client_.PushDenseParam(o_.dense_table.id, dense_->params(), &state).get().WithContext("dense replica"));
  }
  return Status::OK();
}

}  // namespace fleetps::heter
