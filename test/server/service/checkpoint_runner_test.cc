// Save / load through the CheckpointRunner, in-process: servers are TableSets with their own
// executor pools, sharing one checkpoint directory like pservers on one machine. Every mode
// round-trips; checkpoints reload on other server and shard counts; an interrupted save
// leaves the previous one.
#include "test/server/service/checkpoint_runner_test_util.h"

namespace fleetps::server {
namespace {

using namespace checkpoint_testing;  // NOLINT: the fixtures of these cases

TEST_CASE("Checkpoint (mode 0) round-trips every float, RAM-only and RocksDB-backed", "[checkpoint]") {
  for (uint64_t budget : {uint64_t{0}, uint64_t{300} << 10}) {
    CAPTURE(budget);
    Layout layout;
    layout.budget = budget;
    if (budget != 0) layout.shards = 1;  // ~1500 RAM rows for 3000 keys
    auto source = Cluster(1, layout);
    Train(source, 4, 1);
    if (budget != 0) {
      uint64_t disk = 0;
      disk += source[0]->tables().sparse(kSparse)->Stats(0).disk_rows;
      CHECK(disk > 0);  // the save reads both tiers
    }
    const std::string dir = testing::MakeTempDir("ckpt");
    SaveAll(source, dir, disk::SaveMode::Checkpoint, "v1");
    auto target = Cluster(1, layout);
    auto loaded = target[0]->Load(dir);
    REQUIRE(loaded.ok());
    CHECK(loaded->version == "v1");
    CHECK(loaded->rows == source[0]->Rows(kSparse).size() + source[0]->Rows(kCtr).size());
    CHECK(target[0]->Rows(kSparse) == source[0]->Rows(kSparse));
    CHECK(target[0]->Rows(kCtr) == source[0]->Rows(kCtr));
    CHECK(target[0]->DenseSlice() == source[0]->DenseSlice());
    // Optimizer state of the dense table too: one more identical step stays identical.
    std::mt19937_64 a(9), b(9);
    source[0]->PushDense(a);
    target[0]->PushDense(b);
    CHECK(target[0]->DenseSlice() == source[0]->DenseSlice());
  }
}

TEST_CASE("Save and load report each file: 1..N of N, rows adding up to the sparse rows", "[checkpoint]") {
  auto source = Cluster(1);  // 4 shards of emb and of ctr, one dense table: 9 files
  Train(source, 1, 3);
  const uint64_t sparse_rows = source[0]->Rows(kSparse).size() + source[0]->Rows(kCtr).size();
  std::vector<CheckpointProgress> calls;  // one call at a time
  source[0]->SetProgress([&](const CheckpointProgress& p) { calls.push_back(p); });
  const std::string dir = testing::MakeTempDir("ckpt_progress");
  SaveAll(source, dir, disk::SaveMode::Checkpoint, "v1");
  REQUIRE(calls.size() == 9);
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].what == "saving " + dir);
    CHECK(calls[i].done == i + 1);
    CHECK(calls[i].total == 9);
    CHECK(calls[i].seconds >= 0);
    if (i > 0) CHECK(calls[i].rows >= calls[i - 1].rows);
  }
  CHECK(calls.back().rows == sparse_rows);

  auto target = Cluster(1);
  calls.clear();
  target[0]->SetProgress([&](const CheckpointProgress& p) { calls.push_back(p); });
  auto loaded = target[0]->Load(dir);
  REQUIRE(loaded.ok());
  REQUIRE(calls.size() == 9);  // aligned: one task per shard, one for the dense table
  CHECK(calls.back().what == "loading " + dir);
  CHECK(calls.back().done == 9);
  CHECK(calls.back().total == 9);
  CHECK(calls.back().rows == loaded->rows);
  CHECK(loaded->rows == sparse_rows);
}

TEST_CASE("Base (mode 2) saves weights only; Delta (mode 1) saves what changed since", "[checkpoint]") {
  auto source = Cluster(1);
  Train(source, 2, 2);
  const std::string base_dir = testing::MakeTempDir("base");
  SaveAll(source, base_dir, disk::SaveMode::Base, "b1");
  const RowMap at_base = source[0]->Rows(kSparse);
  // The base cleared Changed on every row.
  for (const auto& [k, row] : at_base) {
    CHECK(source[0]->tables().sparse(kSparse)->accessor().Flags(row.data()) == 0);
  }
  // Touch 100 keys, then a delta holds exactly those.
  std::mt19937_64 rng(3);
  auto touched = Keys(100, 77);
  source[0]->Push(kSparse, touched, rng);
  const std::string delta_dir = testing::MakeTempDir("delta");
  SaveAll(source, delta_dir, disk::SaveMode::Delta, "d1");
  auto delta = Checkpoint::Open(delta_dir);
  REQUIRE(delta.ok());
  CHECK(delta->table(kSparse)->rows() == 100);
  CHECK(delta->table(kCtr)->rows() == 0);
  CHECK(delta->manifest().content() == disk::RowContent::WeightsOnly);

  // Base then delta into a fresh server: every weight equals the source's; optimizer state
  // is fresh (base is for serving).
  auto target = Cluster(1);
  auto loaded = target[0]->Load(base_dir);
  REQUIRE(loaded.ok());
  CHECK(loaded->mode == disk::SaveMode::Base);
  auto rows = target[0]->Rows(kSparse);
  REQUIRE(rows.size() == at_base.size());
  const uint32_t dim = 6;
  for (const auto& [k, row] : rows) {
    const auto& want = at_base.at(k);
    CHECK(std::vector<float>(row.begin(), row.begin() + dim) == std::vector<float>(want.begin(), want.begin() + dim));
    CHECK(row[dim] == 0.9f);  // Adam beta1 power back at its start
  }
  REQUIRE(target[0]->Load(delta_dir).ok());
  const RowMap now = source[0]->Rows(kSparse);
  rows = target[0]->Rows(kSparse);
  REQUIRE(rows.size() == now.size());
  for (const auto& [k, row] : rows) {
    CHECK(std::vector<float>(row.begin(), row.begin() + dim) ==
          std::vector<float>(now.at(k).begin(), now.at(k).begin() + dim));
  }
  CHECK(target[0]->DenseSlice() == source[0]->DenseSlice());
}

TEST_CASE("Batch (mode 3) saves like a checkpoint, then ages unseen_days", "[checkpoint]") {
  auto source = Cluster(1);
  Train(source, 2, 4);
  const RowMap before = source[0]->Rows(kCtr);
  const std::string dir = testing::MakeTempDir("batch");
  SaveAll(source, dir, disk::SaveMode::Batch, "day1");
  const auto& acc = source[0]->tables().sparse(kCtr)->accessor();
  const RowMap after = source[0]->Rows(kCtr);
  for (const auto& [k, row] : after) {
    CHECK(acc.StatOf(row.data(), RowAccessor::kUnseenDays) ==
          acc.StatOf(before.at(k).data(), RowAccessor::kUnseenDays) + 1);
  }
  auto target = Cluster(1);
  REQUIRE(target[0]->Load(dir).ok());
  CHECK(target[0]->Rows(kCtr) == before);  // the file holds the rows as they were saved
  // Shrink after enough days deletes everything (delete_after_unseen_days 30).
  for (int day = 0; day < 31; ++day) SaveAll(source, dir, disk::SaveMode::Batch, "day" + std::to_string(day + 2));
  auto shrunk = source[0]->Shrink();
  REQUIRE(shrunk.ok());
  CHECK(shrunk->deleted == after.size());
  CHECK(source[0]->Rows(kCtr).empty());
  // Only the last committed version is kept.
  int versions = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) versions += e.is_directory();
  CHECK(versions == 1);
}

TEST_CASE("Saved by 2 servers with 4 shards, loaded by 3 servers with 3 shards", "[checkpoint]") {
  auto source = Cluster(2);
  Train(source, 3, 5);
  const std::string dir = testing::MakeTempDir("reshard");
  SaveAll(source, dir, disk::SaveMode::Checkpoint, "v1");
  Layout three;
  three.shards = 3;
  auto target = Cluster(3, three);
  for (auto& s : target) REQUIRE(s->Load(dir).ok());
  CHECK(Union(target, kSparse) == Union(source, kSparse));  // Rows() checks every key's placement
  CHECK(Union(target, kCtr) == Union(source, kCtr));
  std::vector<float> a, b;
  for (auto& s : source) {
    auto w = s->DenseSlice();
    a.insert(a.end(), w.begin(), w.end());
  }
  for (auto& s : target) {
    auto w = s->DenseSlice();
    b.insert(b.end(), w.begin(), w.end());
  }
  CHECK(a == b);
  // And back into 1 server (the trainer's infer mode).
  auto one = Cluster(1);
  REQUIRE(one[0]->Load(dir).ok());
  CHECK(one[0]->Rows(kSparse) == Union(source, kSparse));
}

TEST_CASE("An interrupted save leaves the previous checkpoint loadable", "[checkpoint]") {
  auto source = Cluster(2);
  Train(source, 2, 7);
  const std::string dir = testing::MakeTempDir("interrupted");
  SaveAll(source, dir, disk::SaveMode::Checkpoint, "v1");
  const RowMap v1 = Union(source, kSparse);
  Train(source, 1, 8);
  // Server 0 writes its part of v2; server 1 "dies" before its part: the commit is refused.
  REQUIRE(source[0]->SavePart(dir, "v2", disk::SaveMode::Checkpoint).ok());
  auto commit = source[0]->Commit(dir, "v2", disk::SaveMode::Checkpoint);
  REQUIRE_FALSE(commit.ok());
  CHECK(commit.status().message().find("server 1") != std::string::npos);
  // Half-written files of a third attempt, as a kill -9 leaves them.
  std::filesystem::create_directories(dir + "/v3.tmp/server-00000");
  std::ofstream(dir + "/v3.tmp/server-00000/table-0-shard-00000.rows") << "partial";

  auto reader = Cluster(2);
  for (auto& s : reader) {
    auto loaded = s->Load(dir);
    REQUIRE(loaded.ok());
    CHECK(loaded->version == "v1");
  }
  CHECK(Union(reader, kSparse) == v1);
  // The next good save commits and removes the leftovers.
  SaveAll(source, dir, disk::SaveMode::Checkpoint, "v4");
  CHECK_FALSE(std::filesystem::exists(dir + "/v2.tmp"));
  CHECK_FALSE(std::filesystem::exists(dir + "/v3.tmp"));
  CHECK_FALSE(std::filesystem::exists(dir + "/v1"));
  // A version name may not be reused.
  CHECK_FALSE(source[0]->SavePart(dir, "v4", disk::SaveMode::Checkpoint).ok());
  CHECK(source[0]->SavePart(dir, "../evil", disk::SaveMode::Checkpoint).status().IsInvalidArgument());
}

TEST_CASE("Saving one table writes a checkpoint of that table only", "[checkpoint]") {
  auto source = Cluster(1);
  Train(source, 1, 10);
  const std::string dir = testing::MakeTempDir("one");
  REQUIRE(source[0]->SavePart(dir, "t", disk::SaveMode::Checkpoint, kDense).ok());
  REQUIRE(source[0]->Commit(dir, "t", disk::SaveMode::Checkpoint).ok());
  auto checkpoint = Checkpoint::Open(dir);
  REQUIRE(checkpoint.ok());
  CHECK(checkpoint->manifest().tables()->size() == 1);
  CHECK(checkpoint->table(kDense) != nullptr);
  auto target = Cluster(1);
  Train(target, 1, 11);
  const RowMap untouched = target[0]->Rows(kSparse);
  REQUIRE(target[0]->Load(dir).ok());
  CHECK(target[0]->DenseSlice() == source[0]->DenseSlice());
  CHECK(target[0]->Rows(kSparse) == untouched);
}

// ---- after-save changes wait for the commit --------------------------------------------

// Unseen days of every CTR row of the cluster.

}  // namespace
}  // namespace fleetps::server
