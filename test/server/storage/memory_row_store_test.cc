#include "server/storage/memory_row_store.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include <catch2/catch.hpp>

namespace fleetps::server {
namespace {

constexpr uint32_t kRowFloats = 3;

// A row's content as the test writes it: derived from the key and a version.
void Fill(float* row, uint64_t key, int version) {
  row[0] = static_cast<float>(key % 1000003);
  row[1] = static_cast<float>(version);
  row[2] = static_cast<float>(key >> 44);
}
bool Holds(const float* row, uint64_t key, int version) {
  std::vector<float> want(kRowFloats);
  Fill(want.data(), key, version);
  return std::equal(want.begin(), want.end(), row);
}

// key -> how many times each key was seen by ForEach.
std::map<uint64_t, int> Visit(const MemoryRowStore& store) {
  std::map<uint64_t, int> seen;
  REQUIRE(store
              .ForEach([&](uint64_t key, const float*) {
                ++seen[key];
                return Status::OK();
              })
              .ok());
  return seen;
}

TEST_CASE("Random insert/find/erase agrees with std::unordered_map", "[storage]") {
  MemoryRowStore store(kRowFloats);
  std::unordered_map<uint64_t, int> ref;  // key -> version written
  std::mt19937_64 rng(42);
  // Keys from a small pool (so finds and erases hit) plus the extremes.
  std::vector<uint64_t> pool;
  for (int i = 0; i < 5000; ++i) pool.push_back(rng());
  pool.push_back(0);
  pool.push_back(std::numeric_limits<uint64_t>::max());

  for (int op = 0; op < 100000; ++op) {
    const uint64_t key = pool[rng() % pool.size()];
    switch (rng() % 4) {
      case 0:
      case 1: {  // insert or overwrite
        bool inserted = false;
        float* row = store.FindOrInsert(key, &inserted);
        REQUIRE(row != nullptr);
        REQUIRE(inserted == (ref.count(key) == 0));
        Fill(row, key, op);
        ref[key] = op;
        break;
      }
      case 2: {  // find
        const float* row = store.Find(key);
        auto it = ref.find(key);
        REQUIRE((row != nullptr) == (it != ref.end()));
        if (row != nullptr) REQUIRE(Holds(row, key, it->second));
        break;
      }
      case 3: {  // erase
        auto erased = store.Erase(key);
        REQUIRE(erased.ok());
        REQUIRE(*erased == (ref.erase(key) == 1));
        break;
      }
    }
    REQUIRE(store.size() == ref.size());
  }
  // Full check at the end: every live key holds its latest row, erased keys are gone.
  for (uint64_t key : pool) {
    const float* row = store.Find(key);
    auto it = ref.find(key);
    REQUIRE((row != nullptr) == (it != ref.end()));
    if (row != nullptr) CHECK(Holds(row, key, it->second));
  }
  const auto seen = Visit(store);
  CHECK(seen.size() == ref.size());
  for (const auto& [key, count] : seen) CHECK((count == 1 && ref.count(key) == 1));
}

TEST_CASE("Keys 0 and UINT64_MAX are ordinary keys", "[storage]") {
  MemoryRowStore store(kRowFloats);
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  CHECK(store.Find(0) == nullptr);
  CHECK(store.Find(kMax) == nullptr);
  bool inserted = false;
  Fill(store.FindOrInsert(0, &inserted), 0, 1);
  CHECK(inserted);
  CHECK(store.Find(kMax) == nullptr);
  Fill(store.FindOrInsert(kMax, &inserted), kMax, 2);
  CHECK(inserted);
  CHECK(store.size() == 2);
  CHECK(Holds(store.Find(0), 0, 1));
  CHECK(Holds(store.Find(kMax), kMax, 2));
  CHECK(*store.Erase(0));
  CHECK(store.Find(0) == nullptr);
  CHECK(Holds(store.Find(kMax), kMax, 2));
  CHECK_FALSE(*store.Erase(0));
  CHECK(*store.Erase(kMax));
  CHECK(store.size() == 0);
}

TEST_CASE("Growth keeps every row and row pointers stay put", "[storage]") {
  MemoryRowStore store(kRowFloats);
  const size_t initial_capacity = store.capacity();
  const size_t initial_bytes = store.MemoryBytes();
  std::vector<std::pair<uint64_t, float*>> rows;
  for (uint64_t key = 0; key < 200000; ++key) {  // sequential keys: the worst case for a weak hash
    bool inserted = false;
    float* row = store.FindOrInsert(key * 7919, &inserted);
    REQUIRE(inserted);
    Fill(row, key * 7919, 0);
    rows.emplace_back(key * 7919, row);
  }
  CHECK(store.size() == 200000);
  CHECK(store.capacity() > initial_capacity);
  CHECK(store.size() <= store.capacity() * 3 / 4);
  CHECK(store.MemoryBytes() > initial_bytes + 200000 * kRowFloats * sizeof(float));
  for (const auto& [key, row] : rows) {
    REQUIRE(store.Find(key) == row);  // same address after many doublings
    REQUIRE(Holds(row, key, 0));
  }
  const auto seen = Visit(store);
  CHECK(seen.size() == rows.size());
  for (const auto& [key, count] : seen) REQUIRE(count == 1);
}

TEST_CASE("Reserve pre-sizes the index", "[storage]") {
  MemoryRowStore store(kRowFloats, 1000);
  const size_t capacity = store.capacity();
  CHECK(capacity * 3 / 4 >= 1000);
  bool inserted = false;
  for (uint64_t key = 0; key < 1000; ++key) store.FindOrInsert(key, &inserted);
  CHECK(store.capacity() == capacity);
  store.Reserve(100000);
  CHECK(store.capacity() * 3 / 4 >= 100000);
  for (uint64_t key = 0; key < 1000; ++key) CHECK(store.Find(key) != nullptr);
}

TEST_CASE("Erased rows are reused", "[storage]") {
  MemoryRowStore store(kRowFloats);
  bool inserted = false;
  for (uint64_t key = 0; key < 10000; ++key) store.FindOrInsert(key, &inserted);
  size_t bytes = 0;  // after the first round, which sizes the free list
  for (int round = 0; round < 5; ++round) {
    if (round == 1) bytes = store.MemoryBytes();
    for (uint64_t key = 0; key < 10000; ++key) REQUIRE(*store.Erase(key));
    CHECK(store.size() == 0);
    for (uint64_t key = 0; key < 10000; ++key) {
      store.FindOrInsert(key + 1000000 * (round + 1), &inserted);
      REQUIRE(inserted);
    }
    for (uint64_t key = 0; key < 10000; ++key) {
      REQUIRE(*store.Erase(key + 1000000 * (round + 1)));
      store.FindOrInsert(key, &inserted);
    }
  }
  CHECK(store.size() == 10000);
  CHECK(store.MemoryBytes() == bytes);  // no growth from churn: rows and slots were reused
}

TEST_CASE("Batch calls: missing keys, duplicates, insert flags", "[storage]") {
  MemoryRowStore store(kRowFloats);
  std::vector<uint64_t> keys;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000; ++i) keys.push_back(rng());
  keys.push_back(keys[10]);  // duplicate of an earlier key in the same batch
  keys.push_back(0);

  std::vector<float*> rows(keys.size());
  CHECK(store.FindBatch(keys.data(), keys.size(), kRowFloats, rows.data()).ok());
  for (float* row : rows) CHECK(row == nullptr);

  std::unique_ptr<bool[]> inserted(new bool[keys.size()]);
  REQUIRE(store.FindOrInsertBatch(keys.data(), keys.size(), kRowFloats, rows.data(), inserted.get()).ok());
  CHECK(store.size() == keys.size() - 1);
  for (size_t k = 0; k < keys.size(); ++k) {
    CHECK(inserted[k] == (k != 1000));  // the duplicate found the row its first occurrence made
    CHECK(rows[k] == store.Find(keys[k]));
    if (inserted[k]) Fill(rows[k], keys[k], 0);
  }
  CHECK(rows[1000] == rows[10]);

  keys.push_back(12345);  // absent
  rows.resize(keys.size());
  CHECK(store.FindBatch(keys.data(), keys.size(), kRowFloats, rows.data()).ok());
  for (size_t k = 0; k + 1 < keys.size(); ++k) CHECK(Holds(rows[k], keys[k], 0));
  CHECK(rows.back() == nullptr);
}

TEST_CASE("ForEach stops at the first error and returns it", "[storage]") {
  MemoryRowStore store(kRowFloats);
  bool inserted = false;
  for (uint64_t key = 0; key < 100; ++key) store.FindOrInsert(key, &inserted);
  int visited = 0;
  const Status st = store.ForEach(
      [&](uint64_t, const float*) { return ++visited == 10 ? Status::IOError("disk full") : Status::OK(); });
  CHECK(st.IsIOError());
  CHECK(visited == 10);
}

}  // namespace
}  // namespace fleetps::server
