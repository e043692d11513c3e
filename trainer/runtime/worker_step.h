#pragma once
// One training step of a worker thread, the part every stepping style shares
// (step_loop.h): the batch's activations (de-duplicated keys, sparse rows pulled, pooled),
// the dense forward/backward (on the Trainer's DenseNet, or on the mode's device), the
// embedding backward and the push. Heter mode computes the dense part remotely between
// Prepare and PushGrads.
// Thread-safety: a StepRunner is shared by the workers; each WorkerState is used by one
// thread at a time.

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/config/trainer_config.h"
#include "common/key_index.h"
#include "common/metrics/registry.h"
#include "common/status.h"
#include "trainer/data/batch.h"
#include "trainer/model/dense_net.h"
#include "trainer/model/embedding_pool.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::trainer {

class CollectiveSync;

// Seconds since `since`, for the step's times.
inline double SecondsSince(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Where a worker's time went, seconds (PassReport's fields of the same names).
struct StepTimes {
  double read = 0, pull = 0, dense = 0, push = 0, end_step = 0, prefetch_wait = 0;
  // Adds `other`'s times to these and zeroes them (a prepared slot's, into its worker's).
  void TakeFrom(StepTimes& other);
};

// Per-step buffers of a worker, reused from batch to batch.
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
  std::vector<float> shows;  // CTR tables: per unique key
  std::vector<float> clicks;
  std::vector<float> params;
  std::vector<float> param_grads;
  std::vector<float> predictions;  // a device's or a heter-trainer's (ws holds the DenseNet's)
  StepTimes times;
};

// A finished step: its mean loss and predictions (valid until the state's next step).
struct StepResult {
  float loss = 0;
  std::span<const float> predictions;
};

// Activations of `batch` into w.activations: pooled embeddings + dense features (models with
// sparse slots: `pool`), or the dense features (mlp: pool null, their width net's input).
// Pulls the batch's unique sparse rows through pull(keys, rows).
template <typename Pull>
Status BuildActivations(const model::EmbeddingPool* pool, const model::DenseNet& net, const data::Batch& batch,
                        WorkerState& w, Pull pull) {
  if (pool == nullptr) {
    if (batch.dense_dim != net.in_dim()) {
      return Status::InvalidArgument("the mlp model expects " + std::to_string(net.in_dim()) +
                                     " dense features per example, the data has " + std::to_string(batch.dense_dim));
    }
    w.activations.assign(batch.dense.begin(), batch.dense.end());
    return Status::OK();
  }
  w.views.clear();
  for (const auto& slot : batch.slots) w.views.push_back({slot.offsets, slot.ids});
  model::DedupKeys(w.views, &w.keys, &w.index, &w.dedup);
  w.rows.resize(w.keys.size() * pool->dim());
  RETURN_IF_ERROR(pull(w.keys, w.rows.data()));
  w.activations.resize(batch.size() * pool->output_dim());
  pool->Forward(w.views, w.index, w.rows, batch.dense, w.activations);
  return Status::OK();
}

class StepRunner {
 public:
  // All outlive the runner. `pool`: null for mlp. `overlap`: collective mode with
  // fleetps.collective.overlap (each layer's gradients go to the allreduce as soon as they
  // are final); else null. `pull_seconds` / `push_seconds`: the trainer's latency series.
  StepRunner(const config::TrainerOptions& options, const model::DenseNet& net, const model::EmbeddingPool* pool,
             ParamSync& sync, CollectiveSync* overlap, metrics::Histogram pull_seconds,
             metrics::Histogram push_seconds);
  const model::DenseNet& net() const { return net_; }

  // The first part of a step: the batch's activations, its sparse rows pulled.
  Status Prepare(uint32_t worker, const data::Batch& batch, WorkerState& w);
  // The rest of a prepared step: the dense part here (or on the mode's device), then PushGrads.
  StatusOr<StepResult> Finish(uint32_t worker, const data::Batch& batch, WorkerState& w);
  // Prepare, then Finish.
  StatusOr<StepResult> Step(uint32_t worker, const data::Batch& batch, WorkerState& w);
  // The end of every step: `activation_grads` back-propagated into the embeddings, the
  // batch's CTR counts (CTR tables), and the push of those and of `dense_grads` (empty where
  // the dense part is not this trainer's: heter mode).
  Status PushGrads(uint32_t worker, const data::Batch& batch, WorkerState& w, std::span<const float> activation_grads,
                   std::span<const float> dense_grads);

 private:
  const config::TrainerOptions& options_;
  const model::DenseNet& net_;
  const model::EmbeddingPool* const pool_;
  ParamSync& sync_;
  DeviceStepping* const device_;  // the mode's device stepping; null: net_ on the worker thread
  CollectiveSync* const overlap_;
  metrics::Histogram pull_seconds_, push_seconds_;
};

}  // namespace fleetps::trainer
