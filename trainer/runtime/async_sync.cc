#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "trainer/runtime/param_sync.h"
#include "trainer/client/sparse_merge.h"
#include "trainer/runtime/sync_util.h"

namespace fleetps::trainer {
namespace {

using config::TrainerOptions;

// Steps are sent in windows of at most fleetps.max_merge_steps steps each, in the order they
// were pushed, one window at a time: with 1 (the default) every step is its own push, one
// optimizer step per key per batch on the pservers, as local training. With N > 1 a window
// takes up to N steps (those pushed while the one before is sent, or within a 2 ms wait),
// their sparse gradients summed per key and their dense ones averaged: one optimizer step for
// all of them.
class AsyncSync : public ParamSync, public Prefetching {
 public:
  AsyncSync(const TrainerOptions& o, PsClient& client, AsyncParts parts, PushQueueGauges gauges)
      : o_(o),
        client_(client),
        dim_(o.sparse_table.dim),
        sends_dense_(parts != AsyncParts::kSparseOnly),
        prefetch_(parts == AsyncParts::kBoth && AsyncPrefetchOn(o)),
        window_steps_(std::max<uint32_t>(o.max_merge_steps, 1)),
        gauges_(gauges) {
    PublishQueue();
    sender_ = std::thread([this] { SendLoop(); });
  }
  ~AsyncSync() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    sender_.join();
  }

  // Async mode (fleetps.prefetch): the next batch is prepared while a step trains. A Push
  // only queues the step for the sender, so the next pull need not wait for it.
  Prefetching* prefetching() override { return prefetch_ ? this : nullptr; }
  bool NextPushUpdatesRows(uint32_t) const override { return false; }

  Status PullSparse(uint32_t, std::span<const uint64_t> keys, float* rows) override {
    if (keys.empty()) return Status::OK();
    return client_.PullSparse(o_.sparse_table.id, keys, rows, PsClient::Keys::kDistinct).get();
  }

  Status DenseParams(uint32_t worker, std::vector<float>* params) override {
    ASSIGN_OR_RETURN(auto snapshot, DenseSnapshot(worker));
    *params = *snapshot;
    return Status::OK();
  }

  StatusOr<std::shared_ptr<const std::vector<float>>> DenseSnapshot(uint32_t) override {
    std::shared_ptr<const std::vector<float>> snapshot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      RETURN_IF_ERROR(error_);
      snapshot = snapshot_;
    }
    if (snapshot == nullptr) {  // first use: pull once
      auto fresh = std::make_shared<std::vector<float>>(o_.dense_table.dim);
      RETURN_IF_ERROR(client_.PullDense(o_.dense_table.id, *fresh).get());
      std::lock_guard<std::mutex> lock(mu_);
      if (snapshot_ == nullptr) snapshot_ = fresh;
      snapshot = snapshot_;
    }
    return snapshot;
  }

  Status Push(uint32_t, const StepGrads& step) override {
    const size_t dense_floats = sends_dense_ ? o_.dense_table.dim : 0;
    if (sends_dense_ && step.dense_grads.size() != dense_floats) {
      return Status::InvalidArgument("dense gradient has " + std::to_string(step.dense_grads.size()) +
                                     " floats, the dense table " + std::to_string(dense_floats));
    }
    std::unique_lock<std::mutex> lock(mu_);
    // Back-pressure: at most two windows' steps wait behind the one being sent.
    cv_.wait(lock, [this] { return waiting_steps_ < 2 * window_steps_ || !error_.ok(); });
    RETURN_IF_ERROR(error_);
    if (windows_.empty() || windows_.back().sparse.steps() >= window_steps_) {
      if (spare_.empty()) {
        windows_.emplace_back(dim_);
      } else {
        windows_.push_back(std::move(spare_.back()));
        spare_.pop_back();
      }
      windows_.back().dense.assign(dense_floats, 0.0f);
    }
    Window& w = windows_.back();
    const size_t keys_before = w.sparse.size();
    w.sparse.Add(step.keys, step.key_grads, step.shows, step.clicks);
    for (size_t j = 0; j < w.dense.size(); ++j) w.dense[j] += step.dense_grads[j];
    w.last = ++accepted_;
    ++waiting_steps_;
    waiting_keys_ += w.sparse.size() - keys_before;
    PublishQueue();
    lock.unlock();
    cv_.notify_all();
    return Status::OK();
  }

  Status Flush() override {
    std::unique_lock<std::mutex> lock(mu_);
    // Done when every step accepted so far has been sent: later pushes of other threads
    // (a heter-trainer serving other cpu-trainers) do not hold this flush.
    const uint64_t target = accepted_;
    if (target == flushed_) return Status::OK();  // nothing new since the last flush
    ++flushes_waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return sent_ >= target || !error_.ok(); });
    --flushes_waiting_;
    RETURN_IF_ERROR(error_);
    if (sends_dense_) {
      lock.unlock();
      auto fresh = std::make_shared<std::vector<float>>(o_.dense_table.dim);
      RETURN_IF_ERROR(client_.PullDense(o_.dense_table.id, *fresh).get());
      lock.lock();
      snapshot_ = fresh;
    }
    flushed_ = std::max(flushed_, target);
    return Status::OK();
  }

 private:
  // Steps merged into one send: sparse gradients (and show/click) summed per key in arrival
  // order, dense gradients summed (averaged when sent).
  struct Window {
    explicit Window(uint32_t dim) : sparse(dim) {}
    SparseMerge sparse;
    std::vector<float> dense;
    uint64_t last = 0;  // accepted_ after its latest step
  };

  // The gauges from the counters below; under mu_.
  void PublishQueue() {
    gauges_.steps.Set(static_cast<double>(accepted_ - sent_));
    gauges_.keys.Set(static_cast<double>(waiting_keys_ + sending_keys_));
  }

  void SendLoop() {
    uint64_t sends = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stopping_ || !windows_.empty(); });
      if (windows_.empty() || !error_.ok()) return;  // stopping
      // Send the oldest window when it is full (with max_merge_steps 1 at once), on flush, or
      // after a short wait for more steps.
      cv_.wait_for(lock, std::chrono::milliseconds(2), [this] {
        return stopping_ || flushes_waiting_ > 0 || windows_.size() > 1 ||
               windows_.front().sparse.steps() >= window_steps_;
      });
      // Take it; workers keep pushing into the windows behind it meanwhile.
      Window w = std::move(windows_.front());
      windows_.pop_front();
      waiting_steps_ -= w.sparse.steps();
      waiting_keys_ -= w.sparse.size();
      sending_keys_ = w.sparse.size();
      lock.unlock();
      cv_.notify_all();

      const float scale = 1.0f / static_cast<float>(w.sparse.steps());
      for (float& v : w.dense) v *= scale;  // dense: the average step
      PsClient::SparsePushOptions sparse_options;
      sparse_options.shows = w.sparse.shows();
      sparse_options.clicks = w.sparse.clicks();
      sparse_options.keys_are = PsClient::Keys::kDistinct;  // the window's keys
      auto sparse_done =
          w.sparse.empty() ? ReadyOk()
                           : client_.PushSparse(o_.sparse_table.id, w.sparse.keys(), w.sparse.grads(), sparse_options);
      auto dense_done = sends_dense_ ? client_.PushDense(o_.dense_table.id, w.dense) : ReadyOk();
      Status st = WaitBoth(sparse_done, dense_done);
      if (st.IsUnavailable()) {
        // The connection to a pserver dropped with the push in flight: the pserver died (it
        // restarts from its last checkpoint, so the updates since are lost anyway) or the
        // push was never delivered. Async training goes on; a pserver that stays away fails
        // the next pull.
        ++lost_pushes_;
        spdlog::warn("async communicator: a push was lost with its pserver connection ({} so far): {}", lost_pushes_,
                     st.ToString());
        st = Status::OK();
      } else if (st.IsInvalidArgument()) {
        // A pserver refused this push for what it holds (a gradient that overflowed when the
        // window's steps were summed, say): sent again it would be refused again. The window
        // is dropped, loudly, and the communicator goes on; a sticky error here would fail
        // every later step of every worker (of every cpu-trainer, on a heter-trainer) for
        // one bad window. Errors every later push would meet too stay sticky below.
        ++refused_pushes_;
        spdlog::error("async communicator: the pservers refused a push of {} step(s), dropped ({} refused so far): {}",
                      w.sparse.steps(), refused_pushes_, st.ToString());
        st = Status::OK();
      }
      std::shared_ptr<std::vector<float>> fresh;
      if (st.ok() && sends_dense_ && ++sends % o_.dense_pull_interval == 0) {
        fresh = std::make_shared<std::vector<float>>(o_.dense_table.dim);
        st = client_.PullDense(o_.dense_table.id, *fresh).get();
      }
      // Emptied for reuse, its buffers' capacity kept.
      w.sparse.Clear();

      lock.lock();
      sent_ = w.last;
      sending_keys_ = 0;
      if (spare_.size() < 3) spare_.push_back(std::move(w));
      PublishQueue();
      if (!st.ok() && error_.ok()) error_ = st.WithContext("async communicator");
      if (fresh != nullptr && st.ok()) snapshot_ = fresh;
      cv_.notify_all();
    }
  }

  const TrainerOptions& o_;
  PsClient& client_;
  const uint32_t dim_;
  const bool sends_dense_;       // false: a heter cpu-trainer's (the heter-trainers own the dense part)
  const bool prefetch_;          // async mode with helpers (fleetps.prefetch)
  const uint32_t window_steps_;  // max_merge_steps: steps a window takes at most

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<Window> windows_;  // not yet sent, oldest first; only the last takes more steps
  std::vector<Window> spare_;   // sent windows, emptied, for reuse
  uint32_t waiting_steps_ = 0;  // steps in windows_
  size_t waiting_keys_ = 0;     // keys in windows_ (a key counts once per window)
  uint64_t accepted_ = 0;       // steps pushed so far
  uint64_t sent_ = 0;           // of those, steps whose send completed
  uint64_t flushed_ = 0;        // steps covered by the latest completed Flush
  uint32_t flushes_waiting_ = 0;
  size_t sending_keys_ = 0;       // keys of the window being sent
  const PushQueueGauges gauges_;  // no-op handles when none were given
  bool stopping_ = false;
  Status error_;
  uint64_t lost_pushes_ = 0;                            // send thread only
  uint64_t refused_pushes_ = 0;                         // send thread only
  std::shared_ptr<const std::vector<float>> snapshot_;  // dense parameters read by workers
  std::thread sender_;
};

}  // namespace

std::unique_ptr<ParamSync> MakeAsyncSync(const TrainerOptions& options, PsClient& client, AsyncParts parts,
                                         PushQueueGauges queue) {
  return std::make_unique<AsyncSync>(options, client, parts, queue);
}

}  // namespace fleetps::trainer
