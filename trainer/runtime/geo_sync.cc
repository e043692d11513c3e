#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "common/key_index.h"
#include "common/optimizer/optimizer.h"
#include "trainer/runtime/param_sync.h"
#include "trainer/runtime/sync_util.h"

namespace fleetps::trainer {
namespace {

using config::TrainerOptions;

// GEO: local copies, periodic delta exchange (param_sync.h).
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
    std::future<Status> sparse_done = ReadyOk();
    if (!keys.empty()) {
      PsClient::SparsePushOptions opts;
      opts.delta = true;
      opts.shows = shows;
      opts.clicks = clicks;
      sparse_done = client_.PushSparse(o_.sparse_table.id, keys, deltas, opts);
    }
    std::future<Status> dense_done = ReadyOk();
    if (!dense_delta.empty()) {
      PsClient::DensePushOptions opts;
      opts.delta = true;
      dense_done = client_.PushDense(o_.dense_table.id, dense_delta, opts);
    }
    Status pushed = WaitBoth(sparse_done, dense_done);
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

  std::mutex exchange_mu_;              // held by the worker running an exchange
  uint64_t lost_exchanges_ = 0;         // guarded by exchange_mu_
  std::mutex mu_;                       // guards everything below
  KeyIndex index_;                      // cached key -> row
  std::vector<float> arena_;            // rows, stride_ floats each
  std::vector<float> shows_, clicks_;   // per row: CTR statistics not yet pushed
  std::vector<bool> touched_;           // per row: in touched_rows_
  std::vector<uint32_t> touched_rows_;  // rows trained since the last exchange
  DenseCopy dense_;
  uint64_t steps_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<ParamSync>> MakeGeoSync(const TrainerOptions& options, PsClient& client) {
  ASSIGN_OR_RETURN(auto geo, GeoSync::Create(options, client));
  return std::unique_ptr<ParamSync>(std::move(geo));
}

}  // namespace fleetps::trainer
