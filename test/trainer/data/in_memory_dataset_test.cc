// InMemoryDataset: loading, local and global shuffles, batch iteration.

#include <algorithm>
#include <csignal>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include <catch2/catch.hpp>

#include "trainer/data/file_list.h"
#include "trainer/data/in_memory_dataset.h"
#include "test/trainer/data/data_test_util.h"

namespace fleetps::data {
namespace {

// Keys (slot-0 ids) in the dataset's current order, read by one worker.
std::vector<uint64_t> KeysInOrder(InMemoryDataset* dataset) {
  std::vector<uint64_t> keys;
  REQUIRE(dataset->StartPass().ok());
  Batch batch;
  for (;;) {
    StatusOr<bool> next = dataset->NextBatch(&batch);
    REQUIRE(next.ok());
    if (!*next) break;
    testing::AppendKeys(batch, &keys);
  }
  dataset->EndPass();
  return keys;
}

std::vector<uint64_t> Sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<uint64_t> Iota(size_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

config::DataOptions Options(uint32_t threads) {
  config::DataOptions options = testing::RankDnnOptions();
  options.thread_num = threads;
  return options;
}

TEST_CASE("load_into_memory keeps the file order whatever the threads do", "[data][inmemory]") {
  testing::TempDir dir;
  // 3 files x 5000 rows: several blocks per file.
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 3, 5000);
  InMemoryDataset dataset(Options(3), files, 100);
  REQUIRE(dataset.LoadIntoMemory().ok());
  CHECK(dataset.size() == 15000);
  CHECK(KeysInOrder(&dataset) == Iota(15000));
  CHECK(dataset.stats().files == 3);
  CHECK(dataset.stats().examples == 15000);
  CHECK(dataset.MemoryBytes() > 15000 * (13 * 4 + 26 * 12));
  dataset.ReleaseMemory();
  CHECK(dataset.size() == 0);
  CHECK(dataset.MemoryBytes() == 0);
  CHECK(KeysInOrder(&dataset).empty());
}

TEST_CASE("load_into_memory reports each file read: 1..N of N, examples growing to the total", "[data][inmemory]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 4, 1000 + 1);  // 4 x 1001 rows
  InMemoryDataset dataset(Options(2), files, 100);
  std::vector<std::tuple<size_t, size_t, uint64_t>> calls;  // the callback runs one at a time
  REQUIRE(dataset
              .LoadIntoMemory(
                  [&](size_t done, size_t total, uint64_t examples) { calls.emplace_back(done, total, examples); })
              .ok());
  REQUIRE(calls.size() == 4);
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(std::get<0>(calls[i]) == i + 1);
    CHECK(std::get<1>(calls[i]) == 4);
    CHECK(std::get<2>(calls[i]) == (i + 1) * 1001);  // whole files, whichever finished first
  }
  // A failed load reports only the files read before the error.
  const std::string bad = dir.Write("bad", {"not a record"});
  InMemoryDataset failing(Options(1), {files[0], bad}, 100);
  calls.clear();
  CHECK_FALSE(failing
                  .LoadIntoMemory(
                      [&](size_t done, size_t total, uint64_t examples) { calls.emplace_back(done, total, examples); })
                  .ok());
  CHECK(calls == std::vector<std::tuple<size_t, size_t, uint64_t>>{{1, 2, 1001}});
}

TEST_CASE("in-memory rank_dnn sample: 80 examples, first one exact", "[data][inmemory]") {
  InMemoryDataset dataset(Options(2), {testing::kRankDnnSample}, 80);
  REQUIRE(dataset.LoadIntoMemory().ok());
  REQUIRE(dataset.StartPass().ok());
  Batch batch;
  REQUIRE(*dataset.NextBatch(&batch));
  REQUIRE(batch.size() == 80);
  CHECK(std::count(batch.labels.begin(), batch.labels.end(), 1.0f) == 23);
  CHECK(batch.labels[0] == 0.0f);
  CHECK(batch.Dense(0)[1] == 0.00497512437811f);
  CHECK(batch.Ids(0, 0)[0] == 737395);
  CHECK(batch.Ids(25, 0)[0] == 306163);
  CHECK_FALSE(*dataset.NextBatch(&batch));
}

TEST_CASE("a load error names file:line and keeps nothing", "[data][inmemory]") {
  testing::TempDir dir;
  auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 2, 10);
  auto lines = testing::ReadLines(files[1]);
  lines[6] = "click:0 oops";
  dir.Write("part_1.txt", lines);
  InMemoryDataset dataset(Options(2), files, 4);
  const Status status = dataset.LoadIntoMemory();
  CHECK(status.message() == files[1] + ":7: token 2 \"oops\": expected name:value");
  CHECK(dataset.size() == 0);
}

TEST_CASE("a stop request ends a load: Aborted, naming the files read, nothing kept", "[data][inmemory]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 3, 2 * InMemoryDataset::kBlockRows);
  StopRequest stop;
  // Asked for after the first file: one loading thread reads no other.
  InMemoryDataset dataset(Options(1), files, 100);
  const Status st =
      dataset.LoadIntoMemory([&](size_t, size_t, uint64_t) { stop.Request("stopped by SIGTERM", SIGTERM); }, &stop);
  CHECK((st.code() == StatusCode::kAborted));
  CHECK(st.message() == "stopped by SIGTERM while loading data into memory (1 of 3 files read); nothing was kept");
  CHECK(dataset.size() == 0);
  CHECK(dataset.MemoryBytes() == 0);
  // Asked for before: no file is read, with any number of threads.
  InMemoryDataset threaded(Options(3), files, 100);
  size_t files_read = 0;
  CHECK(threaded.LoadIntoMemory([&](size_t, size_t, uint64_t) { ++files_read; }, &stop).code() == StatusCode::kAborted);
  CHECK(files_read == 0);
  CHECK(threaded.size() == 0);
  // Without a request a load is whole.
  StopRequest idle;
  InMemoryDataset whole(Options(2), files, 100);
  REQUIRE(whole.LoadIntoMemory({}, &idle).ok());
  CHECK(whole.size() == 3 * 2 * InMemoryDataset::kBlockRows);
}

TEST_CASE("local shuffle is a seeded permutation", "[data][inmemory]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 2, 3000);
  InMemoryDataset a(Options(2), files, 64);
  InMemoryDataset b(Options(1), files, 64);
  REQUIRE(a.LoadIntoMemory().ok());
  REQUIRE(b.LoadIntoMemory().ok());
  a.LocalShuffle(42);
  b.LocalShuffle(42);
  const auto keys = KeysInOrder(&a);
  CHECK(keys != Iota(6000));
  CHECK(Sorted(keys) == Iota(6000));  // a permutation
  CHECK(KeysInOrder(&b) == keys);     // same seed, same order
  b.LocalShuffle(43);
  CHECK(KeysInOrder(&b) != keys);
}

TEST_CASE("the distributed sampler gives each rank a disjoint strided share, reshuffled per epoch",
          "[data][inmemory]") {
  testing::TempDir dir;
  // 10 records over 3 ranks: shares of ceil(10 / 3) = 4, padded with the first 2 of the order.
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 2, 5);
  std::vector<std::unique_ptr<InMemoryDataset>> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(std::make_unique<InMemoryDataset>(Options(1), files, 3));
    REQUIRE(ranks.back()->LoadIntoMemory().ok());
  }
  SECTION("without shuffle: positions rank, rank + 3, ... of the load order, padded cyclically") {
    std::vector<std::vector<uint64_t>> shares;
    for (uint32_t r = 0; r < 3; ++r) {
      ranks[r]->SampleShard(r, 3, /*shuffle=*/false, 0);
      CHECK(ranks[r]->size() == 4);
      shares.push_back(KeysInOrder(ranks[r].get()));
    }
    CHECK(shares[0] == std::vector<uint64_t>{0, 3, 6, 9});
    CHECK(shares[1] == std::vector<uint64_t>{1, 4, 7, 0});
    CHECK(shares[2] == std::vector<uint64_t>{2, 5, 8, 1});
  }
  SECTION("with shuffle: one permutation shared by the ranks, a new one per seed (epoch)") {
    std::vector<uint64_t> epoch0;
    for (uint64_t seed : {100u, 200u}) {
      std::vector<uint64_t> all;
      for (uint32_t r = 0; r < 3; ++r) {
        ranks[r]->SampleShard(r, 3, /*shuffle=*/true, seed);
        const auto keys = KeysInOrder(ranks[r].get());
        CHECK(keys.size() == 4);
        all.insert(all.end(), keys.begin(), keys.end());
      }
      // 12 positions: every record once plus the 2 padding repeats.
      std::vector<uint64_t> distinct = Sorted(all);
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      CHECK(distinct == Iota(10));
      if (seed == 100) {
        epoch0 = all;
      } else {
        CHECK(all != epoch0);
      }
    }
    // Sampling again restores every record first: the same seed gives the same share.
    ranks[1]->SampleShard(1, 3, true, 100);
    const auto again = KeysInOrder(ranks[1].get());
    CHECK(again == std::vector<uint64_t>(epoch0.begin() + 4, epoch0.begin() + 8));
  }
  SECTION("one rank keeps everything") {
    ranks[0]->SampleShard(0, 1, false, 0);
    CHECK(KeysInOrder(ranks[0].get()) == Iota(10));
  }
}

TEST_CASE("several workers share a pass: every record once", "[data][inmemory]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 4, 2500);
  InMemoryDataset dataset(Options(2), files, 33);
  REQUIRE(dataset.LoadIntoMemory().ok());
  dataset.LocalShuffle(7);
  for (int pass = 0; pass < 2; ++pass) {
    // Catch2 assertions are not thread-safe: workers only collect, the test thread checks.
    std::vector<uint64_t> keys;
    size_t max_batch = 0;
    bool all_ok = true;
    std::mutex mu;
    REQUIRE(dataset.StartPass().ok());
    std::vector<std::thread> workers;
    for (int w = 0; w < 4; ++w) {
      workers.emplace_back([&] {
        Batch batch;
        for (;;) {
          StatusOr<bool> next = dataset.NextBatch(&batch);
          std::lock_guard<std::mutex> lock(mu);
          all_ok = all_ok && next.ok();
          if (!next.ok() || !*next) return;
          max_batch = std::max(max_batch, batch.size());
          testing::AppendKeys(batch, &keys);
        }
      });
    }
    for (auto& w : workers) w.join();
    dataset.EndPass();
    CHECK(all_ok);
    CHECK(max_batch == 33);
    CHECK(Sorted(keys) == Iota(10000));
  }
}

TEST_CASE("pass parts split the records into consecutive ranges, every record once", "[data][inmemory]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 2, 500);  // keys 0..999
  InMemoryDataset dataset(Options(1), files, 64);
  REQUIRE(dataset.LoadIntoMemory().ok());
  dataset.LocalShuffle(3);
  const std::vector<uint64_t> whole = KeysInOrder(&dataset);
  REQUIRE(whole.size() == 1000);
  // 1000 records in 3 parts: [0, 333), [333, 666), [666, 1000), batches restarting in each.
  std::vector<uint64_t> joined;
  const size_t bounds[] = {0, 333, 666, 1000};
  for (uint32_t part = 0; part < 3; ++part) {
    dataset.SetPassPart(part, 3);
    const std::vector<uint64_t> keys = KeysInOrder(&dataset);
    CHECK(keys == std::vector<uint64_t>(whole.begin() + bounds[part], whole.begin() + bounds[part + 1]));
    joined.insert(joined.end(), keys.begin(), keys.end());
  }
  CHECK(joined == whole);
  dataset.SetPassPart(0, 1);
  CHECK(KeysInOrder(&dataset) == whole);
  // More parts than records: the extra parts are empty, none is lost.
  dataset.SetPassPart(999, 1001);
  CHECK(KeysInOrder(&dataset).size() == 1);
  dataset.SetPassPart(0, 1001);
  CHECK(KeysInOrder(&dataset).empty());
}

TEST_CASE(
    "the pass's records identity: kept by reorders and repeated passes, changed by a reload, a resample or "
    "an exchange, none for parts",
    "[data][inmemory]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 2, 100);
  InMemoryDataset dataset(Options(1), files, 16);
  InMemoryDataset other(Options(1), files, 16);
  REQUIRE(dataset.LoadIntoMemory().ok());
  REQUIRE(other.LoadIntoMemory().ok());
  const auto loaded = dataset.PassRecordsId();
  REQUIRE(loaded.has_value());
  CHECK(other.PassRecordsId() != loaded);  // another dataset of the process: another identity
  // A pass and a reorder keep the records: the same identity.
  CHECK(KeysInOrder(&dataset).size() == 200);
  dataset.LocalShuffle(7);
  CHECK(dataset.PassRecordsId() == loaded);
  // Parts of the records: none; every record again: the same one.
  dataset.SetPassPart(1, 2);
  CHECK_FALSE(dataset.PassRecordsId().has_value());
  dataset.SetPassPart(0, 1);
  CHECK(dataset.PassRecordsId() == loaded);
  // Loaded again (the files may have changed), resampled, exchanged: each a new identity.
  std::set<uint64_t> seen = {*loaded};
  REQUIRE(dataset.LoadIntoMemory().ok());
  CHECK(seen.insert(*dataset.PassRecordsId()).second);
  dataset.SampleShard(0, 2, true, 3);
  CHECK(KeysInOrder(&dataset).size() == 100);
  CHECK(seen.insert(*dataset.PassRecordsId()).second);
  InProcessRecordTransport transport(0, {&dataset});
  REQUIRE(dataset.GlobalShuffle(&transport, 1, 5).ok());
  CHECK(seen.insert(*dataset.PassRecordsId()).second);
  dataset.FinishGlobalShuffle(5);
  CHECK(seen.insert(*dataset.PassRecordsId()).second);
  CHECK(dataset.PassRecordsId() == dataset.PassRecordsId());
}

TEST_CASE("global shuffle across 3 in-process trainers", "[data][inmemory]") {
  testing::TempDir dir;
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 6, 2000);
  constexpr uint32_t kTrainers = 3;

  // Returns each trainer's keys after a global shuffle with `seed`.
  auto shuffle = [&](uint64_t seed) {
    std::vector<std::unique_ptr<InMemoryDataset>> datasets;
    std::vector<InMemoryDataset*> peers;
    for (uint32_t t = 0; t < kTrainers; ++t) {
      datasets.push_back(std::make_unique<InMemoryDataset>(Options(2), FilesOfTrainer(files, t, kTrainers), 50, t));
      peers.push_back(datasets.back().get());
      REQUIRE(datasets.back()->LoadIntoMemory().ok());
      CHECK(datasets.back()->size() == 4000);
    }
    // Trainers shuffle concurrently, as they would in a cluster; then a barrier.
    std::vector<Status> statuses(kTrainers);
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < kTrainers; ++t) {
      threads.emplace_back([&, t] {
        InProcessRecordTransport transport(t, peers);
        statuses[t] = datasets[t]->GlobalShuffle(&transport, kTrainers, seed);
      });
    }
    for (auto& th : threads) th.join();
    for (uint32_t t = 0; t < kTrainers; ++t) {
      CHECK(statuses[t].ok());
      CHECK(datasets[t]->size() == 0);  // everything was sent
    }
    std::vector<std::vector<uint64_t>> keys;
    for (auto& d : datasets) {
      d->FinishGlobalShuffle(seed);
      keys.push_back(KeysInOrder(d.get()));
    }
    return keys;
  };

  const auto first = shuffle(11);
  std::vector<uint64_t> all;
  for (const auto& k : first) {
    CHECK(k.size() > 3600);  // ~4000 each: destinations are uniform
    CHECK(k.size() < 4400);
    all.insert(all.end(), k.begin(), k.end());
  }
  CHECK(Sorted(all) == Iota(12000));  // every record lands exactly once
  CHECK(shuffle(11) == first);        // deterministic with the seed
  CHECK(shuffle(12) != first);
}

TEST_CASE("records keep every label through loading, batching and a global shuffle", "[data][inmemory][labels]") {
  testing::TempDir dir;
  config::DataOptions options = testing::TwoLabelOptions();
  const auto files = testing::WriteNumberedRankDnnFiles(dir, "part", 4, 3000, options);
  constexpr uint32_t kTrainers = 2;
  std::vector<std::unique_ptr<InMemoryDataset>> datasets;
  std::vector<InMemoryDataset*> peers;
  for (uint32_t t = 0; t < kTrainers; ++t) {
    datasets.push_back(std::make_unique<InMemoryDataset>(options, FilesOfTrainer(files, t, kTrainers), 64, t));
    peers.push_back(datasets.back().get());
    REQUIRE(datasets.back()->LoadIntoMemory().ok());
    CHECK(datasets.back()->num_labels() == 2);
  }
  for (uint32_t t = 0; t < kTrainers; ++t) {
    InProcessRecordTransport transport(t, peers);
    REQUIRE(datasets[t]->GlobalShuffle(&transport, kTrainers, 3).ok());
  }
  size_t rows = 0;
  for (auto& d : datasets) {
    d->FinishGlobalShuffle(3);
    REQUIRE(d->StartPass().ok());
    Batch batch;  // default shape: NextBatch reshapes it to the data's
    while (*d->NextBatch(&batch)) {
      CHECK(batch.num_labels == 2);
      CHECK(testing::HasNumberedLabels(batch));
      rows += batch.size();
    }
  }
  CHECK(rows == 12000);

  // Shipped as bytes (the pservers' mailboxes) and parsed with the label count.
  RecordBlock block(options.dense_dim, static_cast<uint32_t>(options.sparse_slots.size()), 2);
  Example ex;
  ex.Reset(options.sparse_slots.size(), 2);
  ex.labels = {1, 1};
  ex.dense.assign(options.dense_dim, 0.5f);
  for (auto& ids : ex.slots) ids.push_back(6);
  block.Append(ex);
  auto parsed = RecordBlock::Parse(block.Serialize(), datasets[0]->dense_dim(), datasets[0]->num_slots(),
                                   datasets[0]->num_labels(), "test");
  REQUIRE(parsed.ok());
  CHECK(*parsed == block);
}

TEST_CASE("a single trainer's global shuffle goes through itself", "[data][inmemory]") {
  InMemoryDataset dataset(Options(1), {testing::kRankDnnSample}, 16);
  REQUIRE(dataset.LoadIntoMemory().ok());
  InProcessRecordTransport transport(0, {&dataset});
  REQUIRE(dataset.GlobalShuffle(&transport, 1, 5).ok());
  dataset.FinishGlobalShuffle(5);
  CHECK(dataset.size() == 80);
  REQUIRE(dataset.StartPass().ok());
  Batch batch;
  int ones = 0;
  while (*dataset.NextBatch(&batch)) {
    ones += static_cast<int>(std::count(batch.labels.begin(), batch.labels.end(), 1.0f));
  }
  CHECK(ones == 23);
}

}  // namespace
}  // namespace fleetps::data
