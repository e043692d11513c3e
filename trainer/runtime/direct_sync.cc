#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>

#include "trainer/runtime/param_sync.h"
#include "trainer/runtime/sync_util.h"

namespace fleetps::trainer {
namespace {

using config::SyncMode;
using config::TrainerOptions;

// Local and sync mode: pull sparse rows and the dense vector every step, push gradients and
// wait for the acknowledgement (param_sync.h).
class DirectSync : public ParamSync {
 public:
  DirectSync(const TrainerOptions& o, PsClient& client, uint32_t threads)
      : o_(o), client_(client), threads_(threads), participants_(o.trainers_num * threads), steps_(threads, 0) {}

  Status PullSparse(uint32_t, std::span<const uint64_t> keys, float* rows) override {
    if (keys.empty()) return Status::OK();
    return client_.PullSparse(o_.sparse_table.id, keys, rows, PsClient::Keys::kDistinct).get();
  }
  Status DenseParams(uint32_t, std::vector<float>* params) override {
    params->resize(o_.dense_table.dim);
    return client_.PullDense(o_.dense_table.id, *params).get();
  }
  Status Push(uint32_t worker, const StepGrads& g) override {
    PsClient::SparsePushOptions sparse_options;
    sparse_options.shows = g.shows;
    sparse_options.clicks = g.clicks;
    sparse_options.keys_are = PsClient::Keys::kDistinct;  // a de-duplicated batch
    auto sparse =
        g.keys.empty() ? ReadyOk() : client_.PushSparse(o_.sparse_table.id, g.keys, g.key_grads, sparse_options);
    if (!sync()) {
      auto dense = client_.PushDense(o_.dense_table.id, g.dense_grads);
      return WaitBoth(sparse, dense);
    }
    auto dense = client_.PushDense(o_.dense_table.id, g.dense_grads, SyncDense(worker));
    Status sparse_status = sparse.get();
    Status dense_status = dense.get();
    if (sparse_status.IsUnavailable()) {
      // The connection to a pserver dropped with the sparse push in flight: the pserver
      // died (it restarts from its last checkpoint, so the updates since are lost anyway) or
      // the push was never delivered. The dense push is numbered and re-sent, so the step
      // goes on; a pserver that stays away fails the next pull.
      ++lost_pushes_;
      spdlog::warn("sync step {}: a sparse push was lost with its pserver connection ({} so far): {}",
                   steps_[worker] + 1, lost_pushes_.load(), sparse_status.ToString());
      sparse_status = Status::OK();
    }
    return sparse_status.ok() ? dense_status : sparse_status;
  }
  StatusOr<bool> EndStep(uint32_t worker, bool out_of_data) override {
    if (!sync()) return out_of_data;
    if (out_of_data) {
      // A worker without data still completes the round's dense accumulation.
      std::vector<float> zeros(o_.dense_table.dim, 0.0f);
      RETURN_IF_ERROR(client_.PushDense(o_.dense_table.id, zeros, SyncDense(worker)).get());
    }
    ASSIGN_OR_RETURN(auto result, client_.Barrier("sync-step", o_.trainer_id * threads_ + worker, participants_,
                                                  std::chrono::milliseconds(o_.barrier_timeout_ms), {}, out_of_data));
    ++steps_[worker];
    return result.all_done;
  }
  Status Flush() override { return Status::OK(); }

 private:
  bool sync() const { return o_.sync_mode == SyncMode::kSync && !o_.local(); }
  // This worker's contribution to the step under way: every participant counts its steps
  // from 1 in lockstep (the barrier ends each one), so a pserver restarted from a checkpoint
  // falls back into step with the trainers (DenseTable::PushSync).
  PsClient::DensePushOptions SyncDense(uint32_t worker) const {
    PsClient::DensePushOptions options;
    options.sync_trainers = participants_;
    options.trainer_id = static_cast<int32_t>(o_.trainer_id * threads_ + worker);
    options.sync_step = steps_[worker] + 1;
    return options;
  }

  const TrainerOptions& o_;
  PsClient& client_;
  const uint32_t threads_;
  const uint32_t participants_;
  std::vector<uint64_t> steps_;  // per worker: sync steps completed
  std::atomic<uint64_t> lost_pushes_{0};
};

}  // namespace

std::unique_ptr<ParamSync> MakeDirectSync(const TrainerOptions& options, PsClient& client, uint32_t worker_threads) {
  return std::make_unique<DirectSync>(options, client, worker_threads);
}

}  // namespace fleetps::trainer
