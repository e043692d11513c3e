#include "server/storage/tiered_row_store.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include <catch2/catch.hpp>

#include "server/storage/spill_db.h"
#include "test/support/process.h"

namespace fleetps::server {
namespace {

constexpr uint32_t kTieredRowFloats = 5;
constexpr size_t kMemoryRows = TieredRowStore::kMinMemoryRows;

std::unique_ptr<SpillDb> OpenSpill() {
  SpillDbOptions options;
  options.dir = testing::MakeTempDir("spill") + "/db";
  options.block_cache_bytes = 1u << 20;
  options.write_buffer_bytes = 1u << 20;
  auto db = SpillDb::Open(options);
  REQUIRE(db.ok());
  return std::move(db).value();
}

// A row's content as the test writes it: derived from the key and a version, with values
// that are not round numbers so a lost or shifted float shows.
std::vector<float> Content(uint64_t key, int version) {
  std::vector<float> row(kTieredRowFloats);
  for (uint32_t i = 0; i < kTieredRowFloats; ++i) {
    row[i] = static_cast<float>((key % 100003) * 0.001 + version * 1.5 + i * 0.0625);
  }
  return row;
}

// Every row the store holds, by ForEach; fails on a key visited twice.
std::map<uint64_t, std::vector<float>> Dump(const RowStore& store) {
  std::map<uint64_t, std::vector<float>> rows;
  REQUIRE(store
              .ForEach([&](uint64_t key, const float* row) {
                const bool fresh = rows.emplace(key, std::vector<float>(row, row + kTieredRowFloats)).second;
                REQUIRE(fresh);
                return Status::OK();
              })
              .ok());
  return rows;
}

// Writes `version` into the rows of `keys` (inserting missing ones) in batches of 256.
void Write(TieredRowStore& store, const std::vector<uint64_t>& keys, int version,
           std::map<uint64_t, std::vector<float>>* reference) {
  for (size_t b = 0; b < keys.size(); b += 256) {
    const size_t n = std::min<size_t>(256, keys.size() - b);
    std::vector<float*> rows(n);
    std::unique_ptr<bool[]> inserted(new bool[n]);
    REQUIRE(store.FindOrInsertBatch(keys.data() + b, n, kTieredRowFloats, rows.data(), inserted.get()).ok());
    for (size_t k = 0; k < n; ++k) {
      const uint64_t key = keys[b + k];
      CHECK(inserted[k] == (reference->count(key) == 0));
      const auto content = Content(key, version);
      std::copy(content.begin(), content.end(), rows[k]);
      (*reference)[key] = content;
    }
  }
}

TEST_CASE("TieredRowStore: budget arithmetic", "[storage]") {
  CHECK(TieredRowStore::MemoryRowsFor(1000, 8) == 0);  // not even kMinMemoryRows
  const size_t rows = TieredRowStore::MemoryRowsFor(64u << 20, 27);
  CHECK(rows > 300000);
  CHECK(MemoryRowStore::BytesFor(rows + 256, 29) <= (64u << 20));
  CHECK(MemoryRowStore::BytesFor(rows + 300, 29) > (64u << 20));
}

TEST_CASE("TieredRowStore: rows beyond the memory limit go to RocksDB and come back exactly", "[storage]") {
  auto spill = OpenSpill();
  TieredRowStore store(kTieredRowFloats, kMemoryRows, spill.get(), 3);
  std::map<uint64_t, std::vector<float>> reference;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys(20000);
  for (auto& k : keys) k = rng();
  keys.push_back(0);
  keys.push_back(UINT64_MAX);
  Write(store, keys, 1, &reference);
  // One more call runs the eviction the last batch made due.
  REQUIRE(store.FindBatch(keys.data(), 1, kTieredRowFloats, std::vector<float*>(1).data()).ok());

  CHECK(store.size() == keys.size());
  CHECK(store.memory_rows() <= kMemoryRows + 256);
  CHECK(store.disk_rows() >= keys.size() - kMemoryRows - 256);
  CHECK(store.disk_rows() + store.memory_rows() == store.size());
  CHECK(Dump(store) == reference);

  // Read every row back through FindBatch (promoting from disk); values are exact.
  for (size_t b = 0; b < keys.size(); b += 256) {
    const size_t n = std::min<size_t>(256, keys.size() - b);
    std::vector<float*> rows(n);
    REQUIRE(store.FindBatch(keys.data() + b, n, kTieredRowFloats, rows.data()).ok());
    for (size_t k = 0; k < n; ++k) {
      REQUIRE(rows[k] != nullptr);
      CHECK(std::vector<float>(rows[k], rows[k] + kTieredRowFloats) == reference[keys[b + k]]);
    }
  }
  CHECK(store.promoted() > 0);
  CHECK(store.size() == keys.size());
  CHECK(store.memory_rows() <= kMemoryRows + 256);

  // Overwrite half of them (promoted rows become dirty and must be written back on
  // eviction), interleaved with reads that evict them again.
  std::vector<uint64_t> half(keys.begin(), keys.begin() + keys.size() / 2);
  Write(store, half, 2, &reference);
  for (size_t b = 0; b < keys.size(); b += 256) {
    const size_t n = std::min<size_t>(256, keys.size() - b);
    std::vector<float*> rows(n);
    REQUIRE(store.FindBatch(keys.data() + b, n, kTieredRowFloats, rows.data()).ok());
  }
  CHECK(Dump(store) == reference);
  CHECK(store.size() == reference.size());
  // Missing keys stay missing, in both tiers.
  std::vector<uint64_t> absent = {12345, 67890};
  std::vector<float*> rows(2);
  REQUIRE(store.FindBatch(absent.data(), 2, kTieredRowFloats, rows.data()).ok());
  CHECK(rows[0] == nullptr);
  CHECK(rows[1] == nullptr);
}

TEST_CASE("TieredRowStore: random operations agree with a std::map", "[storage]") {
  auto spill = OpenSpill();
  TieredRowStore store(kTieredRowFloats, kMemoryRows, spill.get(), 0);
  std::map<uint64_t, std::vector<float>> reference;
  std::mt19937_64 rng(42);
  std::vector<uint64_t> pool(6000);
  for (auto& k : pool) k = rng();
  int version = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<uint64_t> keys(1 + rng() % 300);
    for (auto& k : keys) k = pool[rng() % pool.size()];  // duplicates included
    switch (rng() % 4) {
      case 0: {  // write (duplicates: the last write wins, one row)
        std::vector<float*> rows(keys.size());
        std::unique_ptr<bool[]> inserted(new bool[keys.size()]);
        REQUIRE(store.FindOrInsertBatch(keys.data(), keys.size(), kTieredRowFloats, rows.data(), inserted.get()).ok());
        std::set<uint64_t> seen;
        for (size_t k = 0; k < keys.size(); ++k) {
          const bool first = seen.insert(keys[k]).second;
          CHECK(inserted[k] == (first && reference.count(keys[k]) == 0));
          const auto content = Content(keys[k], ++version);
          std::copy(content.begin(), content.end(), rows[k]);
          reference[keys[k]] = content;
        }
        break;
      }
      case 1:
      case 2: {  // read
        std::vector<float*> rows(keys.size());
        REQUIRE(store.FindBatch(keys.data(), keys.size(), kTieredRowFloats, rows.data()).ok());
        for (size_t k = 0; k < keys.size(); ++k) {
          auto it = reference.find(keys[k]);
          if (it == reference.end()) {
            CHECK(rows[k] == nullptr);
          } else {
            REQUIRE(rows[k] != nullptr);
            CHECK(std::vector<float>(rows[k], rows[k] + kTieredRowFloats) == it->second);
          }
        }
        break;
      }
      case 3: {  // erase a few
        for (size_t k = 0; k < std::min<size_t>(keys.size(), 20); ++k) {
          auto erased = store.Erase(keys[k]);
          REQUIRE(erased.ok());
          CHECK(*erased == (reference.erase(keys[k]) == 1));
        }
        break;
      }
    }
    REQUIRE(store.size() == reference.size());
  }
  CHECK(store.disk_rows() > 0);
  CHECK(Dump(store) == reference);
}

TEST_CASE("TieredRowStore: the coldest rows leave RAM first", "[storage]") {
  auto spill = OpenSpill();
  TieredRowStore store(kTieredRowFloats, kMemoryRows, spill.get(), 1);
  std::map<uint64_t, std::vector<float>> reference;
  std::vector<uint64_t> hot;
  for (uint64_t k = 0; k < 200; ++k) hot.push_back(k * 7919);
  Write(store, hot, 1, &reference);
  // Stream many cold keys through, touching the hot ones between batches.
  std::mt19937_64 rng(3);
  for (int round = 0; round < 40; ++round) {
    std::vector<uint64_t> cold(256);
    for (auto& k : cold) k = rng() | (uint64_t{1} << 63);
    Write(store, cold, 1, &reference);
    std::vector<float*> rows(hot.size());
    REQUIRE(store.FindBatch(hot.data(), hot.size(), kTieredRowFloats, rows.data()).ok());
  }
  REQUIRE(store.disk_rows() > 5000);
  const uint64_t promoted_before = store.promoted();
  std::vector<float*> rows(hot.size());
  REQUIRE(store.FindBatch(hot.data(), hot.size(), kTieredRowFloats, rows.data()).ok());
  // Sampled LRU: nearly every hot row stayed in RAM (none or few read back from disk).
  CHECK(store.promoted() - promoted_before < 20);
  CHECK(Dump(store) == reference);
}

TEST_CASE("TieredRowStore: Rewrite modifies and erases in both tiers; Clear empties both", "[storage]") {
  auto spill = OpenSpill();
  TieredRowStore store(kTieredRowFloats, kMemoryRows, spill.get(), 2);
  TieredRowStore other(kTieredRowFloats, kMemoryRows, spill.get(), 5);  // another shard, same RocksDB
  std::map<uint64_t, std::vector<float>> reference, other_reference;
  std::vector<uint64_t> keys(5000);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k * 1000003;
  Write(store, keys, 1, &reference);
  Write(other, keys, 7, &other_reference);
  REQUIRE(store.FindBatch(keys.data(), 1, kTieredRowFloats, std::vector<float*>(1).data()).ok());
  REQUIRE(store.disk_rows() > 3000);

  // Erase odd keys, add 1 to the first float of even ones.
  REQUIRE(store
              .Rewrite([&](uint64_t key, float* row) {
                if ((key / 1000003) % 2 == 1) return RowStore::RowAction::kErase;
                row[0] += 1.0f;
                return RowStore::RowAction::kModified;
              })
              .ok());
  for (auto it = reference.begin(); it != reference.end();) {
    if ((it->first / 1000003) % 2 == 1) {
      it = reference.erase(it);
    } else {
      it->second[0] += 1.0f;
      ++it;
    }
  }
  CHECK(store.size() == reference.size());
  CHECK(Dump(store) == reference);
  // Read everything back through the batch path too.
  std::vector<float*> rows(1);
  for (uint64_t key : keys) {
    REQUIRE(store.FindBatch(&key, 1, kTieredRowFloats, rows.data()).ok());
    auto it = reference.find(key);
    if (it == reference.end()) {
      CHECK(rows[0] == nullptr);
    } else {
      REQUIRE(rows[0] != nullptr);
      CHECK(std::vector<float>(rows[0], rows[0] + kTieredRowFloats) == it->second);
    }
  }

  REQUIRE(store.Clear().ok());
  CHECK(store.size() == 0);
  CHECK(Dump(store).empty());
  REQUIRE(store.FindBatch(keys.data(), 1, kTieredRowFloats, rows.data()).ok());
  CHECK(rows[0] == nullptr);
  // The other shard's range is untouched.
  CHECK(Dump(other) == other_reference);
}

TEST_CASE("TieredRowStore: InsertAbsentBatch fills RAM, then writes straight to RocksDB", "[storage]") {
  auto spill = OpenSpill();
  TieredRowStore store(kTieredRowFloats, kMemoryRows, spill.get(), 4);
  std::map<uint64_t, std::vector<float>> reference;
  std::vector<uint64_t> keys(5000);
  std::vector<float> rows;
  for (uint64_t k = 0; k < keys.size(); ++k) {
    keys[k] = k * 7 + 1;
    const auto content = Content(keys[k], 3);
    rows.insert(rows.end(), content.begin(), content.end());
    reference[keys[k]] = content;
  }
  for (size_t b = 0; b < keys.size(); b += 700) {
    const size_t n = std::min<size_t>(700, keys.size() - b);
    REQUIRE(store.InsertAbsentBatch(keys.data() + b, n, rows.data() + b * kTieredRowFloats).ok());
  }
  CHECK(store.memory_rows() == kMemoryRows);
  CHECK(store.disk_rows() == keys.size() - kMemoryRows);
  CHECK(store.size() == keys.size());
  CHECK(store.evicted() == 0);  // nothing went through eviction
  CHECK(Dump(store) == reference);
  // Then the normal paths: reads promote, writes work, everything stays exact.
  Write(store, std::vector<uint64_t>(keys.begin(), keys.begin() + 2000), 4, &reference);
  CHECK(Dump(store) == reference);
  CHECK(store.size() == keys.size());
}

TEST_CASE("MemoryRowStore: Rewrite and Clear", "[storage]") {
  MemoryRowStore store(kTieredRowFloats);
  std::map<uint64_t, std::vector<float>> reference;
  for (uint64_t key = 0; key < 1000; ++key) {
    bool inserted = false;
    float* row = store.FindOrInsert(key, &inserted);
    const auto content = Content(key, 0);
    std::copy(content.begin(), content.end(), row);
    if (key % 3 != 0) reference[key] = content;
  }
  REQUIRE(store
              .Rewrite([](uint64_t key, float*) {
                return key % 3 == 0 ? RowStore::RowAction::kErase : RowStore::RowAction::kKeep;
              })
              .ok());
  CHECK(Dump(store) == reference);
  REQUIRE(store.Clear().ok());
  CHECK(store.size() == 0);
  CHECK(Dump(store).empty());
  bool inserted = false;
  CHECK(store.FindOrInsert(5, &inserted) != nullptr);
  CHECK(inserted);
}

}  // namespace
}  // namespace fleetps::server
