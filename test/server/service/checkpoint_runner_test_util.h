#pragma once
// The fixtures of checkpoint_test's CheckpointRunner cases: in-process servers (TableSets with
// their own executor pools) sharing one checkpoint directory like pservers on one machine,
// their training, saving and rows.
#include "server/service/checkpoint_runner.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/sharding.h"
#include "server/checkpoint/checkpoint_dir.h"
#include "server/checkpoint/dir_lock.h"
#include "test/support/process.h"

namespace fleetps::server::checkpoint_testing {

using RowMap = std::map<uint64_t, std::vector<float>>;
constexpr uint32_t kSparse = 0, kDense = 1, kCtr = 2;

struct Layout {
  uint32_t shards = 4;
  uint64_t budget = 0;  // sparse memory budget (0: all in RAM)
  uint32_t sparse_dim = 6;
};

inline config::ServerOptions Options(uint32_t index, uint32_t servers, const Layout& layout,
                                     const std::string& data_dir) {
  config::ServerOptions o;
  for (uint32_t s = 0; s < servers; ++s) o.endpoints.push_back({"127.0.0.1", static_cast<uint16_t>(9000 + s)});
  o.index = index;
  o.data_dir = data_dir;
  TableOptions sparse;
  sparse.id = kSparse;
  sparse.name = "emb";
  sparse.dim = layout.sparse_dim;
  sparse.shards = layout.shards;
  sparse.optimizer.kind = OptimizerKind::kAdam;
  sparse.optimizer.learning_rate = 0.01f;
  sparse.initializer.seed = 5;
  sparse.memory_budget_bytes = layout.budget;
  TableOptions dense;
  dense.id = kDense;
  dense.name = "dense";
  dense.kind = TableKind::kDense;
  dense.dim = 1000;
  dense.optimizer.kind = OptimizerKind::kAdam;
  TableOptions ctr = sparse;
  ctr.id = kCtr;
  ctr.name = "ctr";
  ctr.dim = 4;
  ctr.optimizer.kind = OptimizerKind::kAdagrad;
  ctr.accessor.kind = AccessorKind::kCtr;
  ctr.accessor.embedx_threshold = 3.0f;
  o.tables = {sparse, dense, ctr};
  return o;
}

class Server {
 public:
  Server(uint32_t index, uint32_t servers, const Layout& layout = {})
      : options_(Options(index, servers, layout, testing::MakeTempDir("data"))), pool_(2) {
    auto tables = TableSet::Create(options_);
    REQUIRE(tables.ok());
    tables_ = std::move(tables).value();
    runner_ = std::make_unique<CheckpointRunner>(
        *tables_, pool_, [](uint32_t t, uint32_t s) { return size_t{t} * 7 + s; },
        [](uint32_t t) { return size_t{t} * 7 + 3; }, index, servers, "test");
  }
  ~Server() { pool_.Stop(); }

  TableSet& tables() { return *tables_; }
  uint32_t index() const { return options_.index; }

  StatusOr<SaveOutcome> SavePart(const std::string& dir, const std::string& version, disk::SaveMode mode,
                                 std::optional<uint32_t> table = std::nullopt) {
    std::promise<StatusOr<SaveOutcome>> p;
    runner_->SavePart(SaveSpec{dir, version, mode, table}, [&](StatusOr<SaveOutcome> r) { p.set_value(r); });
    return p.get_future().get();
  }
  StatusOr<SaveOutcome> Commit(const std::string& dir, const std::string& version, disk::SaveMode mode) {
    std::promise<StatusOr<SaveOutcome>> p;
    runner_->Commit(dir, version, mode, [&](StatusOr<SaveOutcome> r) { p.set_value(r); });
    return p.get_future().get();
  }
  Status FinishSave(const std::string& dir, const std::string& version) {
    std::promise<Status> p;
    runner_->FinishSave(dir, version, [&](Status st) { p.set_value(st); });
    return p.get_future().get();
  }
  StatusOr<LoadOutcome> Load(const std::string& dir) { return runner_->LoadSync(dir); }
  void SetProgress(std::function<void(const CheckpointProgress&)> progress) {
    runner_->SetProgress(std::move(progress));
  }
  // Holds executor lane `lane` (its thread) until `release` is ready.
  void BlockLane(size_t lane, std::shared_future<void> release) {
    pool_.Post(lane, [release] { release.wait(); });
  }
  StatusOr<ShrinkOutcome> Shrink() {
    std::promise<StatusOr<ShrinkOutcome>> p;
    runner_->Shrink(std::nullopt, [&](StatusOr<ShrinkOutcome> r) { p.set_value(r); });
    return p.get_future().get();
  }

  // Pushes into the keys this server owns (test thread; no runner call in flight).
  void Push(uint32_t table_id, const std::vector<uint64_t>& all_keys, std::mt19937_64& rng, bool counters = false) {
    SparseTable* t = tables_->sparse(table_id);
    std::vector<uint64_t> keys;
    for (uint64_t k : all_keys) {
      if (t->Owns(k)) keys.push_back(k);
    }
    std::uniform_real_distribution<float> g(-1, 1);
    std::vector<float> grads(keys.size() * t->dim());
    for (auto& x : grads) x = g(rng);
    std::vector<float> shows(keys.size()), clicks(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      shows[i] = static_cast<float>(rng() % 4);
      clicks[i] = static_cast<float>(rng() % 2);
    }
    std::map<uint32_t, std::vector<uint32_t>> by_shard;
    for (uint32_t i = 0; i < keys.size(); ++i) by_shard[t->ShardOf(keys[i])].push_back(i);
    PushCounters c;
    if (counters) {
      c.shows = shows.data();
      c.clicks = clicks.data();
    }
    for (const auto& [s, idx] : by_shard) {
      REQUIRE(t->PushShard(s, keys.data(), idx.data(), idx.size(), grads.data(), c).ok());
    }
  }
  void PushDense(std::mt19937_64& rng) {
    DenseTable* d = tables_->dense(kDense);
    std::uniform_real_distribution<float> g(-1, 1);
    std::vector<float> grads(d->end() - d->begin());
    for (auto& x : grads) x = g(rng);
    REQUIRE(d->Push(d->begin(), grads.size(), grads.data()).ok());
  }
  // Every stored row; the RAM-only kDirty bit is left out of the flags unless `raw`.
  RowMap Rows(uint32_t table_id, bool raw = false) {
    SparseTable* t = tables_->sparse(table_id);
    const RowAccessor& acc = t->accessor();
    RowMap rows;
    for (uint32_t s = 0; s < t->num_shards(); ++s) {
      REQUIRE(t->ForEachRow(s, [&](uint64_t key, const float* row) {
                 // Every row sits on the server and shard PlaceKey names.
                 const KeyPlacement p =
                     PlaceKey(key, static_cast<uint32_t>(options_.endpoints.size()), t->num_shards());
                 CHECK(p.server == index());
                 CHECK(p.shard == s);
                 auto& copy = rows[key];
                 copy.assign(row, row + t->row_floats());
                 if (!raw) acc.SetFlags(copy.data(), acc.SavedFlags(row));
                 return Status::OK();
               }).ok());
    }
    return rows;
  }
  std::vector<float> DenseSlice() {
    DenseTable* d = tables_->dense(kDense);
    std::vector<float> w(d->end() - d->begin());
    REQUIRE(d->Pull(d->begin(), w.size(), w.data()).ok());
    return w;
  }

 private:
  config::ServerOptions options_;
  ExecutorPool pool_;
  std::unique_ptr<TableSet> tables_;
  std::unique_ptr<CheckpointRunner> runner_;
};

inline std::vector<uint64_t> Keys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = rng();
  return keys;
}

// Saves every table of the cluster into dir as one checkpoint (both phases).
inline std::string SaveAll(std::vector<std::unique_ptr<Server>>& servers, const std::string& dir, disk::SaveMode mode,
                           const std::string& version) {
  for (auto& s : servers) REQUIRE(s->SavePart(dir, version, mode).ok());
  auto committed = servers[0]->Commit(dir, version, mode);
  REQUIRE(committed.ok());
  return version;
}

inline RowMap Union(std::vector<std::unique_ptr<Server>>& servers, uint32_t table) {
  RowMap all;
  for (auto& s : servers) {
    for (auto& [k, v] : s->Rows(table)) CHECK(all.emplace(k, v).second);
  }
  return all;
}

inline std::vector<std::unique_ptr<Server>> Cluster(uint32_t n, const Layout& layout = {}) {
  std::vector<std::unique_ptr<Server>> servers;
  for (uint32_t i = 0; i < n; ++i) servers.push_back(std::make_unique<Server>(i, n, layout));
  return servers;
}

inline void Train(std::vector<std::unique_ptr<Server>>& servers, int rounds, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto keys = Keys(3000, seed);
  for (int r = 0; r < rounds; ++r) {
    for (auto& s : servers) {
      s->Push(kSparse, keys, rng);
      s->Push(kCtr, keys, rng, /*counters=*/true);
      s->PushDense(rng);
    }
  }
}

}  // namespace fleetps::server::checkpoint_testing
