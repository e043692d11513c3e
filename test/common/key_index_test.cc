// KeyIndex against std::unordered_map as the reference: first-seen numbering, growth,
// lookups of absent keys, and reuse after TakeKeys.
#include <catch2/catch.hpp>
#include <random>
#include <unordered_map>

#include "common/key_index.h"

namespace fleetps {

TEST_CASE("KeyIndex numbers keys in first-seen order and grows", "[key_index]") {
  KeyIndex index;  // starts at 16 slots: grows many times below
  std::unordered_map<uint64_t, uint32_t> reference;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20000; ++i) {
    // Small ids repeat (duplicates), large ones are full 64-bit; 0 and ~0 are keys too.
    const uint64_t key = i % 3 == 0 ? rng() % 500 : (i % 1000 == 1 ? ~0ull : rng());
    const auto [it, inserted] = reference.try_emplace(key, static_cast<uint32_t>(reference.size()));
    REQUIRE(index.Insert(key) == it->second);
  }
  REQUIRE(index.size() == reference.size());
  for (const auto& [key, i] : reference) {
    REQUIRE(index.Find(key) == i);
    REQUIRE(index.keys()[i] == key);
  }
  CHECK(index.Find(0x123456789abcdefull) == KeyIndex::kNone);
}

TEST_CASE("KeyIndex::InsertAll de-duplicates a batch; TakeKeys empties it for reuse", "[key_index]") {
  KeyIndex index(4);
  const std::vector<uint64_t> batch = {7, 9, 7, 0, 9, 1ull << 63, 0};
  std::vector<uint32_t> slots(batch.size());
  index.InsertAll(batch, slots.data());
  CHECK(slots == std::vector<uint32_t>{0, 1, 0, 2, 1, 3, 2});
  CHECK(index.keys() == std::vector<uint64_t>{7, 9, 0, 1ull << 63});
  CHECK(index.TakeKeys() == std::vector<uint64_t>{7, 9, 0, 1ull << 63});
  CHECK(index.empty());
  for (uint64_t key : batch) CHECK(index.Find(key) == KeyIndex::kNone);
  CHECK(index.Insert(9) == 0);  // numbering starts again
  CHECK(index.Insert(7) == 1);

  // Many keys colliding on their home slots, then taken: every slot must be free again.
  KeyIndex dense(1000);
  for (uint64_t k = 0; k < 1000; ++k) dense.Insert(k);
  CHECK(dense.TakeKeys().size() == 1000);
  for (uint64_t k = 0; k < 1000; ++k) REQUIRE(dense.Find(k) == KeyIndex::kNone);
  CHECK(dense.Insert(500) == 0);

  // Few keys in a large table (TakeKeys re-probes them instead of sweeping the table),
  // including runs of neighbours that share probe chains.
  KeyIndex sparse(100000);
  for (uint64_t k = 0; k < 300; ++k) sparse.Insert(k * 7919);
  CHECK(sparse.TakeKeys().size() == 300);
  for (uint64_t k = 0; k < 300; ++k) REQUIRE(sparse.Find(k * 7919) == KeyIndex::kNone);
  CHECK(sparse.Insert(42) == 0);
  CHECK(sparse.Insert(7919) == 1);
  // Clear: the same, keeping the capacity.
  sparse.Clear();
  CHECK(sparse.empty());
  CHECK(sparse.Find(42) == KeyIndex::kNone);
  CHECK(sparse.Insert(7919) == 0);
}

}  // namespace fleetps
