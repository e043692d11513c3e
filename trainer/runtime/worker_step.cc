#include "trainer/runtime/worker_step.h"

#include <chrono>

#include "trainer/runtime/collective_sync.h"

namespace fleetps::trainer {

using Clock = std::chrono::steady_clock;

namespace {

// CTR statistics of the batch's unique keys: occurrences, and occurrences in clicked
// examples (the show/click counts Paddle's CtrCommonAccessor keeps); the click is the first
// of the `labels` labels per row.
void CountShowsClicks(const data::Batch& batch, size_t labels, WorkerState& w) {
  w.shows.assign(w.keys.size(), 0.0f);
  w.clicks.assign(w.keys.size(), 0.0f);
  size_t pos = 0;  // position in the concatenated ids of all slots (DedupKeys' index)
  for (const auto& slot : batch.slots) {
    for (size_t row = 0; row + 1 < slot.offsets.size(); ++row) {
      for (uint32_t k = slot.offsets[row]; k < slot.offsets[row + 1]; ++k, ++pos) {
        w.shows[w.index[pos]] += 1.0f;
        w.clicks[w.index[pos]] += batch.labels[row * labels];
      }
    }
  }
}

}  // namespace

void StepTimes::TakeFrom(StepTimes& other) {
  for (auto field : {&StepTimes::read, &StepTimes::pull, &StepTimes::dense, &StepTimes::push, &StepTimes::end_step,
                     &StepTimes::prefetch_wait}) {
    this->*field += other.*field;
    other.*field = 0;
  }
}

StepRunner::StepRunner(const config::TrainerOptions& options, const model::DenseNet& net,
                       const model::EmbeddingPool* pool, ParamSync& sync, CollectiveSync* overlap,
                       metrics::Histogram pull_seconds, metrics::Histogram push_seconds)
    : options_(options),
      net_(net),
      pool_(pool),
      sync_(sync),
      device_(sync.device_stepping()),
      overlap_(overlap),
      pull_seconds_(std::move(pull_seconds)),
      push_seconds_(std::move(push_seconds)) {}

Status StepRunner::Prepare(uint32_t worker, const data::Batch& batch, WorkerState& w) {
  return BuildActivations(pool_, net_, batch, w, [&](std::span<const uint64_t> keys, float* rows) {
    const auto t0 = Clock::now();
    Status st = sync_.PullSparse(worker, keys, rows);
    const double seconds = SecondsSince(t0);
    pull_seconds_.Observe(seconds);
    w.times.pull += seconds;
    return st;
  });
}

StatusOr<StepResult> StepRunner::Step(uint32_t worker, const data::Batch& batch, WorkerState& w) {
  RETURN_IF_ERROR(Prepare(worker, batch, w));
  return Finish(worker, batch, w);
}

StatusOr<StepResult> StepRunner::Finish(uint32_t worker, const data::Batch& batch, WorkerState& w) {
  const size_t b = batch.size();
  w.activation_grads.resize(pool_ ? w.activations.size() : 0);
  StepResult result;
  if (device_ != nullptr) {  // GPU-PS: the worker's device, the node's replica in place
    ASSIGN_OR_RETURN(const std::span<const float> params, device_->DenseParamsView(worker));
    const std::span<float> param_grads = device_->DenseGradsBuffer(worker);
    w.predictions.resize(b * net_.num_outputs());
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(result.loss, device_->stepper(worker).Step(params, w.activations, batch.labels, b, w.predictions,
                                                                w.activation_grads, param_grads));
    w.times.dense += SecondsSince(t0);
    result.predictions = w.predictions;
    RETURN_IF_ERROR(PushGrads(worker, batch, w, w.activation_grads, param_grads));
    return result;
  }
  RETURN_IF_ERROR(sync_.DenseParams(worker, &w.params));
  w.param_grads.resize(net_.num_params());
  model::DenseNet::GradsReady ready;
  if (overlap_ != nullptr) {
    ready = [&](size_t begin, size_t end) { overlap_->GradsReady(w.param_grads, begin, end); };
  }
  const auto t0 = Clock::now();
  result.loss =
      net_.ForwardBackward(w.params, w.activations, batch.labels, b, w.param_grads, w.activation_grads, &w.ws, ready);
  w.times.dense += SecondsSince(t0);
  result.predictions = w.ws.predictions();
  RETURN_IF_ERROR(PushGrads(worker, batch, w, w.activation_grads, w.param_grads));
  return result;
}

Status StepRunner::PushGrads(uint32_t worker, const data::Batch& batch, WorkerState& w,
                             std::span<const float> activation_grads, std::span<const float> dense_grads) {
  w.shows.clear();
  w.clicks.clear();
  if (pool_) {
    w.key_grads.resize(w.keys.size() * pool_->dim());
    pool_->Backward(w.views, w.index, w.rows, activation_grads, w.key_grads);
    if (options_.sparse_table.accessor.kind == AccessorKind::kCtr) CountShowsClicks(batch, net_.num_labels(), w);
  } else {
    w.keys.clear();
    w.key_grads.clear();
  }
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(sync_.Push(worker, StepGrads{w.keys, w.key_grads, w.shows, w.clicks, dense_grads}));
  const double seconds = SecondsSince(t0);
  push_seconds_.Observe(seconds);
  w.times.push += seconds;
  return Status::OK();
}

}  // namespace fleetps::trainer
