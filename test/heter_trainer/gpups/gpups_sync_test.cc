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
#include "test/heter_trainer/gpups/gpups_test_util.h"

namespace fleetps::heter {
namespace {

using namespace gpups_testing;  // NOLINT: the fixtures of this test

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

TEST_CASE(
    "One trainer, two workers (two devices, or one device with two workers): after end_pass the pservers "
    "hold exactly the reference rows") {
  const auto [devices, workers_per_device] =
      GENERATE(std::pair<uint32_t, uint32_t>{2, 1}, std::pair<uint32_t, uint32_t>{1, 2});
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

TEST_CASE(
    "end_pass's write-back in ranges of 3 rows over two shards (more ranges than are written at once) stores "
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
    if (by0)
      ds += accessor.Score(end0.at(key)[stats + kShow] - s[stats + kShow],
                           end0.at(key)[stats + kClick] - s[stats + kClick]);
    if (by0 && by1) {
      const auto& e1 = end1.at(key);
      for (uint32_t j = 0; j < core; ++j) want[j] += e1[j] - s[j];  // trainer 1's difference
      want[stats + kShow] += e1[stats + kShow] - s[stats + kShow];
      want[stats + kClick] += e1[stats + kClick] - s[stats + kClick];
    }
    if (by1)
      ds += accessor.Score(end1.at(key)[stats + kShow] - s[stats + kShow],
                           end1.at(key)[stats + kClick] - s[stats + kClick]);
    for (uint32_t j = 0; j < stats + kDeltaScore; ++j) CHECK(g[j] == want[j]);
    CHECK(g[stats + kUnseen] == 0.0f);
    CHECK(g[stats + kDeltaScore] == ds);
  }
}

}  // namespace
}  // namespace fleetps::heter
