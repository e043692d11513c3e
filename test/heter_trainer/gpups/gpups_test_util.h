#pragma once
// The fixtures of gpups_sync_test and gpups_trainer_test: a GPU-PS job's options, pserver Apps
// on loopback, random batches and the reference pushes, and a trainer with its GpuPsSync.

#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <set>
#include <random>
#include <thread>

#include "common/config/trainer_config.h"
#include "common/metrics/registry.h"
#include "common/stop_request.h"
#include "heter_trainer/gpups/dense_replica.h"
#include "heter_trainer/gpups/gpups_sync.h"
#include "server/app/app.h"
#include "server/table/table_set.h"
#include "test/support/process.h"
#include "test/trainer/data/data_test_util.h"
#include "trainer/data/in_memory_dataset.h"
#include "trainer/data/queue_dataset.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/local_group.h"
#include "trainer/runtime/collective_sync.h"
#include "trainer/runtime/trainer.h"

namespace fleetps::heter::gpups_testing {

using trainer::PsClient;

inline config::TrainerOptions JobOptions(float embedx_threshold) {
  auto o = config::ParseTrainerYaml(R"(
runner:
  train_data_dir: "data/train"
  sync_mode: gpubox
hyper_parameters:
  model_type: ctr_dnn
  optimizer: {class: Adagrad, learning_rate: 0.05}
  sparse_inputs_slots: 3
  sparse_feature_dim: 4
  dense_input_dim: 2
  fc_sizes: [4]
fleetps:
  sparse_table:
    shards: 3
    accessor: {name: ctr, embedx_threshold: )" +
                                        std::to_string(embedx_threshold) + R"(, nonclk_coeff: 0.1}
)",
                                    "gpups_sync_test.yaml");
  REQUIRE(o.ok());
  return *o;
}

struct Cluster {
  std::unique_ptr<server::App> app;
  explicit Cluster(const config::TrainerOptions& job) {
    config::ServerOptions s;
    s.endpoints = {{"127.0.0.1", 0}};
    s.bind_host = "127.0.0.1";
    s.io_threads = 1;
    s.shard_threads = 2;
    s.tables = config::JobTables(job);
    app = std::make_unique<server::App>(s);
    REQUIRE(app->Start().ok());
  }
  ~Cluster() { app->Shutdown(); }
  std::unique_ptr<PsClient> Client() const {
    trainer::PsClientOptions co;
    co.servers = {{"127.0.0.1", app->port()}};
    co.io_threads = 1;
    auto c = PsClient::Connect(co);
    REQUIRE(c.ok());
    return std::move(c).value();
  }
  // Every stored row of the sparse table, in the RowAccessor layout.
  std::map<uint64_t, std::vector<float>> Rows(uint32_t table_id) const {
    std::map<uint64_t, std::vector<float>> rows;
    server::SparseTable* t = app->tables().sparse(table_id);
    for (uint32_t s = 0; s < t->num_shards(); ++s) {
      REQUIRE(t->ForEachRow(s, [&](uint64_t key, const float* row) {
                 rows[key].assign(row, row + t->row_floats());
                 return Status::OK();
               }).ok());
    }
    return rows;
  }
};

struct Batch {
  std::vector<uint64_t> keys;  // distinct
  std::vector<float> grads, shows, clicks;
};

// n batches over `keys`, each leaving out about a quarter of them (none with `every_key`).
inline std::vector<Batch> Batches(const std::vector<uint64_t>& keys, int n, uint32_t seed, bool every_key = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> g(-1.0f, 1.0f);
  std::vector<Batch> out(n);
  for (auto& b : out) {
    for (uint64_t k : keys) {
      if (rng() % 4 == 0 && !every_key) continue;
      b.keys.push_back(k);
      for (int j = 0; j < 4; ++j) b.grads.push_back(g(rng));
      b.shows.push_back(static_cast<float>(1 + rng() % 3));
      b.clicks.push_back(static_cast<float>(rng() % 2));
    }
  }
  return out;
}

// Pushes `batches` in windows of `window` batches, each window as one request.
inline void PushAll(PsClient& client, const std::vector<Batch>& batches, size_t window = 1) {
  for (size_t w = 0; w < batches.size(); w += window) {
    Batch merged;
    for (size_t i = w; i < std::min(batches.size(), w + window); ++i) {
      const Batch& b = batches[i];
      merged.keys.insert(merged.keys.end(), b.keys.begin(), b.keys.end());
      merged.grads.insert(merged.grads.end(), b.grads.begin(), b.grads.end());
      merged.shows.insert(merged.shows.end(), b.shows.begin(), b.shows.end());
      merged.clicks.insert(merged.clicks.end(), b.clicks.begin(), b.clicks.end());
    }
    PsClient::SparsePushOptions opt;
    opt.shows = merged.shows;
    opt.clicks = merged.clicks;
    REQUIRE(client.PushSparse(0, merged.keys, merged.grads, opt).get().ok());
  }
}

inline std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> k;
  for (uint64_t i = from; i < to; ++i) k.push_back(i * 104729 + 3);
  return k;
}

// One trainer's GpuPsSync on `cluster` with `devices` host shards, each driven by
// `workers_per_device` workers.
struct PassTrainer {
  config::TrainerOptions options;
  std::unique_ptr<PsClient> client;
  std::unique_ptr<GpuPsSync> sync;
};

// Sets up trainers_num trainers (concurrently: the allreduce set-up waits for every rank).
inline std::vector<std::unique_ptr<PassTrainer>> MakeTrainers(const Cluster& cluster, config::TrainerOptions job,
                                                              uint32_t trainers, uint32_t devices,
                                                              uint32_t workers_per_device = 1) {
  const auto ports = testing::FreePorts(static_cast<int>(trainers));
  std::vector<std::unique_ptr<PassTrainer>> out(trainers);
  std::vector<Status> results(trainers);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < trainers; ++t) {
    out[t] = std::make_unique<PassTrainer>();
    out[t]->options = job;
    out[t]->options.trainer_id = t;
    out[t]->options.trainers_num = trainers;
    out[t]->options.gpups.workers_per_device = workers_per_device;
    out[t]->options.worker_threads = devices * workers_per_device;
    out[t]->options.pservers = {{"127.0.0.1", cluster.app->port()}};
    if (trainers > 1) {
      for (uint16_t p : ports) out[t]->options.trainer_endpoints.push_back({"127.0.0.1", p});
    }
    out[t]->client = cluster.Client();
  }
  for (uint32_t t = 0; t < trainers; ++t) {
    threads.emplace_back([&, t] {
      PassTrainer& tr = *out[t];
      PassTableOptions po;
      po.table = tr.options.sparse_table;
      po.devices = devices;
      auto table = MakeHostPassTable(po);
      if (!table.ok()) {
        results[t] = table.status();
        return;
      }
      auto comms = MakeDeviceCommunicators(tr.options, devices * workers_per_device, false, nullptr);
      if (!comms.ok()) {
        results[t] = comms.status();
        return;
      }
      auto sync = GpuPsSync::Create(tr.options, *tr.client, std::move(table).value(), std::move(comms).value());
      results[t] = sync.status();
      if (sync.ok()) tr.sync = std::move(sync).value();
    });
  }
  for (auto& th : threads) th.join();
  for (auto& st : results) REQUIRE(st.ok());
  return out;
}

// Worker w of every trainer pushes batches[t][w] (its own batches), each followed by the
// dense allreduce step, concurrently as the Trainer's worker threads do.
inline void TrainPass(std::vector<std::unique_ptr<PassTrainer>>& trainers,
                      const std::vector<std::vector<std::vector<Batch>>>& batches) {
  std::vector<std::thread> threads;
  std::vector<Status> errors;
  std::mutex mu;
  for (size_t t = 0; t < trainers.size(); ++t) {
    for (uint32_t w = 0; w < batches[t].size(); ++w) {
      threads.emplace_back([&, t, w] {
        GpuPsSync& sync = *trainers[t]->sync;
        // A dense gradient of its own per worker: the replicas stay equal only by the allreduce.
        std::vector<float> dense(trainers[t]->options.dense_table.dim, 0.001f * static_cast<float>(w + 1));
        Status st;
        for (const Batch& b : batches[t][w]) {
          st = sync.Push(w, trainer::StepGrads{b.keys, b.grads, b.shows, b.clicks, dense});
          if (st.ok()) st = sync.EndStep(w, false).status();
          if (!st.ok()) break;
        }
        // Out of data: keep joining the steps of the ranks that still train, until all are done.
        while (st.ok()) {
          auto done = sync.EndStep(w, true);
          st = done.status();
          if (!st.ok() || *done) break;
        }
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(st);
      });
    }
  }
  for (auto& th : threads) th.join();
  for (auto& st : errors) REQUIRE(st.ok());
}

constexpr uint32_t kShow = 0, kClick = 1, kUnseen = 2, kDeltaScore = 3;

}  // namespace fleetps::heter::gpups_testing
