// Save / load through the CheckpointRunner, in-process: servers are TableSets with their own
// executor pools, sharing one checkpoint directory like pservers on one machine.
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

namespace fleetps::server {
namespace {

using RowMap = std::map<uint64_t, std::vector<float>>;
constexpr uint32_t kSparse = 0, kDense = 1, kCtr = 2;

struct Layout {
  uint32_t shards = 4;
  uint64_t budget = 0;  // sparse memory budget (0: all in RAM)
  uint32_t sparse_dim = 6;
};

config::ServerOptions Options(uint32_t index, uint32_t servers, const Layout& layout, const std::string& data_dir) {
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

std::vector<uint64_t> Keys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = rng();
  return keys;
}

// Saves every table of the cluster into dir as one checkpoint (both phases).
std::string SaveAll(std::vector<std::unique_ptr<Server>>& servers, const std::string& dir, disk::SaveMode mode,
                    const std::string& version) {
  for (auto& s : servers) REQUIRE(s->SavePart(dir, version, mode).ok());
  auto committed = servers[0]->Commit(dir, version, mode);
  REQUIRE(committed.ok());
  return version;
}

RowMap Union(std::vector<std::unique_ptr<Server>>& servers, uint32_t table) {
  RowMap all;
  for (auto& s : servers) {
    for (auto& [k, v] : s->Rows(table)) CHECK(all.emplace(k, v).second);
  }
  return all;
}

std::vector<std::unique_ptr<Server>> Cluster(uint32_t n, const Layout& layout = {}) {
  std::vector<std::unique_ptr<Server>> servers;
  for (uint32_t i = 0; i < n; ++i) servers.push_back(std::make_unique<Server>(i, n, layout));
  return servers;
}

void Train(std::vector<std::unique_ptr<Server>>& servers, int rounds, uint64_t seed) {
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

TEST_CASE("Corrupt or mismatched checkpoints are refused and change nothing", "[checkpoint]") {
  auto source = Cluster(1);
  Train(source, 2, 6);
  const std::string dir = testing::MakeTempDir("corrupt");
  SaveAll(source, dir, disk::SaveMode::Checkpoint, "v1");
  auto checkpoint = Checkpoint::Open(dir);
  REQUIRE(checkpoint.ok());
  const std::string victim = checkpoint->FilePath(*checkpoint->table(kSparse)->files()->Get(2));

  auto target = Cluster(1);
  Train(target, 1, 60);
  const RowMap before = target[0]->Rows(kSparse);
  {  // one flipped byte in one shard file
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  auto refused = target[0]->Load(dir);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().IsCorruption());
  CHECK(refused.status().message().find(victim) != std::string::npos);
  CHECK(refused.status().message().find("nothing changed") != std::string::npos);
  CHECK(target[0]->Rows(kSparse) == before);

  // A manifest with a flipped byte.
  const std::string manifest = checkpoint->version_dir() + "/MANIFEST";
  {
    std::fstream f(manifest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(40);
    char c = 0;
    f.get(c);
    f.seekp(40);
    f.put(static_cast<char>(c ^ 1));
  }
  CHECK(Checkpoint::Open(dir).status().IsCorruption());
  CHECK(target[0]->Load(dir).status().IsCorruption());

  // A server whose table has another dim.
  auto fresh = Cluster(1);
  const std::string good = testing::MakeTempDir("good");
  SaveAll(source, good, disk::SaveMode::Checkpoint, "v1");
  Layout wide;
  wide.sparse_dim = 8;
  auto other = Cluster(1, wide);
  auto mismatch = other[0]->Load(good);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.status().IsInvalidArgument());
  CHECK(mismatch.status().message().find("dim 6") != std::string::npos);
  // No checkpoint at all.
  CHECK(fresh[0]->Load(testing::MakeTempDir("empty")).status().IsNotFound());
}

// A data file's manifest entry, as plain values (for crafting manifests).
struct FileRecord {
  std::string path;
  uint32_t server = 0, shard = 0, crc32c = 0;
  uint64_t rows = 0, bytes = 0, slice_begin = 0, slice_end = 0;
};

// Rewrites the committed manifest of `dir` after edit(table id, its files); the row sums are
// made to follow the files, so the manifest passes every check but the one under test.
void EditManifest(const std::string& dir, const std::function<void(uint32_t, std::vector<FileRecord>&)>& edit) {
  auto c = Checkpoint::Open(dir);
  REQUIRE(c.ok());
  const auto& m = c->manifest();
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<disk::TableEntry>> tables;
  uint64_t total = 0;
  for (const auto* t : *m.tables()) {
    std::vector<FileRecord> files;
    for (const auto* f : *t->files()) {
      files.push_back({f->path()->str(), f->server(), f->shard(), f->crc32c(), f->rows(), f->bytes(), f->slice_begin(),
                       f->slice_end()});
    }
    edit(t->id(), files);
    std::vector<flatbuffers::Offset<disk::FileEntry>> entries;
    uint64_t rows = 0;
    for (const FileRecord& f : files) {
      entries.push_back(disk::CreateFileEntry(fbb, fbb.CreateString(f.path), f.server, f.shard, f.rows, f.bytes,
                                              f.crc32c, f.slice_begin, f.slice_end));
      rows += f.rows;
    }
    if (!t->dense()) total += rows;
    const auto name = fbb.CreateString(t->name()->str());
    const auto list = fbb.CreateVector(entries);
    tables.push_back(disk::CreateTableEntry(fbb, t->id(), name, t->dense(), t->dim(), t->shards(), t->optimizer(),
                                            t->shared_state_floats(), t->element_state_floats(), t->accessor(), rows,
                                            list));
  }
  const auto version = fbb.CreateString(m.version()->str());
  const auto fleetps_version = fbb.CreateString(m.fleetps_version()->str());
  const auto list = fbb.CreateVector(tables);
  fbb.Finish(disk::CreateCheckpointManifest(fbb, m.format_version(), version, m.mode(), m.content(), m.num_servers(),
                                            m.created_unix_ms(), fleetps_version, list, total));
  REQUIRE(
      WriteFlatBufferFileAtomic(c->version_dir() + "/" + kManifestFile, disk::FileKind::Manifest, fbb.Release()).ok());
}

// server.Load(dir), failing the test instead of hanging it when the load blocks (a crafted
// file that never ends): past `bound` the test process exits with an error, as the blocked
// thread cannot be stopped.
StatusOr<LoadOutcome> LoadWithin(Server& server, const std::string& dir, std::chrono::seconds bound) {
  auto promise = std::make_shared<std::promise<StatusOr<LoadOutcome>>>();
  auto result = promise->get_future();
  std::thread([&server, dir, promise] { promise->set_value(server.Load(dir)); }).detach();
  if (result.wait_for(bound) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: the load of %s did not return within %d s: it blocks on a crafted file\n",
                 dir.c_str(), static_cast<int>(bound.count()));
    std::_Exit(1);
  }
  return result.get();
}

uint64_t MemoryBytes(Server& server, uint32_t table_id) {
  SparseTable* t = server.tables().sparse(table_id);
  uint64_t bytes = 0;
  for (uint32_t s = 0; s < t->num_shards(); ++s) bytes += t->Stats(s).memory_bytes;
  return bytes;
}

TEST_CASE("Crafted checkpoints are refused, with an error naming the file, without blocking or over-reserving",
          "[checkpoint]") {
  auto source = Cluster(1);
  Train(source, 1, 9);
  const std::string dir = testing::MakeTempDir("crafted");
  SaveAll(source, dir, disk::SaveMode::Checkpoint, "v1");
  const std::string honest_dir = testing::MakeTempDir("honest");
  SaveAll(source, honest_dir, disk::SaveMode::Checkpoint, "v1");
  auto checkpoint = Checkpoint::Open(dir);
  REQUIRE(checkpoint.ok());
  const std::string version_dir = checkpoint->version_dir();
  const std::string rel = checkpoint->table(kSparse)->files()->Get(0)->path()->str();
  const std::string victim = version_dir + "/" + rel;
  auto target = Cluster(1);
  Train(target, 1, 90);
  const RowMap before = target[0]->Rows(kSparse);
  const uint64_t memory_before = MemoryBytes(*target[0], kSparse);
  constexpr auto kBound = std::chrono::seconds(120);  // for "it returns", not for speed
  // A refusal before any row changed, naming `what`.
  auto refused = [&](const std::string& what) {
    auto loaded = LoadWithin(*target[0], dir, kBound);
    REQUIRE_FALSE(loaded.ok());
    INFO(loaded.status().ToString());
    CHECK(loaded.status().IsCorruption());
    CHECK(loaded.status().message().find(what) != std::string::npos);
    CHECK(loaded.status().message().find("nothing changed") != std::string::npos);
    CHECK(target[0]->Rows(kSparse) == before);
    CHECK(MemoryBytes(*target[0], kSparse) == memory_before);
  };

  SECTION("the same file listed 512 times") {
    EditManifest(dir, [&](uint32_t id, std::vector<FileRecord>& files) {
      if (id == kSparse) files.insert(files.end(), 511, files[0]);
    });
    refused(rel + " more than once");
    CHECK(Checkpoint::Open(dir).status().message().find(rel + " more than once") != std::string::npos);
  }
  SECTION("the same file under a second name (a hard link)") {
    REQUIRE(::link(victim.c_str(), (version_dir + "/server-00000/alias.rows").c_str()) == 0);
    EditManifest(dir, [&](uint32_t id, std::vector<FileRecord>& files) {
      if (id != kSparse) return;
      FileRecord alias = files[0];
      alias.path = "server-00000/alias.rows";
      files.push_back(alias);
    });
    refused("are the same file");
  }
  SECTION("a data file that is a symbolic link to /dev/zero") {
    std::filesystem::remove(victim);
    std::filesystem::create_symlink("/dev/zero", victim);
    refused(victim + " is a symbolic link");
  }
  SECTION("a data file that is a FIFO without a writer") {
    std::filesystem::remove(victim);
    REQUIRE(::mkfifo(victim.c_str(), 0644) == 0);
    refused(victim + " is a FIFO");
  }
  SECTION("a data file longer than the manifest says") {
    std::ofstream(victim, std::ios::app | std::ios::binary) << std::string(1 << 20, '\0');
    refused(victim + ": " + std::to_string(std::filesystem::file_size(victim)) + " bytes, the manifest says");
  }
  SECTION("a manifest claiming far more rows than the file holds") {
    uint64_t real_rows = 0;
    EditManifest(dir, [&](uint32_t id, std::vector<FileRecord>& files) {
      if (id != kSparse) return;
      real_rows = files[0].rows;
      files[0].rows = uint64_t{1} << 40;
    });
    // The files are intact, so the load starts; it must reserve no more than a load of the
    // true manifest, and stop at the file's end with an error naming both counts.
    auto loaded = LoadWithin(*target[0], dir, kBound);
    REQUIRE_FALSE(loaded.ok());
    INFO(loaded.status().ToString());
    CHECK(loaded.status().IsCorruption());
    CHECK(loaded.status().message().find(victim + ": " + std::to_string(real_rows) + " rows, the manifest says " +
                                         std::to_string(uint64_t{1} << 40)) != std::string::npos);
    auto honest = Cluster(1);
    Train(honest, 1, 90);
    REQUIRE(honest[0]->Load(honest_dir).ok());
    const uint32_t shard = checkpoint->table(kSparse)->files()->Get(0)->shard();
    CHECK(target[0]->tables().sparse(kSparse)->Stats(shard).memory_bytes <=
          honest[0]->tables().sparse(kSparse)->Stats(shard).memory_bytes);
  }
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
std::map<uint64_t, float> UnseenDays(std::vector<std::unique_ptr<Server>>& servers) {
  std::map<uint64_t, float> days;
  const RowAccessor& acc = servers[0]->tables().sparse(kCtr)->accessor();
  for (const auto& [k, row] : Union(servers, kCtr)) days[k] = acc.StatOf(row.data(), RowAccessor::kUnseenDays);
  return days;
}

// Checks that every value of `days` is `want`; returns how many rows there are.
size_t AllEqual(const std::map<uint64_t, float>& days, float want) {
  size_t bad = 0;
  for (const auto& [k, d] : days) bad += d != want;
  CHECK(bad == 0);
  return days.size();
}

TEST_CASE("A save that does not commit leaves Changed, delta_score and unseen_days; the next delta holds the rows",
          "[checkpoint]") {
  auto cluster = Cluster(2);
  Train(cluster, 2, 20);
  const std::string base = testing::MakeTempDir("effects_base");
  SaveAll(cluster, base, disk::SaveMode::Base, "b1");
  for (auto& s : cluster) REQUIRE(s->FinishSave(base, "b1").ok());  // server 1 applies it now
  for (const auto& [k, row] : Union(cluster, kSparse)) {
    REQUIRE(cluster[0]->tables().sparse(kSparse)->accessor().Flags(row.data()) == 0);
  }
  // 100 rows change after the base.
  const auto touched = Keys(100, 21);
  std::mt19937_64 rng(22);
  for (auto& s : cluster) {
    s->Push(kSparse, touched, rng);
    s->Push(kCtr, touched, rng, /*counters=*/true);
  }
  const RowMap sparse = Union(cluster, kSparse), ctr = Union(cluster, kCtr);

  SECTION("phase 1 everywhere, then no commit (the client died)") {
    const std::string lost = testing::MakeTempDir("effects_lost");
    for (auto& s : cluster) REQUIRE(s->SavePart(lost, "d1", disk::SaveMode::Delta).ok());
    CHECK(Union(cluster, kSparse) == sparse);
    CHECK(Union(cluster, kCtr) == ctr);
  }
  SECTION("phase 1 everywhere, the commit fails, the client reports it") {
    const std::string failed = testing::MakeTempDir("effects_failed");
    for (auto& s : cluster) REQUIRE(s->SavePart(failed, "d1", disk::SaveMode::Delta).ok());
    std::filesystem::remove(failed + "/d1.tmp/" + ServerDirName(1) + "/PART");
    REQUIRE_FALSE(cluster[0]->Commit(failed, "d1", disk::SaveMode::Delta).ok());
    for (auto& s : cluster) REQUIRE(s->FinishSave(failed, "d1").ok());  // dropped
    CHECK(Union(cluster, kSparse) == sparse);
    CHECK(Union(cluster, kCtr) == ctr);
  }
  SECTION("server 1 fails its part (its lock file is held); server 0's part is not committed") {
    const std::string half = testing::MakeTempDir("effects_half");
    auto held = DirLock::Acquire(half, ServerLockName(1), "a test holding server 1's lock");
    REQUIRE(held.ok());
    REQUIRE(cluster[0]->SavePart(half, "d1", disk::SaveMode::Delta).ok());
    auto refused = cluster[1]->SavePart(half, "d1", disk::SaveMode::Delta);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().IsBusy());
    CHECK(Union(cluster, kSparse) == sparse);
    CHECK(Union(cluster, kCtr) == ctr);
  }
  // The next delta, into another directory, still holds every changed row.
  const std::string next = testing::MakeTempDir("effects_next");
  SaveAll(cluster, next, disk::SaveMode::Delta, "d2");
  auto delta = Checkpoint::Open(next);
  REQUIRE(delta.ok());
  CHECK(delta->table(kSparse)->rows() == 100);
  CHECK(delta->table(kCtr)->rows() == 100);
  // Once committed and settled, the rows are clean: a delta right after is empty.
  for (auto& s : cluster) REQUIRE(s->FinishSave(next, "d2").ok());
  const RowAccessor& ctr_acc = cluster[0]->tables().sparse(kCtr)->accessor();
  for (const auto& [k, row] : Union(cluster, kCtr)) {
    CHECK((ctr_acc.Flags(row.data()) & RowAccessor::kChanged) == 0);
    CHECK(ctr_acc.StatOf(row.data(), RowAccessor::kDeltaScore) == 0);
  }
  const RowAccessor& acc = cluster[0]->tables().sparse(kSparse)->accessor();
  for (const auto& [k, row] : Union(cluster, kSparse)) CHECK(acc.Flags(row.data()) == 0);
  const std::string empty = testing::MakeTempDir("effects_empty");
  SaveAll(cluster, empty, disk::SaveMode::Delta, "d3");
  auto none = Checkpoint::Open(empty);
  REQUIRE(none.ok());
  CHECK(none->table(kSparse)->rows() == 0);
  CHECK(none->table(kCtr)->rows() == 0);
}

TEST_CASE("A row pushed between a save's part and its commit stays Changed for the next delta", "[checkpoint]") {
  auto cluster = Cluster(1);
  Train(cluster, 1, 30);
  SaveAll(cluster, testing::MakeTempDir("between_base"), disk::SaveMode::Base, "b1");
  std::mt19937_64 rng(31);
  const auto first = Keys(200, 32);
  cluster[0]->Push(kSparse, first, rng);
  cluster[0]->Push(kCtr, first, rng, /*counters=*/true);
  const std::string dir = testing::MakeTempDir("between");
  REQUIRE(cluster[0]->SavePart(dir, "d1", disk::SaveMode::Delta).ok());
  // 20 of those rows and 30 new ones change before the commit.
  std::vector<uint64_t> again(first.begin(), first.begin() + 20);
  const auto fresh = Keys(30, 33);
  again.insert(again.end(), fresh.begin(), fresh.end());
  cluster[0]->Push(kSparse, again, rng);
  cluster[0]->Push(kCtr, again, rng, /*counters=*/true);
  REQUIRE(cluster[0]->Commit(dir, "d1", disk::SaveMode::Delta).ok());
  auto d1 = Checkpoint::Open(dir);
  REQUIRE(d1.ok());
  CHECK(d1->table(kSparse)->rows() == 200);
  const std::string next = testing::MakeTempDir("between_next");
  SaveAll(cluster, next, disk::SaveMode::Delta, "d2");
  auto d2 = Checkpoint::Open(next);
  REQUIRE(d2.ok());
  CHECK(d2->table(kSparse)->rows() == 50);
  CHECK(d2->table(kCtr)->rows() == 50);
}

TEST_CASE("Batch saves age unseen_days exactly once per committed save, on every server", "[checkpoint]") {
  auto cluster = Cluster(2);
  Train(cluster, 2, 40);
  const size_t rows = AllEqual(UnseenDays(cluster), 0);
  REQUIRE(rows > 0);
  const std::string dir = testing::MakeTempDir("days");
  SaveAll(cluster, dir, disk::SaveMode::Batch, "day1");
  // Server 0 applies at the commit; server 1 when it next settles (here: FinishSave).
  const RowAccessor& acc = cluster[0]->tables().sparse(kCtr)->accessor();
  for (uint32_t i = 0; i < 2; ++i) {
    REQUIRE(cluster[i]->Rows(kCtr).size() > 0);
    for (const auto& [k, row] : cluster[i]->Rows(kCtr)) {
      CHECK(acc.StatOf(row.data(), RowAccessor::kUnseenDays) == (i == 0 ? 1 : 0));
    }
  }
  REQUIRE(cluster[1]->FinishSave(dir, "day1").ok());
  REQUIRE(cluster[1]->FinishSave(dir, "day1").ok());  // settled once only
  AllEqual(UnseenDays(cluster), 1);

  // Phase 1 sent twice (a retry), then committed: one day.
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (auto& s : cluster) REQUIRE(s->SavePart(dir, "day2", disk::SaveMode::Batch).ok());
  }
  REQUIRE(cluster[0]->Commit(dir, "day2", disk::SaveMode::Batch).ok());
  // A batch save that never commits: no day. Server 1's part settles day2 first.
  for (auto& s : cluster) REQUIRE(s->SavePart(dir, "day3", disk::SaveMode::Batch).ok());
  // The next committed one: server 1's part drops day3; its Shrink settles day4.
  SaveAll(cluster, dir, disk::SaveMode::Batch, "day4");
  REQUIRE(cluster[1]->Shrink().ok());
  AllEqual(UnseenDays(cluster), 3);  // (the shrink deleted server 1's rows with low scores)
  // The files hold the rows as they were when saved: day4's rows had 2 days.
  auto target = Cluster(1);
  REQUIRE(target[0]->Load(dir).ok());
  CHECK(AllEqual(UnseenDays(target), 2) == rows);
}

// ---- one save per directory -------------------------------------------------------------

TEST_CASE("One save per directory: a second save into it is refused while the first holds the lock", "[checkpoint]") {
  const std::string dir = testing::MakeTempDir("locked");
  // Two jobs (two one-server clusters) saving into one directory.
  auto a = Cluster(1);
  auto b = Cluster(1);
  Train(a, 1, 50);
  Train(b, 1, 51);

  SECTION("a holder outside the runner") {
    auto held = DirLock::Acquire(dir, ServerLockName(0), "save of version vX by a test");
    REQUIRE(held.ok());
    auto refused = b[0]->SavePart(dir, "vb", disk::SaveMode::Checkpoint);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().IsBusy());
    const std::string& msg = refused.status().message();
    CHECK(msg.find(dir) != std::string::npos);
    CHECK(msg.find(ServerLockName(0)) != std::string::npos);
    CHECK(msg.find("save of version vX by a test") != std::string::npos);
    CHECK(msg.find("pid " + std::to_string(getpid())) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir + "/vb.tmp"));  // refused before writing anything
    // A commit needs every server's lock too.
    REQUIRE(a[0]->SavePart(testing::MakeTempDir("elsewhere"), "va", disk::SaveMode::Checkpoint).ok());
    auto commit = a[0]->Commit(dir, "va", disk::SaveMode::Checkpoint);
    CHECK(commit.status().IsBusy());
  }
  SECTION("a save in progress on another server, and on the same one") {
    // Hold one of a's executor threads: its save takes the lock and then waits mid-way.
    std::promise<void> release;
    a[0]->BlockLane(1, release.get_future().share());
    std::promise<StatusOr<SaveOutcome>> first;
    std::thread saver([&] { first.set_value(a[0]->SavePart(dir, "va", disk::SaveMode::Checkpoint)); });
    // The lane and the saver go whatever happens below.
    struct Unblock {
      std::promise<void>* release;
      std::thread* saver;
      ~Unblock() {
        if (release != nullptr) release->set_value();
        saver->join();
      }
    } unblock{&release, &saver};
    const std::string lock_file = dir + "/" + ServerLockName(0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (
        std::chrono::steady_clock::now() < deadline &&
        (!std::filesystem::exists(lock_file) || testing::ReadFile(lock_file).find("save va ") == std::string::npos)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto other = b[0]->SavePart(dir, "vb", disk::SaveMode::Checkpoint);
    REQUIRE_FALSE(other.ok());
    CHECK(other.status().IsBusy());
    CHECK(other.status().message().find("part of save va") != std::string::npos);
    auto same = a[0]->SavePart(dir, "vc", disk::SaveMode::Checkpoint);
    CHECK(same.status().IsBusy());
    release.set_value();
    unblock.release = nullptr;
    auto done = first.get_future().get();
    REQUIRE(done.ok());
    REQUIRE(a[0]->Commit(dir, "va", disk::SaveMode::Checkpoint).ok());
  }
  // Once released, the directory takes the next save.
  SaveAll(b, dir, disk::SaveMode::Checkpoint, "vd");
  auto target = Cluster(1);
  REQUIRE(target[0]->Load(dir).ok());
  CHECK(target[0]->Rows(kSparse) == b[0]->Rows(kSparse));
}

}  // namespace
}  // namespace fleetps::server

namespace fleetps::server {
namespace {

TEST_CASE("FindLatestCheckpoint: the directory's own checkpoint, else its newest committed subdirectory",
          "[checkpoint]") {
  const std::string root = testing::MakeTempDir("latest");
  CHECK(FindLatestCheckpoint(root + "/missing").value().empty());  // a first start: fresh tables
  CHECK(FindLatestCheckpoint(root).value().empty());
  auto cluster = Cluster(1);
  Train(cluster, 1, 3);
  SaveAll(cluster, root + "/day1", disk::SaveMode::Checkpoint, "v1");
  // CURRENT's modification time orders the commits; make day2 clearly the newer one.
  std::filesystem::last_write_time(root + "/day1/CURRENT",
                                   std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  SaveAll(cluster, root + "/day2", disk::SaveMode::Checkpoint, "v1");
  std::filesystem::create_directories(root + "/uncommitted/v1.tmp");
  // A checkpoint whose CURRENT names garbage is skipped, even when it is the newest.
  std::filesystem::create_directories(root + "/broken");
  testing::WriteFile(root + "/broken/CURRENT", "../../etc\n");
  CHECK(FindLatestCheckpoint(root).value() == root + "/day2");
  CHECK(FindLatestCheckpoint(root + "/day1").value() == root + "/day1");  // a save_dir itself
  CHECK(FindLatestCheckpoint(root + "/broken").value().empty());
}

}  // namespace
}  // namespace fleetps::server
