#include "trainer/runtime/param_sync.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/key_index.h"
#include "common/optimizer/optimizer.h"

namespace fleetps::trainer {
namespace {

using config::SyncMode;
using config::TrainerOptions;

Status Wait(std::future<Status>& a, std::future<Status>& b) {
  Status sa = a.get();
  Status sb = b.get();
  return sa.ok() ? sb : sa;
}

std::future<Status> Ready() {
  std::promise<Status> p;
  p.set_value(Status::OK());
  return p.get_future();
}

// ---- Direct: local and sync mode --------------------------------------------------------

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
    auto sparse = g.keys.empty() ? Ready() : client_.PushSparse(o_.sparse_table.id, g.keys, g.key_grads, sparse_options);
    if (!sync()) {
      auto dense = client_.PushDense(o_.dense_table.id, g.dense_grads);
      return Wait(sparse, dense);
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

// ---- Async: background communicator ----------------------------------------------------

// Which tables an AsyncSync sends: both (async mode), or one side of heter mode.
enum class AsyncParts : uint8_t { kBoth, kSparseOnly, kDenseOnly };  // kDenseOnly: pushes carry no keys

// Steps are sent in windows of at most fleetps.max_merge_steps steps each, in the order they
// were pushed, one window at a time: with 1 (the default) every step is its own push, one
// optimizer step per key per batch on the pservers, as local training. With N > 1 a window
// takes up to N steps (those pushed while the one before is sent, or within a 2 ms wait),
// their sparse gradients summed per key and their dense ones averaged: one optimizer step for
// all of them.
class AsyncSync : public ParamSync {
 public:
  AsyncSync(const TrainerOptions& o, PsClient& client, AsyncParts parts)
      : o_(o),
        client_(client),
        dim_(o.sparse_table.dim),
        sends_dense_(parts != AsyncParts::kSparseOnly),
        prefetch_(parts == AsyncParts::kBoth && AsyncPrefetchOn(o)),
        window_steps_(std::max<uint32_t>(o.max_merge_steps, 1)) {
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
  bool prefetch() const override { return prefetch_; }
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
    if (windows_.empty() || windows_.back().steps >= window_steps_) {
      if (spare_.empty()) {
        windows_.emplace_back();
      } else {
        windows_.push_back(std::move(spare_.back()));
        spare_.pop_back();
      }
      windows_.back().dense.assign(dense_floats, 0.0f);
    }
    Window& w = windows_.back();
    const size_t keys_before = w.keys.size();
    const bool stats = !step.shows.empty();
    rows_.resize(step.keys.size());
    w.keys.InsertAll(step.keys, rows_.data());
    w.grads.resize(w.keys.size() * dim_, 0.0f);
    if (stats) {
      w.shows.resize(w.keys.size(), 0.0f);
      w.clicks.resize(w.keys.size(), 0.0f);
    }
    for (size_t i = 0; i < step.keys.size(); ++i) {
      const float* g = step.key_grads.data() + i * dim_;
      float* acc = w.grads.data() + size_t{rows_[i]} * dim_;
      for (uint32_t j = 0; j < dim_; ++j) acc[j] += g[j];
      if (stats) {
        w.shows[rows_[i]] += step.shows[i];
        w.clicks[rows_[i]] += step.clicks[i];
      }
    }
    for (size_t j = 0; j < w.dense.size(); ++j) w.dense[j] += step.dense_grads[j];
    ++w.steps;
    w.last = ++accepted_;
    ++waiting_steps_;
    waiting_keys_ += w.keys.size() - keys_before;
    PublishQueue();
    lock.unlock();
    cv_.notify_all();
    return Status::OK();
  }

  void SetPushQueueGauges(PushQueueGauges gauges) override {
    std::lock_guard<std::mutex> lock(mu_);
    gauges_ = gauges;
    PublishQueue();
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
    KeyIndex keys;  // -> row in grads
    std::vector<float> grads;
    std::vector<float> shows;  // CTR tables: per key
    std::vector<float> clicks;
    std::vector<float> dense;
    uint32_t steps = 0;
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
        return stopping_ || flushes_waiting_ > 0 || windows_.size() > 1 || windows_.front().steps >= window_steps_;
      });
      // Take it; workers keep pushing into the windows behind it meanwhile.
      Window w = std::move(windows_.front());
      windows_.pop_front();
      waiting_steps_ -= w.steps;
      waiting_keys_ -= w.keys.size();
      sending_keys_ = w.keys.size();
      lock.unlock();
      cv_.notify_all();

      const float scale = 1.0f / static_cast<float>(w.steps);
      for (float& v : w.dense) v *= scale;  // dense: the average step
      PsClient::SparsePushOptions sparse_options;
      sparse_options.shows = w.shows;
      sparse_options.clicks = w.clicks;
      sparse_options.keys_are = PsClient::Keys::kDistinct;  // the window's keys
      auto sparse_done =
          w.keys.empty() ? Ready() : client_.PushSparse(o_.sparse_table.id, w.keys.keys(), w.grads, sparse_options);
      auto dense_done = sends_dense_ ? client_.PushDense(o_.dense_table.id, w.dense) : Ready();
      Status st = Wait(sparse_done, dense_done);
      if (st.IsUnavailable()) {
        // The connection to a pserver dropped with the push in flight: the pserver died (it
        // restarts from its last checkpoint, so the updates since are lost anyway) or the
        // push was never delivered. Async training goes on; a pserver that stays away fails
        // the next pull.
        ++lost_pushes_;
        spdlog::warn("async communicator: a push was lost with its pserver connection ({} so far): {}",
                     lost_pushes_, st.ToString());
        st = Status::OK();
      } else if (st.IsInvalidArgument()) {
        // A pserver refused this push for what it holds (a gradient that overflowed when the
        // window's steps were summed, say): sent again it would be refused again. The window
        // is dropped, loudly, and the communicator goes on; a sticky error here would fail
        // every later step of every worker (of every cpu-trainer, on a heter-trainer) for
        // one bad window. Errors every later push would meet too stay sticky below.
        ++refused_pushes_;
        spdlog::error("async communicator: the pservers refused a push of {} step(s), dropped ({} refused so far): {}",
                      w.steps, refused_pushes_, st.ToString());
        st = Status::OK();
      }
      std::shared_ptr<std::vector<float>> fresh;
      if (st.ok() && sends_dense_ && ++sends % o_.dense_pull_interval == 0) {
        fresh = std::make_shared<std::vector<float>>(o_.dense_table.dim);
        st = client_.PullDense(o_.dense_table.id, *fresh).get();
      }
      // Emptied for reuse, its buffers' capacity kept.
      w.keys.Clear();
      w.grads.clear();
      w.shows.clear();
      w.clicks.clear();
      w.steps = 0;

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
  const bool sends_dense_;  // false: a heter cpu-trainer's (the heter-trainers own the dense part)
  const bool prefetch_;     // async mode with helpers (fleetps.prefetch)
  const uint32_t window_steps_;  // max_merge_steps: steps a window takes at most

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<Window> windows_;  // not yet sent, oldest first; only the last takes more steps
  std::vector<Window> spare_;   // sent windows, emptied, for reuse
  std::vector<uint32_t> rows_;  // Push's scratch: row of each key of the step
  uint32_t waiting_steps_ = 0;  // steps in windows_
  size_t waiting_keys_ = 0;     // keys in windows_ (a key counts once per window)
  uint64_t accepted_ = 0;  // steps pushed so far
  uint64_t sent_ = 0;      // of those, steps whose send completed
  uint64_t flushed_ = 0;   // steps covered by the latest completed Flush
  uint32_t flushes_waiting_ = 0;
  size_t sending_keys_ = 0;  // keys of the window being sent
  PushQueueGauges gauges_;   // no-op handles until SetPushQueueGauges
  bool stopping_ = false;
  Status error_;
  uint64_t lost_pushes_ = 0;     // send thread only
  uint64_t refused_pushes_ = 0;  // send thread only
  std::shared_ptr<const std::vector<float>> snapshot_;  // dense parameters read by workers
  std::thread sender_;
};

// ---- GEO: local copies, periodic delta exchange ---------------------------------------

class GeoSync : public ParamSync {
 public:
  static StatusOr<std::unique_ptr<GeoSync>> Create(const TrainerOptions& o, PsClient& client) {
    ASSIGN_OR_RETURN(auto sparse_opt, optimizer::CreateOptimizer(o.sparse_table.optimizer));
    ASSIGN_OR_RETURN(auto dense_opt, optimizer::CreateOptimizer(o.dense_table.optimizer));
    return std::unique_ptr<GeoSync>(new GeoSync(o, client, std::move(sparse_opt), std::move(dense_opt)));
  }

  Status PullSparse(uint32_t, std::span<const uint64_t> keys, float* rows) override {
    // Cache rows never move to another number, so the numbers found here stay valid.
    std::vector<uint32_t> cached(keys.size());
    std::vector<size_t> missing;  // positions in keys
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < keys.size(); ++i) {
        cached[i] = index_.Find(keys[i]);
        if (cached[i] == KeyIndex::kNone) missing.push_back(i);
      }
    }
    if (!missing.empty()) {
      std::vector<uint64_t> missing_keys;
      missing_keys.reserve(missing.size());
      for (size_t i : missing) missing_keys.push_back(keys[i]);
      std::vector<float> fresh(missing.size() * dim_);
      RETURN_IF_ERROR(client_.PullSparse(o_.sparse_table.id, missing_keys, fresh.data()).get());
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t m = 0; m < missing.size(); ++m) {
        uint32_t& r = cached[missing[m]];
        r = index_.Find(missing_keys[m]);
        if (r != KeyIndex::kNone) continue;  // another worker cached it meanwhile
        r = index_.Insert(missing_keys[m]);
        arena_.resize(arena_.size() + stride_);
        shows_.push_back(0.0f);
        clicks_.push_back(0.0f);
        touched_.push_back(false);
        std::copy_n(fresh.begin() + m * dim_, dim_, Value(r));
        std::copy_n(fresh.begin() + m * dim_, dim_, Base(r));
        sparse_opt_->InitState(State(r), dim_);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) std::copy_n(Value(cached[i]), dim_, rows + i * dim_);
    return Status::OK();
  }

  Status DenseParams(uint32_t, std::vector<float>* params) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (dense_.value.empty()) {
      dense_.value.resize(o_.dense_table.dim);
      RETURN_IF_ERROR(client_.PullDense(o_.dense_table.id, dense_.value).get());
      dense_.base = dense_.value;
      dense_.state.resize(dense_opt_->StateSize(static_cast<uint32_t>(o_.dense_table.dim)));
      dense_opt_->InitState(dense_.state.data(), static_cast<uint32_t>(o_.dense_table.dim));
    }
    *params = dense_.value;
    return Status::OK();
  }

  Status Push(uint32_t, const StepGrads& step) override {
    bool exchange_due = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < step.keys.size(); ++i) {
        const uint32_t r = index_.Find(step.keys[i]);
        if (r == KeyIndex::kNone) {
          return Status::Internal("GEO push of key " + std::to_string(step.keys[i]) + " that was never pulled");
        }
        sparse_opt_->Update(Value(r), State(r), step.key_grads.data() + i * dim_, dim_);
        if (!step.shows.empty()) {
          shows_[r] += step.shows[i];
          clicks_[r] += step.clicks[i];
        }
        if (!touched_[r]) {
          touched_[r] = true;
          touched_rows_.push_back(r);
        }
      }
      dense_opt_->Update(dense_.value.data(), dense_.state.data(), step.dense_grads.data(),
                         static_cast<uint32_t>(step.dense_grads.size()));
      exchange_due = ++steps_ % o_.geo_step == 0;
    }
    if (!exchange_due) return Status::OK();
    // One exchange at a time; a worker finding one under way goes on training (its steps
    // are in the next exchange).
    std::unique_lock<std::mutex> exchanging(exchange_mu_, std::try_to_lock);
    if (!exchanging.owns_lock()) return Status::OK();
    return Exchange();
  }

  Status Flush() override {
    std::lock_guard<std::mutex> exchanging(exchange_mu_);
    return Exchange();
  }

 private:
  struct DenseCopy {
    std::vector<float> value;  // local copy being trained
    std::vector<float> base;   // the part of value the servers already have
    std::vector<float> state;  // local optimizer state
  };

  GeoSync(const TrainerOptions& o, PsClient& client, std::unique_ptr<optimizer::Optimizer> sparse_opt,
          std::unique_ptr<optimizer::Optimizer> dense_opt)
      : o_(o),
        client_(client),
        dim_(o.sparse_table.dim),
        sparse_opt_(std::move(sparse_opt)),
        dense_opt_(std::move(dense_opt)),
        stride_(2 * size_t{dim_} + sparse_opt_->StateSize(dim_)) {}

  // Row r of the cache: value (the local copy being trained), base (the part of value the
  // servers already have), optimizer state. Pointers are valid until the next insert.
  float* Value(uint32_t r) { return arena_.data() + r * stride_; }
  float* Base(uint32_t r) { return Value(r) + dim_; }
  float* State(uint32_t r) { return Value(r) + 2 * size_t{dim_}; }

  // Pushes (value - base) / trainers for every row touched since the last exchange and
  // for the dense vector, then refreshes those copies from the servers. The network round
  // trip runs without mu_, so the other workers keep training: the progress they make on a
  // row meanwhile (value - base, base having moved to value at the snapshot) is kept on
  // top of the refreshed value and pushed by the next exchange. Caller holds exchange_mu_.
  Status Exchange() {
    const float scale = 1.0f / static_cast<float>(o_.trainers_num);
    const bool stats = o_.sparse_table.accessor.kind == AccessorKind::kCtr;
    std::vector<uint32_t> rows;
    std::vector<uint64_t> keys;
    std::vector<float> deltas, shows, clicks, dense_delta;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rows.swap(touched_rows_);
      keys.reserve(rows.size());
      deltas.resize(rows.size() * dim_);
      for (size_t i = 0; i < rows.size(); ++i) {
        const uint32_t r = rows[i];
        touched_[r] = false;
        keys.push_back(index_.keys()[r]);
        float* value = Value(r);
        float* base = Base(r);
        for (uint32_t j = 0; j < dim_; ++j) deltas[i * dim_ + j] = (value[j] - base[j]) * scale;
        std::copy_n(value, dim_, base);
        if (stats) {
          shows.push_back(std::exchange(shows_[r], 0.0f));
          clicks.push_back(std::exchange(clicks_[r], 0.0f));
        }
      }
      if (!dense_.value.empty()) {
        dense_delta.resize(dense_.value.size());
        for (size_t j = 0; j < dense_delta.size(); ++j) dense_delta[j] = (dense_.value[j] - dense_.base[j]) * scale;
        dense_.base = dense_.value;
      }
    }
    std::future<Status> sparse_done = Ready();
    if (!keys.empty()) {
      PsClient::SparsePushOptions opts;
      opts.delta = true;
      opts.shows = shows;
      opts.clicks = clicks;
      sparse_done = client_.PushSparse(o_.sparse_table.id, keys, deltas, opts);
    }
    std::future<Status> dense_done = Ready();
    if (!dense_delta.empty()) {
      PsClient::DensePushOptions opts;
      opts.delta = true;
      dense_done = client_.PushDense(o_.dense_table.id, dense_delta, opts);
    }
    Status pushed = Wait(sparse_done, dense_done);
    if (pushed.IsUnavailable()) {
      // The connection to a pserver dropped with the deltas in flight: the pserver died (it
      // restarts from its last checkpoint, so the updates since are lost anyway) or they
      // were never delivered. The refresh below re-bases on what the servers hold now; a
      // pserver that stays away fails it.
      ++lost_exchanges_;
      spdlog::warn("GEO exchange: deltas were lost with a pserver connection ({} so far): {}", lost_exchanges_,
                   pushed.ToString());
      pushed = Status::OK();
    }
    RETURN_IF_ERROR(pushed.WithContext("GEO exchange"));
    // Refresh: the servers now hold every trainer's contributions.
    std::vector<float> fresh(keys.size() * dim_), fresh_dense(dense_delta.size());
    if (!keys.empty()) RETURN_IF_ERROR(client_.PullSparse(o_.sparse_table.id, keys, fresh.data()).get());
    if (!fresh_dense.empty()) RETURN_IF_ERROR(client_.PullDense(o_.dense_table.id, fresh_dense).get());
    std::lock_guard<std::mutex> lock(mu_);
    const auto rebase = [](float* value, float* base, const float* server, size_t n) {
      for (size_t j = 0; j < n; ++j) {
        value[j] = server[j] + (value[j] - base[j]);
        base[j] = server[j];
      }
    };
    for (size_t i = 0; i < rows.size(); ++i) rebase(Value(rows[i]), Base(rows[i]), fresh.data() + i * dim_, dim_);
    if (!fresh_dense.empty()) {
      rebase(dense_.value.data(), dense_.base.data(), fresh_dense.data(), fresh_dense.size());
    }
    return Status::OK();
  }

  const TrainerOptions& o_;
  PsClient& client_;
  const uint32_t dim_;
  const std::unique_ptr<optimizer::Optimizer> sparse_opt_;
  const std::unique_ptr<optimizer::Optimizer> dense_opt_;
  const size_t stride_;  // floats per cached row: value, base, state

  std::mutex exchange_mu_;  // held by the worker running an exchange
  uint64_t lost_exchanges_ = 0;  // guarded by exchange_mu_
  std::mutex mu_;           // guards everything below
  KeyIndex index_;          // cached key -> row
  std::vector<float> arena_;           // rows, stride_ floats each
  std::vector<float> shows_, clicks_;  // per row: CTR statistics not yet pushed
  std::vector<bool> touched_;          // per row: in touched_rows_
  std::vector<uint32_t> touched_rows_; // rows trained since the last exchange
  DenseCopy dense_;
  uint64_t steps_ = 0;
};

}  // namespace

bool AsyncPrefetchOn(const TrainerOptions& o) {
  return o.prefetch.value_or(2 * uint64_t{std::max<uint32_t>(o.worker_threads, 1)} <=
                             std::thread::hardware_concurrency());
}

StatusOr<std::unique_ptr<ParamSync>> MakeParamSync(const TrainerOptions& options, PsClient& client,
                                                  uint32_t worker_threads) {
  if (options.local() || options.sync_mode == SyncMode::kSync) {
    return std::unique_ptr<ParamSync>(new DirectSync(options, client, worker_threads));
  }
  if (options.sync_mode == SyncMode::kAsync) {
    return std::unique_ptr<ParamSync>(new AsyncSync(options, client, AsyncParts::kBoth));
  }
  if (options.sync_mode == SyncMode::kHeter) return MakeSparseAsyncSync(options, client);
  if (options.sync_mode == SyncMode::kCollective) {
    return Status::InvalidArgument("collective mode's ParamSync is a CollectiveSync (it needs the communicator)");
  }
  ASSIGN_OR_RETURN(auto geo, GeoSync::Create(options, client));
  return std::unique_ptr<ParamSync>(std::move(geo));
}

std::unique_ptr<ParamSync> MakeHeterDenseSync(const TrainerOptions& options, PsClient& client) {
  return std::unique_ptr<ParamSync>(new AsyncSync(options, client, AsyncParts::kDenseOnly));
}

std::unique_ptr<ParamSync> MakeSparseAsyncSync(const TrainerOptions& options, PsClient& client) {
  return std::unique_ptr<ParamSync>(new AsyncSync(options, client, AsyncParts::kSparseOnly));
}

StatusOr<uint64_t> InitDenseParams(PsClient& client, uint32_t table_id, std::string_view who, bool adopt,
                                   std::vector<float>* params, PsClient::DenseState* state) {
  auto kept = client.InitDenseParam(table_id, *params);
  if (!kept.ok()) return kept.status().WithContext("the initial dense parameters");
  if (*kept == 0) return kept;
  if (*kept < params->size()) {
    spdlog::warn("{}: {} of the dense table's {} floats kept the pservers' parameters, the others were initialized: "
                 "the pservers were not all loaded from the same checkpoint",
                 who, *kept, params->size());
  } else {
    spdlog::info("{}: the pservers' dense table already holds parameters (loaded from a checkpoint, or set by an "
                 "earlier {}): kept, not initialized",
                 who, who);
  }
  if (adopt) {
    RETURN_IF_ERROR(client.PullDense(table_id, *params, state).get().WithContext("the pservers' dense parameters"));
    spdlog::info("{}: the dense replicas start from the pservers' dense table{}", who,
                 state != nullptr ? " and its optimizer state" : "");
  }
  return kept;
}

StatusOr<PsClient::DenseState> FreshDenseState(const OptimizerOptions& rule, size_t params) {
  RETURN_IF_ERROR(optimizer::ValidateOptimizerOptions(rule).WithContext("dense optimizer"));
  ASSIGN_OR_RETURN(auto opt, optimizer::CreateOptimizer(rule));
  PsClient::DenseState state;
  state.element.assign(params * opt->element_state_size(), 0.0f);
  state.shared.assign(opt->shared_state_size(), 0.0f);
  opt->InitSpanState(state.element.data(), state.shared.data(), params);
  return state;
}

std::vector<float> PackDenseState(std::span<const float> params, const PsClient::DenseState& state) {
  std::vector<float> packed(params.begin(), params.end());
  packed.insert(packed.end(), state.element.begin(), state.element.end());
  packed.insert(packed.end(), state.shared.begin(), state.shared.end());
  return packed;
}

void UnpackDenseState(std::span<const float> packed, std::vector<float>* params, PsClient::DenseState* state) {
  auto at = packed.begin();
  for (std::vector<float>* v : {params, &state->element, &state->shared}) {
    std::copy_n(at, v->size(), v->begin());
    at += static_cast<std::ptrdiff_t>(v->size());
  }
}

std::string DenseChecksum(std::span<const float> params) {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const uint8_t*>(params.data());
  for (size_t i = 0; i < params.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

StatusOr<std::shared_ptr<const std::vector<float>>> ParamSync::DenseSnapshot(uint32_t worker) {
  auto params = std::make_shared<std::vector<float>>();
  RETURN_IF_ERROR(DenseParams(worker, params.get()));
  return std::shared_ptr<const std::vector<float>>(std::move(params));
}

}  // namespace fleetps::trainer
