// SparseTable beyond the plain gradient path: GEO delta pushes, the CTR accessor, the
// RocksDB tier, shrink. Single server; keys are grouped by shard like the service does.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "common/sharding.h"
#include "server/checkpoint/row_file.h"
#include "server/table/dense_table.h"
#include "server/table/sparse_table.h"
#include "test/support/process.h"

namespace fleetps::server {
namespace {

TableOptions Options(uint32_t dim, uint32_t shards, OptimizerKind opt) {
  TableOptions o;
  o.id = 4;
  o.name = "emb";
  o.kind = TableKind::kSparse;
  o.dim = dim;
  o.shards = shards;
  o.optimizer.kind = opt;
  o.optimizer.learning_rate = 0.5f;
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = 99;
  return o;
}

std::unique_ptr<SparseTable> Make(const TableOptions& o, const StorageOptions& storage = {}) {
  auto t = SparseTable::Create(o, 0, 1, storage);
  REQUIRE(t.ok());
  return std::move(t).value();
}

// Routes keys by shard (one server) and calls the table like the service does.
std::map<uint32_t, std::vector<uint32_t>> Route(const SparseTable& t, const std::vector<uint64_t>& keys) {
  std::map<uint32_t, std::vector<uint32_t>> by_shard;
  for (uint32_t i = 0; i < keys.size(); ++i) by_shard[t.ShardOf(keys[i])].push_back(i);
  return by_shard;
}
void Push(SparseTable& t, const std::vector<uint64_t>& keys, const std::vector<float>& grads,
          PushMode mode = PushMode::kGradient, const std::vector<float>& shows = {},
          const std::vector<float>& clicks = {}) {
  PushCounters c;
  c.shows = shows.empty() ? nullptr : shows.data();
  c.clicks = clicks.empty() ? nullptr : clicks.data();
  for (const auto& [s, idx] : Route(t, keys)) {
    REQUIRE(t.PushShard(s, keys.data(), idx.data(), idx.size(), grads.data(), c, mode).ok());
  }
}
std::vector<float> Pull(SparseTable& t, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * t.dim());
  for (const auto& [s, idx] : Route(t, keys)) {
    REQUIRE(t.PullShard(s, keys.data(), idx.data(), idx.size(), out.data()).ok());
  }
  return out;
}
// key -> stored row (all floats), over every shard.
std::map<uint64_t, std::vector<float>> Rows(const SparseTable& t) {
  std::map<uint64_t, std::vector<float>> rows;
  for (uint32_t s = 0; s < t.num_shards(); ++s) {
    REQUIRE(t.ForEachRow(s, [&](uint64_t key, const float* row) {
               rows[key].assign(row, row + t.row_floats());
               return Status::OK();
             }).ok());
  }
  return rows;
}

TEST_CASE("SparseTable: a GEO delta push adds to the weights and leaves optimizer state", "[sparse_table]") {
  auto t = Make(Options(3, 4, OptimizerKind::kAdagrad));
  const std::vector<uint64_t> keys = {1, 2, 1};
  const auto initial = Pull(*t, {1, 2});
  // Key 1 gets two deltas in one push (applied in order), key 2 one; both rows are created
  // from their initial values first.
  Push(*t, keys, {0.5f, 1.0f, -2.0f, 0.25f, 0.0f, 4.0f, 1.0f, 1.0f, 1.0f}, PushMode::kDelta);
  const auto after = Pull(*t, {1, 2});
  CHECK(after[0] == initial[0] + 0.5f + 1.0f);
  CHECK(after[1] == initial[1] + 1.0f + 1.0f);
  CHECK(after[2] == initial[2] - 2.0f + 1.0f);
  CHECK(after[3] == initial[3] + 0.25f);
  CHECK(after[4] == initial[4]);
  CHECK(after[5] == initial[5] + 4.0f);
  // Optimizer state untouched: g2sum still at initial_accumulator (0) for every weight.
  for (const auto& [key, row] : Rows(*t)) {
    for (uint32_t i = 0; i < 3; ++i) CHECK(row[3 + i] == 0.0f);
    CHECK(t->accessor().Flags(row.data()) == (RowAccessor::kChanged | RowAccessor::kDirty));
  }
  // A gradient push afterwards does use the optimizer (Adagrad: g2sum = 4).
  Push(*t, {2}, {2.0f, 0.0f, 0.0f});
  CHECK(Rows(*t)[2][3] == 4.0f);
}

TEST_CASE("DenseTable: a GEO delta adds to the slice without optimizer", "[dense_table]") {
  TableOptions o;
  o.id = 1;
  o.name = "d";
  o.kind = TableKind::kDense;
  o.dim = 6;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = 1.0f;
  auto d = DenseTable::Create(o, 1, 2);  // slice [3, 6)
  REQUIRE(d.ok());
  const float delta[2] = {0.5f, -2.0f};
  REQUIRE((*d)->AddDelta(4, 2, delta).ok());
  std::vector<float> w(3);
  REQUIRE((*d)->Pull(3, 3, w.data()).ok());
  CHECK(w == std::vector<float>{1.0f, 1.5f, -1.0f});
  CHECK((*d)->AddDelta(2, 2, delta).IsInvalidArgument());  // outside the slice
}

TEST_CASE("SparseTable: CTR accessor: lazy embedx, statistics, shrink", "[sparse_table]") {
  TableOptions o = Options(4, 2, OptimizerKind::kSgd);
  o.optimizer.learning_rate = 1.0f;
  o.accessor.kind = AccessorKind::kCtr;
  o.accessor.nonclk_coeff = 0.1f;
  o.accessor.click_coeff = 1.0f;
  o.accessor.embedx_threshold = 2.0f;
  o.accessor.show_click_decay_rate = 0.5f;
  o.accessor.delete_threshold = 0.5f;
  auto t = Make(o);
  auto init = Initializer::Create(o.initializer);
  REQUIRE(init.ok());
  const std::vector<uint64_t> keys = {10, 20};
  // Missing keys: embed_w from the initializer, zeros for embedx.
  CHECK(Pull(*t, keys) == std::vector<float>{init->Value(10, 0), 0, 0, 0, init->Value(20, 0), 0, 0, 0});

  const std::vector<float> ones(8, 1.0f);
  // Key 10: show 10, click 1 -> score 0.9 + 1 = 1.9 < 2. Key 20: show 5, click 2 -> 0.3 + 2 = 2.3.
  Push(*t, keys, ones, PushMode::kGradient, {10, 5}, {1, 2});
  auto v = Pull(*t, keys);
  CHECK(v[0] == init->Value(10, 0) - 1.0f);
  CHECK(v[1] == 0.0f);  // key 10 not extended
  CHECK(v[4] == init->Value(20, 0) - 1.0f);
  for (uint32_t c = 1; c < 4; ++c) CHECK(v[4 + c] == init->Value(20, c));  // key 20 extended, fresh embedx

  // Shrink: decay by 0.5: key 10 -> 5, 0.5: 0.45 + 0.5 = 0.95 kept; key 20 -> 2.5, 1: 0.15 + 1 kept.
  for (uint32_t s = 0; s < t->num_shards(); ++s) REQUIRE(t->ShrinkShard(s).ok());
  auto rows = Rows(*t);
  REQUIRE(rows.size() == 2);
  const uint32_t st = t->accessor().stats_offset();
  CHECK(rows[10][st + RowAccessor::kShow] == 5.0f);
  CHECK(rows[10][st + RowAccessor::kClick] == 0.5f);
  // Twice more: key 10 -> 1.25, 0.125: 0.1125 + 0.125 = 0.2375 < 0.5 deleted; key 20 -> 0.625,
  // 0.25: 0.0375 + 0.25 = 0.2875 < 0.5 deleted as well, on the second.
  uint64_t deleted = 0;
  for (int round = 0; round < 2; ++round) {
    for (uint32_t s = 0; s < t->num_shards(); ++s) {
      auto d = t->ShrinkShard(s);
      REQUIRE(d.ok());
      deleted += *d;
    }
  }
  CHECK(deleted == 2);
  CHECK(Rows(*t).empty());
}

TEST_CASE("SparseTable: a budgeted table on RocksDB matches an all-memory one exactly", "[sparse_table]") {
  TableOptions o = Options(8, 2, OptimizerKind::kAdam);
  TableOptions small = o;
  // 3/4 of the budget over 2 shards: about 3000 RAM rows per shard of (8 + 2 + 16 + 1 + 2)
  // floats, far fewer than the 20000 rows pushed.
  small.memory_budget_bytes = 1u << 20;
  auto memory = Make(o);
  auto tiered = Make(small, StorageOptions{testing::MakeTempDir("tiered_table") + "/spill"});
  REQUIRE(tiered->tiered());
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> g(-1, 1);
  for (int round = 0; round < 30; ++round) {
    std::vector<uint64_t> keys(2000);
    for (auto& k : keys) k = rng() % 20000;
    std::vector<float> grads(keys.size() * 8);
    for (auto& x : grads) x = g(rng);
    Push(*memory, keys, grads);
    Push(*tiered, keys, grads);
    if (round % 5 == 4) CHECK(Pull(*memory, keys) == Pull(*tiered, keys));
  }
  uint64_t disk = 0, rows = 0;
  for (uint32_t s = 0; s < 2; ++s) {
    disk += tiered->Stats(s).disk_rows;
    rows += tiered->Stats(s).rows;
  }
  CHECK(disk > rows / 2);  // most rows live on RocksDB
  CHECK(rows == Rows(*memory).size());
  // Every stored float (weights, Adam moments and beta powers, flags) is identical.
  CHECK(Rows(*tiered) == Rows(*memory));
}

TEST_CASE("SparseTable: a budget too small for the shards is refused", "[sparse_table]") {
  TableOptions o = Options(8, 64, OptimizerKind::kSgd);
  o.memory_budget_bytes = 1u << 20;
  auto t = SparseTable::Create(o, 0, 1, StorageOptions{testing::MakeTempDir("tiny") + "/spill"});
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().message().find("memory_budget_bytes") != std::string::npos);
  auto no_dir = SparseTable::Create(Options(8, 1, OptimizerKind::kSgd), 0, 1);
  CHECK(no_dir.ok());  // no budget: no directory needed
  o.shards = 1;
  auto missing = SparseTable::Create(o, 0, 1);
  CHECK(missing.status().IsInvalidArgument());
}

// Keys of a SparseRows file.
std::vector<uint64_t> FileKeys(const std::string& path) {
  std::vector<uint64_t> keys;
  auto reader = BlockFileReader::Open(path, disk::FileKind::SparseRows);
  REQUIRE(reader.ok());
  while (true) {
    auto block = NextSparseBlock(**reader);
    REQUIRE(block.ok());
    if (*block == nullptr) break;
    keys.insert(keys.end(), (*block)->keys()->begin(), (*block)->keys()->end());
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Every row's floats with the RAM-only kDirty bit left out.
std::map<uint64_t, std::vector<float>> SavedRows(const SparseTable& t) {
  auto rows = Rows(t);
  for (auto& [k, row] : rows) t.accessor().SetFlags(row.data(), t.accessor().SavedFlags(row.data()));
  return rows;
}

TEST_CASE("SparseTable: SaveShard leaves rows as they are; ApplySaveEffects skips rows changed since",
          "[sparse_table]") {
  for (uint64_t budget : {uint64_t{0}, uint64_t{1} << 20}) {
    CAPTURE(budget);
    TableOptions o = Options(4, 1, OptimizerKind::kAdagrad);
    o.accessor.kind = AccessorKind::kCtr;
    o.accessor.embedx_threshold = 0;
    o.memory_budget_bytes = budget;
    const std::string dir = testing::MakeTempDir("save_effects");
    auto t = Make(o, StorageOptions{dir + "/spill"});
    std::mt19937_64 rng(7);
    std::vector<uint64_t> keys(budget == 0 ? 500 : 20000);  // tiered: thousands of rows on RocksDB
    for (auto& k : keys) k = rng();
    std::vector<float> grads(keys.size() * 4, 0.5f), shows(keys.size(), 2.0f), clicks(keys.size(), 1.0f);
    Push(*t, keys, grads, PushMode::kGradient, shows, clicks);
    if (budget != 0) CHECK(t->Stats(0).disk_rows > 0);
    const RowAccessor& acc = t->accessor();
    const uint32_t st = acc.stats_offset();

    for (disk::SaveMode mode : {disk::SaveMode::Delta, disk::SaveMode::Batch}) {
      CAPTURE(static_cast<int>(mode));
      const auto before = SavedRows(*t);
      auto saved = t->SaveShard(0, mode, dir + "/shard-" + std::to_string(static_cast<int>(mode)));
      REQUIRE(saved.ok());
      CHECK(SavedRows(*t) == before);  // a save alone changes nothing a checkpoint or a pull sees
      // 10 rows change after the save.
      const std::vector<uint64_t> later(keys.begin(), keys.begin() + 10);
      Push(*t, later, std::vector<float>(40, 0.25f), PushMode::kGradient, std::vector<float>(10, 1.0f),
           std::vector<float>(10, 0.0f));
      const auto pushed = SavedRows(*t);
      auto changed = t->ApplySaveEffects(0, mode);
      REQUIRE(changed.ok());
      CHECK(*changed == keys.size() - later.size());
      auto after = SavedRows(*t);
      for (const auto& [k, row] : after) {
        const bool is_later = std::find(later.begin(), later.end(), k) != later.end();
        if (is_later) {
          CHECK(row == pushed.at(k));  // kept its new state
          CHECK((acc.Flags(row.data()) & RowAccessor::kChanged) != 0);
          continue;
        }
        if (mode == disk::SaveMode::Delta) {
          CHECK((acc.Flags(row.data()) & RowAccessor::kChanged) == 0);
          CHECK(row[st + RowAccessor::kDeltaScore] == 0.0f);
        } else {
          CHECK(row[st + RowAccessor::kUnseenDays] == before.at(k)[st + RowAccessor::kUnseenDays] + 1);
        }
      }
    }
    // The next delta holds exactly the rows changed after the last one.
    const std::string next = dir + "/next";
    auto delta = t->SaveShard(0, disk::SaveMode::Delta, next);
    REQUIRE(delta.ok());
    CHECK(delta->rows == 10);
    std::vector<uint64_t> want(keys.begin(), keys.begin() + 10);
    std::sort(want.begin(), want.end());
    CHECK(FileKeys(next) == want);
  }
}

}  // namespace
}  // namespace fleetps::server
