// GPU-PS pass mode end to end in one process, over real RPC: pserver Apps on loopback, one
// or two trainers each with a GpuPsSync (host pass table, Gloo allreduce of the dense part)
// doing begin_pass / pushes / end_pass. After end_pass the pservers must hold exactly the
// rows of a reference computation: the same pushes applied directly to another pserver (the
// async path) — weights, optimizer state, flags, show, click, unseen_days — with delta_score
// as WriteRows defines it (start + score(pass shows, pass clicks)); with two trainers on
// overlapping keys, the second writer's pass is added as its difference, in write order.
// The pass table takes one step of the sparse rule per key per batch (fleetps.max_merge_steps
// 1, the default), as local training does: the reference pushes each batch as one request.
// With max_merge_steps N > 1, asked for, a worker's N batches are summed per key first: the
// reference then pushes each window of N batches as one request (PsClient sums duplicate
// keys in order, as the pass's merge does).
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

namespace fleetps::heter {
namespace {

using trainer::PsClient;

config::TrainerOptions JobOptions(float embedx_threshold) {
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
    accessor: {name: ctr, embedx_threshold: )" + std::to_string(embedx_threshold) + R"(, nonclk_coeff: 0.1}
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
std::vector<Batch> Batches(const std::vector<uint64_t>& keys, int n, uint32_t seed, bool every_key = false) {
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
void PushAll(PsClient& client, const std::vector<Batch>& batches, size_t window = 1) {
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

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
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
std::vector<std::unique_ptr<PassTrainer>> MakeTrainers(const Cluster& cluster, config::TrainerOptions job,
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
void TrainPass(std::vector<std::unique_ptr<PassTrainer>>& trainers,
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

TEST_CASE("begin_pass's key collection: every distinct key of the pass once, with 1 to 8 threads, pass after pass") {
  // The rank_dnn sample (PaddleRec's own lines) in three files, read by two reader threads.
  data::testing::TempDir dir;
  const auto lines = data::testing::ReadLines(data::testing::kRankDnnSample);
  std::vector<std::string> files;
  for (size_t f = 0; f < 3; ++f) {
    std::vector<std::string> part;
    for (size_t i = f; i < lines.size(); i += 3) part.push_back(lines[i]);
    files.push_back(dir.Write("part" + std::to_string(f), part));
  }
  config::DataOptions options = data::testing::RankDnnOptions();
  options.thread_num = 2;
  data::QueueDataset dataset(options, files, 7);
  // The reference: one thread reads the pass and keeps the set of ids.
  std::set<uint64_t> expected;
  REQUIRE(dataset.StartPass().ok());
  data::Batch batch;
  while (true) {
    auto has = dataset.NextBatch(&batch);
    REQUIRE(has.ok());
    if (!*has) break;
    for (const auto& slot : batch.slots) expected.insert(slot.ids.begin(), slot.ids.end());
  }
  dataset.EndPass();
  REQUIRE(expected.size() > 500);  // the sample's 80 lines carry ~26 ids each, mostly distinct
  for (uint32_t threads : {1u, 3u, 8u}) {
    auto keys = CollectPassKeys(dataset, threads);
    REQUIRE(keys.ok());
    INFO(threads << " threads");
    CHECK(keys->size() == expected.size());  // none twice
    CHECK(std::set<uint64_t>(keys->begin(), keys->end()) == expected);
  }
}

TEST_CASE("begin_pass's key collection: a malformed line fails it with the file and line, nothing hangs") {
  data::testing::TempDir dir;
  auto lines = data::testing::ReadLines(data::testing::kRankDnnSample);
  lines.resize(20);
  lines[13] = "click:1 dense_feature:0.1 1:not_a_number";
  const std::string file = dir.Write("bad", lines);
  data::QueueDataset dataset(data::testing::RankDnnOptions(), {file}, 4);
  auto keys = CollectPassKeys(dataset, 4);
  REQUIRE_FALSE(keys.ok());
  CHECK_THAT(keys.status().message(), Catch::Contains("reading the pass's keys") && Catch::Contains("bad:14"));
}

TEST_CASE("begin_pass takes the last pass's keys again when the dataset reads the same records, else reads them") {
  const config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1);
  GpuPsSync& sync = *trainers[0]->sync;
  data::testing::TempDir dir;
  // Keys: the rows' numbers (slot 0, 0..599) and row % 97 (the other slots).
  const auto files = data::testing::WriteNumberedRankDnnFiles(dir, "part", 2, 300);
  data::InMemoryDataset dataset(data::testing::RankDnnOptions(), files, 64);
  REQUIRE(dataset.LoadIntoMemory().ok());
  // One pass: the table must hold exactly the distinct ids of the records the pass reads.
  auto pass = [&](bool reused) {
    REQUIRE(sync.BeginPass(dataset, nullptr).ok());
    std::set<uint64_t> ids;
    REQUIRE(dataset.StartPass().ok());
    data::Batch batch;
    while (*dataset.NextBatch(&batch)) {
      for (const auto& slot : batch.slots) ids.insert(slot.ids.begin(), slot.ids.end());
    }
    dataset.EndPass();
    CHECK(sync.last_pass().keys_reused == reused);
    CHECK(sync.table().size() == ids.size());
    const std::vector<uint64_t> keys(ids.begin(), ids.end());
    std::vector<float> rows(keys.size() * sync.table().dim());
    CHECK(sync.PullSparse(0, keys, rows.data()).ok());  // every id of the pass is in the table
    REQUIRE(sync.EndPass().ok());
    return ids.size();
  };
  CHECK(pass(false) == 600);
  dataset.LocalShuffle(1);  // the same records in another order
  CHECK(pass(true) == 600);
  dataset.SetPassPart(0, 2);  // half of them
  const size_t half = pass(false);
  CHECK(half < 600);
  dataset.SetPassPart(0, 1);
  CHECK(pass(false) == 600);
  CHECK(pass(true) == 600);
  dataset.SampleShard(0, 2, /*shuffle=*/false, 0);  // rows 0, 2, 4, ...: 300 numbers and 48 odd ones below 97
  CHECK(pass(false) == 348);
}

TEST_CASE("One trainer, two workers (two devices, or one device with two workers): after end_pass the pservers "
          "hold exactly the reference rows") {
  const auto [devices, workers_per_device] = GENERATE(std::pair<uint32_t, uint32_t>{2, 1}, std::pair<uint32_t, uint32_t>{1, 2});
  // 1: the default, one step per batch; 3: merging asked for (9 and 6 batches: a partial
  // window left for end_pass).
  const uint32_t window = GENERATE(1u, 3u);
  INFO(devices << " device(s) x " << workers_per_device << " worker(s) per device, max_merge_steps " << window);
  config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  REQUIRE(job.max_merge_steps == 1);  // the default
  job.max_merge_steps = window;
  Cluster pass_cluster(job), reference(job);
  auto ref_client = reference.Client();
  // History before the pass, on both: rows exist, some extended, with statistics.
  const auto keys = Range(0, 80);
  const auto history = Batches(keys, 2, 5);
  PushAll(*ref_client, history);
  PushAll(*pass_cluster.Client(), history);
  const auto start = reference.Rows(0);

  auto trainers = MakeTrainers(pass_cluster, job, 1, devices, workers_per_device);
  // Worker 0 trains keys [0, 40) and new keys [80, 100); worker 1 keys [40, 80): disjoint,
  // so each key's pushes have one order whatever the threads' timing.
  auto k0 = Range(0, 40), k1 = Range(40, 80), fresh = Range(80, 100);
  k0.insert(k0.end(), fresh.begin(), fresh.end());
  std::vector<uint64_t> pass_keys = k0;
  pass_keys.insert(pass_keys.end(), k1.begin(), k1.end());
  std::vector<std::vector<std::vector<Batch>>> batches = {{Batches(k0, 9, 21), Batches(k1, 6, 22)}};
  std::set<uint64_t> touched;  // keys pushed at least once in the pass: the rows end_pass writes
  for (const auto& w : batches[0]) {
    for (const auto& b : w) touched.insert(b.keys.begin(), b.keys.end());
  }
  REQUIRE(trainers[0]->sync->BeginPassWithKeys(pass_keys).ok());
  CHECK(trainers[0]->sync->table().size() == pass_keys.size());
  TrainPass(trainers, batches);
  REQUIRE(trainers[0]->sync->Flush().ok());  // end_pass
  CHECK(trainers[0]->sync->last_pass().written == touched.size());
  CHECK(trainers[0]->sync->last_pass().merged == 0);
  CHECK(trainers[0]->sync->table().size() == 0);

  for (const auto& w : batches[0]) PushAll(*ref_client, w, window);
  const auto want = reference.Rows(0);
  const auto got = pass_cluster.Rows(0);
  REQUIRE(got.size() == want.size());
  REQUIRE(got.size() == 100);
  const auto& accessor = pass_cluster.app->tables().sparse(0)->accessor();
  const uint32_t stats = accessor.stats_offset();
  size_t extended_in_pass = 0;
  for (const auto& [key, row] : want) {
    INFO("key " << key);
    REQUIRE(got.count(key) == 1);
    const auto& g = got.at(key);
    // Weights, optimizer state, flags, show, click, unseen_days: bitwise the reference's.
    for (uint32_t j = 0; j < stats + kDeltaScore; ++j) CHECK(g[j] == row[j]);
    // delta_score: the start's plus score(the pass's shows and clicks).
    const auto it = start.find(key);
    const float show0 = it == start.end() ? 0.0f : it->second[stats + kShow];
    const float click0 = it == start.end() ? 0.0f : it->second[stats + kClick];
    const float ds0 = it == start.end() ? 0.0f : it->second[stats + kDeltaScore];
    CHECK(g[stats + kDeltaScore] == ds0 + accessor.Score(row[stats + kShow] - show0, row[stats + kClick] - click0));
    extended_in_pass += accessor.Extended(row.data()) && (it == start.end() || !accessor.Extended(it->second.data()));
  }
  CHECK(extended_in_pass > 0);
  // The workers' replicas moved together (each pushed a gradient of its own), and rank 0's
  // reached the dense table at end_pass.
  std::vector<float> replica0, replica1, dense(job.dense_table.dim);
  REQUIRE(trainers[0]->sync->DenseParams(0, &replica0).ok());
  REQUIRE(trainers[0]->sync->DenseParams(1, &replica1).ok());
  CHECK(replica0 == replica1);
  REQUIRE(trainers[0]->client->PullDense(1, dense).get().ok());
  CHECK(dense == replica0);
  CHECK(std::any_of(dense.begin(), dense.end(), [](float v) { return v != 0.0f; }));
}

TEST_CASE("end_pass's write-back in ranges of 3 rows over two shards (more ranges than are written at once) stores "
          "what one range stores") {
  const config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  Cluster ranged(job), whole(job);
  const auto keys = Range(0, 60);
  const auto history = Batches(keys, 2, 5);
  PushAll(*ranged.Client(), history);
  PushAll(*whole.Client(), history);
  REQUIRE(ranged.Rows(0) == whole.Rows(0));
  PassTableOptions o;
  o.table = job.sparse_table;
  o.devices = 2;
  auto table = MakeHostPassTable(o);
  REQUIRE(table.ok());
  const uint32_t core = (*table)->core_floats();
  std::vector<float> rows(keys.size() * core), stats(keys.size() * 2);
  std::vector<uint8_t> flags(keys.size());
  auto ranged_client = ranged.Client();
  REQUIRE(ranged_client->PullRows(0, keys, core, {rows.data(), flags.data(), stats.data()}).get().ok());
  REQUIRE((*table)->Build(keys, rows, flags, stats).ok());
  std::set<uint64_t> touched;
  for (const auto& b : Batches(Range(0, 50), 3, 9)) {  // the last 10 keys stay untouched
    REQUIRE((*table)->Push(b.keys, b.grads, b.shows, b.clicks).ok());
    touched.insert(b.keys.begin(), b.keys.end());
  }
  PsClient::RowsWritten in_ranges, in_one;
  REQUIRE(keys.size() / 3 > kWriteBackInFlight);
  REQUIRE(WritePassBack(**table, *ranged_client, 0, false, 3, &in_ranges).ok());
  REQUIRE(WritePassBack(**table, *whole.Client(), 0, false, 1000, &in_one).ok());
  CHECK(in_ranges.written == touched.size());
  CHECK(in_ranges.merged == 0);
  CHECK(in_one.written == touched.size());
  const auto got = ranged.Rows(0), want = whole.Rows(0);
  CHECK(got == want);
  CHECK(got.size() == keys.size());
}

TEST_CASE("Two trainers on overlapping keys: both passes add up on the pservers, in write order") {
  // Rows created whole (no lazy embedx), so a merge is a plain difference.
  const config::TrainerOptions job = JobOptions(/*embedx_threshold=*/0.0f);
  Cluster pass_cluster(job), ref0(job), ref1(job);
  const auto all = Range(0, 60);
  const auto history = Batches(all, 2, 7, /*every_key=*/true);
  for (const Cluster* c : {&pass_cluster, &ref0, &ref1}) PushAll(*c->Client(), history);
  const auto start = ref0.Rows(0);

  auto trainers = MakeTrainers(pass_cluster, job, 2, 1);
  metrics::Registry registry;  // trainer 1's /metrics
  trainers[1]->sync->SetMetrics(registry);
  const auto keys0 = Range(0, 40), keys1 = Range(20, 60);  // [20, 40) trained by both
  std::vector<std::vector<std::vector<Batch>>> batches = {{Batches(keys0, 6, 31, true)}, {Batches(keys1, 6, 32, true)}};
  REQUIRE(trainers[0]->sync->BeginPassWithKeys(keys0).ok());
  REQUIRE(trainers[1]->sync->BeginPassWithKeys(keys1).ok());
  TrainPass(trainers, batches);
  REQUIRE(trainers[0]->sync->EndPass().ok());  // trainer 0 writes first
  REQUIRE(trainers[1]->sync->EndPass().ok());
  CHECK(trainers[0]->sync->last_pass().written == 40);
  CHECK(trainers[1]->sync->last_pass().written == 20);
  CHECK(trainers[1]->sync->last_pass().merged == 20);
  const std::string text = registry.Serialize();
  INFO(text);
  CHECK_THAT(text, Catch::Contains("\nfleetps_gpups_passes_total 1\n") &&
                       Catch::Contains("\nfleetps_gpups_pass_keys 40\n") &&
                       Catch::Contains("fleetps_gpups_rows_written_total{merge=\"exact\"} 20\n") &&
                       Catch::Contains("fleetps_gpups_rows_written_total{merge=\"added\"} 20\n") &&
                       Catch::Contains("fleetps_gpups_pass_seconds{step=\"write\"} "));

  // References: each trainer's pushes applied directly to the start state, batch by batch.
  REQUIRE(job.max_merge_steps == 1);
  PushAll(*ref0.Client(), batches[0][0]);
  PushAll(*ref1.Client(), batches[1][0]);
  const auto end0 = ref0.Rows(0), end1 = ref1.Rows(0);
  const auto got = pass_cluster.Rows(0);
  const auto& accessor = pass_cluster.app->tables().sparse(0)->accessor();
  const uint32_t stats = accessor.stats_offset();
  const uint32_t core = accessor.flags_offset();
  for (uint64_t key : all) {
    INFO("key " << key);
    const bool by0 = std::find(keys0.begin(), keys0.end(), key) != keys0.end();
    const bool by1 = std::find(keys1.begin(), keys1.end(), key) != keys1.end();
    const auto& s = start.at(key);
    const auto& g = got.at(key);
    std::vector<float> want = by0 ? end0.at(key) : end1.at(key);
    float ds = s[stats + kDeltaScore];
    if (by0) ds += accessor.Score(end0.at(key)[stats + kShow] - s[stats + kShow],
                                  end0.at(key)[stats + kClick] - s[stats + kClick]);
    if (by0 && by1) {
      const auto& e1 = end1.at(key);
      for (uint32_t j = 0; j < core; ++j) want[j] += e1[j] - s[j];  // trainer 1's difference
      want[stats + kShow] += e1[stats + kShow] - s[stats + kShow];
      want[stats + kClick] += e1[stats + kClick] - s[stats + kClick];
    }
    if (by1) ds += accessor.Score(end1.at(key)[stats + kShow] - s[stats + kShow],
                                  end1.at(key)[stats + kClick] - s[stats + kClick]);
    for (uint32_t j = 0; j < stats + kDeltaScore; ++j) CHECK(g[j] == want[j]);
    CHECK(g[stats + kUnseen] == 0.0f);
    CHECK(g[stats + kDeltaScore] == ds);
  }
}

}  // namespace
}  // namespace fleetps::heter

namespace fleetps::heter {
namespace {

// Worker threads stepping a dense system: worker w, while it has data (data[w] steps), reads
// the step's parameters (params(w, &p)) and pushes a gradient that depends on them and on its
// own random draw (push(w, grads)); then it joins the remaining steps without data; each
// step ends with end(w, out_of_data). Requires every worker's status OK.
template <typename ParamsFn, typename PushFn, typename EndFn>
void RunDenseSteps(uint32_t workers, const std::vector<int>& data, ParamsFn params, PushFn push, EndFn end) {
  std::vector<std::thread> threads;
  std::vector<Status> results(workers);
  for (uint32_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(1000 + w);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<float> p, grads;
      for (int s = 0;; ++s) {
        const bool has = s < data[w];
        if (has) {
          results[w] = params(w, &p);
          if (!results[w].ok()) return;
          grads.resize(p.size());
          for (size_t i = 0; i < p.size(); ++i) grads[i] = u(rng) * (1.0f + static_cast<float>(s % 3)) + 0.5f * p[i];
          results[w] = push(w, grads);
          if (!results[w].ok()) return;
        }
        StatusOr<bool> done = end(w, !has);
        if (!done.ok()) results[w] = done.status();
        if (!done.ok() || *done) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& st : results) REQUIRE(st.ok());
}

TEST_CASE("The process's one dense replica, each worker stepping a slice, gives bitwise one replica per rank") {
  const auto [rule, drop_last] = GENERATE(std::pair<const char*, bool>{"Adam", false},
                                          std::pair<const char*, bool>{"Adagrad", false},
                                          std::pair<const char*, bool>{"Adam", true});
  // With more apply threads than workers, helpers step parts of the workers' slices: one
  // worker's slice (the whole replica) in two parts, or three workers' in two parts each.
  const auto [kWorkers, apply_threads] =
      GENERATE(std::pair<uint32_t, size_t>{3, 1}, std::pair<uint32_t, size_t>{1, 2}, std::pair<uint32_t, size_t>{3, 4});
  INFO(rule << (drop_last ? ", drop_last" : "") << ", " << kWorkers << " worker(s), " << apply_threads
            << " apply threads");
  config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  job.dense_table.dim = 200003;  // three slices of 66672, 66672 and 66659 floats
  job.dense_table.optimizer.kind = std::string(rule) == "Adam" ? OptimizerKind::kAdam : OptimizerKind::kAdagrad;
  job.dense_table.optimizer.learning_rate = 0.01f;
  job.collective.lr_scaling = config::LrScaling::kLinear;
  job.collective.warmup_steps = 3;
  job.collective.drop_last = drop_last;
  job.collective.timeout_ms = 30000;
  Cluster cluster(job);
  auto client = cluster.Client();
  // Steps with data per worker: the mean is over fewer ranks at the end.
  const std::vector<int> data = kWorkers == 3 ? std::vector<int>{9, 7, 4} : std::vector<int>{9};
  std::vector<float> initial(job.dense_table.dim);
  std::mt19937 rng(7);
  for (float& v : initial) v = std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);

  // Reference: one CollectiveSync replica per rank.
  auto ref_comms = collective::MakeLocalGroup(kWorkers, nullptr, std::chrono::milliseconds(30000));
  std::vector<std::unique_ptr<trainer::CollectiveSync>> ref;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    auto sync = trainer::CollectiveSync::CreateDenseOnly(job, *client, *ref_comms[w]);
    REQUIRE(sync.ok());
    ref.push_back(std::move(sync).value());
  }
  {
    std::vector<Status> set(kWorkers);
    std::vector<std::thread> threads;
    for (uint32_t w = 0; w < kWorkers; ++w) threads.emplace_back([&, w] { set[w] = ref[w]->SetInitialParams(initial); });
    for (auto& t : threads) t.join();
    for (const Status& st : set) REQUIRE(st.ok());
  }
  RunDenseSteps(
      kWorkers, data, [&](uint32_t w, std::vector<float>* p) { return ref[w]->DenseParams(w, p); },
      [&](uint32_t w, std::span<const float> g) { return ref[w]->Push(w, trainer::StepGrads{{}, {}, {}, {}, g}); },
      [&](uint32_t w, bool out) { return ref[w]->EndStep(w, out); });

  // The process's one replica.
  auto comms = collective::MakeLocalGroup(kWorkers, nullptr, std::chrono::milliseconds(30000));
  std::vector<collective::Communicator*> ranks;
  for (auto& c : comms) ranks.push_back(c.get());
  auto replica = DenseReplica::Create(job, ranks, initial, {}, apply_threads);
  INFO(replica.status().ToString());
  REQUIRE(replica.ok());
  CHECK((*replica)->helper_threads() == (apply_threads > kWorkers ? apply_threads - 1 : 0));
  // The gradients depend on the parameters each step reads: a read before every slice of the
  // last step is applied changes the outcome.
  // Worker 1 (and a lone worker) reads the replica in place and writes its gradient into
  // its buffer in the replica, as the Trainer's dense step does; the others copy.
  const auto in_place = [&](uint32_t w) { return w == 1 || kWorkers == 1; };
  RunDenseSteps(
      kWorkers, data,
      [&](uint32_t w, std::vector<float>* p) -> Status {
        if (!in_place(w)) return (*replica)->DenseParams(w, p);
        ASSIGN_OR_RETURN(auto view, (*replica)->DenseParamsView(w));
        p->assign(view.begin(), view.end());
        return Status::OK();
      },
      [&](uint32_t w, std::span<const float> g) {
        if (!in_place(w)) return (*replica)->Push(w, g);
        const std::span<float> buffer = (*replica)->GradsBuffer(w);
        std::copy(g.begin(), g.end(), buffer.begin());
        return (*replica)->Push(w, buffer);
      },
      [&](uint32_t w, bool out) { return (*replica)->EndStep(w, out); });

  const uint64_t want_steps = drop_last && kWorkers == 3 ? 4 : 9;
  CHECK(ref[0]->steps() == want_steps);
  CHECK((*replica)->steps() == want_steps);
  CHECK(ref[0]->params() == ref[kWorkers - 1]->params());
  CHECK((*replica)->params() == ref[0]->params());  // bitwise
  CHECK((*replica)->params() != initial);
  std::vector<float> now;
  REQUIRE((*replica)->DenseParams(kWorkers - 1, &now).ok());
  CHECK(now == ref[kWorkers - 1]->params());
}

// A GPU-PS job of the Trainer over `files`: one QueueDataset pass, batches of 64.
config::TrainerOptions TrainerJob(const std::vector<std::string>& files, bool prefetch) {
  auto job = config::ParseTrainerYaml(R"(
runner: {sync_mode: gpubox, reader_type: QueueDataset, thread_num: 1, train_batch_size: 64, print_interval: 1000}
hyper_parameters:
  model_type: ctr_dnn
  optimizer: {class: Adam, learning_rate: 0.002}
  sparse_inputs_slots: 27
  sparse_feature_dim: 8
  dense_input_dim: 13
  fc_sizes: [32, 16]
fleetps:
  sparse_table: {shards: 2, accessor: {name: ctr, embedx_threshold: 2}}
)",
                                      "gpups_sync_test.yaml");
  REQUIRE(job.ok());
  job->data.train_paths = files;
  job->gpups.prefetch = prefetch;
  return *job;
}

// The Trainer in GPU-PS mode, in process: `workers` workers on one host device, with or
// without their prefetch helpers, train one pass over `files`. Returns the rows the pass wrote
// back and the dense replica; `examples` receives the records trained.
struct TrainedPass {
  std::map<uint64_t, std::vector<float>> rows;
  std::vector<float> dense;
  uint64_t examples = 0;
};
TrainedPass TrainWithTrainer(const std::vector<std::string>& files, uint32_t workers, bool prefetch) {
  const config::TrainerOptions job = TrainerJob(files, prefetch);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1, workers);
  PassTrainer& tr = *trainers[0];
  metrics::Registry registry;  // outlives the Trainer
  auto trainer = std::make_unique<trainer::Trainer>(tr.options, *tr.client, nullptr, nullptr, std::move(tr.sync));
  trainer->SetMetrics(&registry);
  REQUIRE(trainer->Start().ok());
  auto report = trainer->TrainEpoch(1);
  REQUIRE(report.ok());
  CHECK((report->prefetch_wait_sec > 0) == prefetch);
  // The pass's metrics, as /metrics publishes them.
  auto published = [&](const char* metric) {
    return registry.GetGauge("fleetps_trainer_pass_metric", "", {{"metric", metric}}).value();
  };
  CHECK(report->auc > 0);  // computed (this data holds little signal: near 0.5)
  CHECK(published("auc") == report->auc);
  CHECK(published("loss") == report->loss);
  CHECK(published("copc") == report->copc);
  CHECK(published("copc") == Approx(report->actual_ctr / report->predicted_ctr));
  CHECK(published("rmse") == report->rmse);
  CHECK(published("bucket_error") == report->bucket_error);
  TrainedPass out;
  out.examples = report->examples;
  out.rows = cluster.Rows(job.sparse_table.id);
  out.dense.resize(job.dense_table.dim);
  REQUIRE(tr.client->PullDense(job.dense_table.id, out.dense).get().ok());
  return out;
}

TEST_CASE("The Trainer's prefetch helpers: one worker's pass bitwise as without them; two workers train every record") {
  data::testing::TempDir dir;
  const auto files = data::testing::WriteNumberedRankDnnFiles(dir, "train", 2, 700);
  const TrainedPass with = TrainWithTrainer(files, 1, true);
  const TrainedPass without = TrainWithTrainer(files, 1, false);
  CHECK(with.examples == 1400);
  CHECK(with.rows.size() == 1400);  // the ids of the first slot, unique per record, hold the others
  CHECK(with.rows == without.rows);  // weights, optimizer state, statistics: bitwise
  CHECK(with.dense == without.dense);
  // Two workers and their two helpers at once (a TSan target): every record trained once.
  const TrainedPass two = TrainWithTrainer(files, 2, true);
  CHECK(two.examples == 1400);
  CHECK(two.rows.size() == with.rows.size());
}

// The model two epochs of the Trainer leave on the pservers: every sparse row, the dense
// parameters and the dense optimizer state.
struct TrainedModel {
  std::map<uint64_t, std::vector<float>> rows;
  std::vector<float> dense;
  PsClient::DenseState state;
  double auc = 0;  // the last epoch's
};

// Two epochs over `files` in file order (a QueueDataset with one reader thread), batches of
// 64, Adam for both tables: local training (DirectSync: each step's pushes applied on the
// pservers before its next pull), or GPU-PS on one host device with one worker and its
// prefetch helper.
TrainedModel TrainTwoEpochs(const std::vector<std::string>& files, bool gpups) {
  const config::TrainerOptions job = TrainerJob(files, /*prefetch=*/true);
  Cluster cluster(job);
  std::vector<std::unique_ptr<PassTrainer>> trainers;  // its options outlive the GpuPsSync
  std::unique_ptr<PsClient> client;
  std::unique_ptr<trainer::Trainer> trainer;
  if (gpups) {
    trainers = MakeTrainers(cluster, job, 1, 1);
    client = std::move(trainers[0]->client);
    trainer = std::make_unique<trainer::Trainer>(trainers[0]->options, *client, nullptr, nullptr,
                                                 std::move(trainers[0]->sync));
  } else {
    config::TrainerOptions local = job;
    local.sync_mode = config::SyncMode::kAsync;  // no pservers: local training
    local.pservers.clear();
    REQUIRE(local.local());
    client = cluster.Client();
    trainer = std::make_unique<trainer::Trainer>(local, *client);
  }
  REQUIRE(trainer->Start().ok());
  TrainedModel out;
  for (uint32_t epoch = 1; epoch <= 2; ++epoch) {
    auto report = trainer->TrainEpoch(epoch);
    INFO((gpups ? "GPU-PS" : "local") << " epoch " << epoch << ": " << report.status().ToString());
    REQUIRE(report.ok());
    CHECK(report->examples == 1400);
    out.auc = report->auc;
  }
  out.rows = cluster.Rows(job.sparse_table.id);
  const size_t n = job.dense_table.dim;
  out.dense.resize(n);
  out.state = {std::vector<float>(2 * n), std::vector<float>(2)};  // Adam: two moments, two beta powers
  REQUIRE(client->PullDense(job.dense_table.id, out.dense, &out.state).get().ok());
  return out;
}

TEST_CASE("GPU-PS with one device and one worker in file order trains the model local training trains") {
  data::testing::TempDir dir;
  // Slot 0's ids are unique per record, the other slots' (row % 97) are in nearly every
  // batch: the keys whose updates a merge of several batches would thin out.
  const auto files = data::testing::WriteNumberedRankDnnFiles(dir, "train", 2, 700);
  const TrainedModel local = TrainTwoEpochs(files, false);
  const TrainedModel gpups = TrainTwoEpochs(files, true);
  REQUIRE(gpups.rows.size() == local.rows.size());
  REQUIRE(local.rows.size() == 1400);
  Cluster probe(TrainerJob(files, true));
  const auto& accessor = probe.app->tables().sparse(0)->accessor();
  const uint32_t stats = accessor.stats_offset();
  size_t extended = 0;
  for (const auto& [key, want] : local.rows) {
    INFO("key " << key);
    REQUIRE(gpups.rows.count(key) == 1);
    const auto& got = gpups.rows.at(key);
    REQUIRE(got.size() == want.size());
    // Weights, optimizer state, flags, show, click, unseen_days: bitwise.
    for (uint32_t j = 0; j < stats + kDeltaScore; ++j) CHECK(got[j] == want[j]);
    // delta_score: local training adds each push's score, end_pass the score of the pass's
    // summed shows and clicks: equal up to the rounding of the sums.
    CHECK(got[stats + kDeltaScore] == Approx(want[stats + kDeltaScore]).epsilon(1e-6));
    extended += accessor.Extended(want.data());
  }
  CHECK(extended > 0);
  CHECK(gpups.dense == local.dense);
  CHECK(gpups.state.element == local.state.element);
  CHECK(gpups.state.shared == local.state.shared);
  CHECK(gpups.auc == local.auc);
}

TEST_CASE("A stop request mid-pass: no batch is trained after it, and every step trained is written back") {
  const bool prefetch = GENERATE(false, true);
  INFO("prefetch " << prefetch);
  data::testing::TempDir dir;
  constexpr uint64_t kRecords = 50000;
  const config::TrainerOptions job =
      TrainerJob(data::testing::WriteNumberedRankDnnFiles(dir, "train", 1, kRecords), prefetch);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1, /*workers_per_device=*/2);
  PassTrainer& tr = *trainers[0];
  metrics::Registry registry;  // outlives the Trainer
  trainer::Trainer trainer(tr.options, *tr.client, nullptr, nullptr, std::move(tr.sync));
  trainer.SetMetrics(&registry);
  StopRequest stop;
  trainer.SetStopRequest(&stop);
  REQUIRE(trainer.Start().ok());
  const metrics::Counter trained = registry.GetCounter("fleetps_trainer_examples_total", "");
  std::thread stopper([&] {
    while (trained.value() < 640) std::this_thread::sleep_for(std::chrono::microseconds(200));
    stop.Request("stopped by the test");
  });
  auto report = trainer.TrainEpoch(1);
  stopper.join();
  REQUIRE(report.ok());
  CHECK(report->examples >= 640);
  CHECK(report->examples < kRecords);  // the pass was cut short
  // Each record shows one key per sparse slot: the shows the pservers hold are exactly the
  // steps trained. A pass not written back holds none; a batch trained after the stop, or one
  // a prefetch helper prepared but no worker trained, would add its own.
  const auto rows = cluster.Rows(job.sparse_table.id);
  const uint32_t stats = cluster.app->tables().sparse(job.sparse_table.id)->accessor().stats_offset();
  double shows = 0;
  uint64_t records = 0;  // records >= 97 trained: their slot-0 ids are keys of their own
  for (const auto& [key, row] : rows) {
    shows += row[stats + kShow];
    if (key >= 97 && row[stats + kShow] > 0) ++records;
  }
  const double slots = static_cast<double>(job.data.sparse_slots.size());
  CHECK(shows == slots * static_cast<double>(report->examples));
  CHECK(records + 97 >= report->examples);
  CHECK(records <= report->examples);
}

// A dataset over another that requests `stop` as it hands out the `at`-th batch of a pass.
class StoppingDataset : public data::Dataset {
 public:
  StoppingDataset(data::Dataset& inner, StopRequest& stop, uint64_t at) : inner_(inner), stop_(stop), at_(at) {}
  Status StartPass() override {
    batches_ = 0;
    return inner_.StartPass();
  }
  StatusOr<bool> NextBatch(data::Batch* batch) override {
    ASSIGN_OR_RETURN(const bool has, inner_.NextBatch(batch));
    if (has && ++batches_ == at_) stop_.Request("stopped by the test");
    return has;
  }
  void EndPass() override { inner_.EndPass(); }
  data::ReadStats stats() const override { return inner_.stats(); }
  std::optional<uint64_t> PassRecordsId() const override { return inner_.PassRecordsId(); }
  uint64_t batches() const { return batches_; }

 private:
  data::Dataset& inner_;
  StopRequest& stop_;
  uint64_t at_;
  std::atomic<uint64_t> batches_{0};
};

TEST_CASE("A stop request during begin_pass: the pass's keys are read no further, nothing is pulled or built") {
  const config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1);
  GpuPsSync& sync = *trainers[0]->sync;
  metrics::Registry registry;
  sync.SetMetrics(registry);
  const metrics::Counter passes = registry.GetCounter("fleetps_gpups_passes_total", "");
  data::testing::TempDir dir;
  const auto files = data::testing::WriteNumberedRankDnnFiles(dir, "part", 2, 300);  // 600 records
  data::InMemoryDataset records(data::testing::RankDnnOptions(), files, 16);  // 38 batches a pass
  REQUIRE(records.LoadIntoMemory().ok());

  SECTION("while the keys are read") {
    StopRequest stop;
    StoppingDataset dataset(records, stop, 5);
    const Status st = sync.BeginPass(dataset, &stop);
    CHECK(st.code() == StatusCode::kAborted);
    CHECK_THAT(st.message(), Catch::Contains("reading the pass's keys") && Catch::Contains("stopped by the test"));
    // Each of begin_pass's threads (one per core, at most 16) takes at most one batch after it.
    CHECK(dataset.batches() >= 5);
    CHECK(dataset.batches() <= 5 + 16);  // of 38
  }
  SECTION("after the keys are read") {
    StopRequest stop;
    stop.Request("stopped by the test");
    const std::vector<uint64_t> keys = Range(0, 80);
    const Status st = sync.BeginPassWithKeys(keys, &stop);
    CHECK(st.code() == StatusCode::kAborted);
    CHECK_THAT(st.message(), Catch::Contains("stopped by the test before pulling the pass's rows; no pass was begun"));
  }
  CHECK(sync.table().size() == 0);
  CHECK(passes.value() == 0);
  // The next pass reads its keys again, whole, and begins.
  REQUIRE(sync.BeginPass(records, nullptr).ok());
  CHECK_FALSE(sync.last_pass().keys_reused);
  CHECK(sync.table().size() == 600);  // slot 0's ids are the records' numbers; the others are below 97
  CHECK(passes.value() == 1);
  REQUIRE(sync.EndPass().ok());
}

TEST_CASE("A stop request before an epoch's begin_pass: the Trainer's epoch ends with nothing trained or begun") {
  data::testing::TempDir dir;
  const config::TrainerOptions job = TrainerJob(data::testing::WriteNumberedRankDnnFiles(dir, "train", 1, 500), false);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1);
  PassTrainer& tr = *trainers[0];
  metrics::Registry registry;
  tr.sync->SetMetrics(registry);
  trainer::Trainer trainer(tr.options, *tr.client, nullptr, nullptr, std::move(tr.sync));
  StopRequest stop;
  trainer.SetStopRequest(&stop);
  REQUIRE(trainer.Start().ok());
  stop.Request("stopped by the test");
  auto report = trainer.TrainEpoch(1);
  REQUIRE(report.ok());  // a pass cut short: the epoch ends with its Flush
  CHECK(report->examples == 0);
  CHECK(registry.GetCounter("fleetps_gpups_passes_total", "").value() == 0);
  CHECK(cluster.Rows(job.sparse_table.id).empty());
}

TEST_CASE("The dense replica starts from the pservers' dense table when it holds parameters (a loaded model)") {
  const config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  Cluster cluster(job);
  std::vector<float> loaded(job.dense_table.dim);
  for (size_t i = 0; i < loaded.size(); ++i) loaded[i] = 0.001f * static_cast<float>(i % 97) - 0.03f;
  REQUIRE(cluster.Client()->PushDenseParam(job.dense_table.id, loaded).get().ok());  // as a --load leaves it
  auto trainers = MakeTrainers(cluster, job, 1, 2);
  for (uint32_t w = 0; w < 2; ++w) {
    std::vector<float> replica;
    REQUIRE(trainers[0]->sync->DenseParams(w, &replica).ok());
    CHECK(replica == loaded);
  }
  // On fresh pservers trainer 0's draw is set there and is the replica.
  Cluster fresh(job);
  auto drawn = MakeTrainers(fresh, job, 1, 1);
  std::vector<float> replica, table(job.dense_table.dim);
  REQUIRE(drawn[0]->sync->DenseParams(0, &replica).ok());
  REQUIRE(drawn[0]->client->PullDense(job.dense_table.id, table).get().ok());
  CHECK(replica == table);
  CHECK(replica != loaded);
}

TEST_CASE("A restarted node resumes the dense optimizer state end_pass left on the pservers: two passes across a "
          "restart give bitwise the uninterrupted run's model") {
  config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  job.dense_table.optimizer.kind = OptimizerKind::kAdam;  // moments and beta powers to lose
  job.dense_table.optimizer.learning_rate = 0.01f;
  job.collective.warmup_steps = 0;  // the rate's warm-up counts the replica's own steps
  const auto keys = Range(0, 30);
  const std::vector<std::vector<std::vector<std::vector<Batch>>>> passes = {{{Batches(keys, 5, 31)}},
                                                                           {{Batches(keys, 4, 32)}}};
  auto run_pass = [&](std::vector<std::unique_ptr<PassTrainer>>& trainers, size_t pass) {
    REQUIRE(trainers[0]->sync->BeginPassWithKeys(keys).ok());
    TrainPass(trainers, passes[pass]);
    REQUIRE(trainers[0]->sync->Flush().ok());  // end_pass: rows and the dense replica to the pservers
  };
  Cluster straight(job), restarted(job);
  {
    auto trainers = MakeTrainers(straight, job, 1, 1);
    run_pass(trainers, 0);
    run_pass(trainers, 1);
  }
  {
    auto first = MakeTrainers(restarted, job, 1, 1);
    run_pass(first, 0);
  }
  auto second = MakeTrainers(restarted, job, 1, 1);  // a new process: the replica from the pservers
  run_pass(second, 1);
  const size_t n = job.dense_table.dim;
  PsClient::DenseState want{std::vector<float>(2 * n), std::vector<float>(2)}, got = want;
  std::vector<float> want_params(n), got_params(n);
  REQUIRE(straight.Client()->PullDense(job.dense_table.id, want_params, &want).get().ok());
  REQUIRE(restarted.Client()->PullDense(job.dense_table.id, got_params, &got).get().ok());
  CHECK(got_params == want_params);
  CHECK(got.element == want.element);
  CHECK(got.shared == want.shared);
  // Adam's beta1 power: beta1 at the start, times beta1 at each of both passes' 9 steps.
  CHECK(want.shared[0] == Approx(std::pow(0.9, 10)).epsilon(1e-5));
  CHECK(std::any_of(want.element.begin(), want.element.end(), [](float v) { return v != 0.0f; }));
}

TEST_CASE("A failed worker's Abort ends the other workers' wait in the dense allreduce at once") {
  config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  job.collective.timeout_ms = 60000;  // without Abort, worker 0 would wait this long
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1, /*workers_per_device=*/2);
  GpuPsSync& sync = *trainers[0]->sync;
  const auto keys = Range(0, 10);
  REQUIRE(sync.BeginPassWithKeys(keys).ok());
  const auto batches = Batches(keys, 1, 3);
  std::vector<float> dense(job.dense_table.dim, 0.01f);
  Status pushed, stepped;
  const auto start = std::chrono::steady_clock::now();
  std::thread worker0([&] {
    const Batch& b = batches[0];
    pushed = sync.Push(0, trainer::StepGrads{b.keys, b.grads, b.shows, b.clicks, dense});
    if (pushed.ok()) stepped = sync.EndStep(0, false).status();  // waits for worker 1
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  sync.Abort(Status::Internal("worker 1: CUDA error"));  // what the Trainer does when worker 1 fails
  worker0.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  REQUIRE(pushed.ok());
  CHECK_FALSE(stepped.ok());
  CHECK_THAT(stepped.message(), Catch::Contains("worker 1: CUDA error"));
}

}  // namespace
}  // namespace fleetps::heter
