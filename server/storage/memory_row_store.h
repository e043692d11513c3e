#pragma once
// MemoryRowStore: the memory tier. Every row lives in RAM.
//
// Structure: an open-addressing hash index (linear probing, power-of-two capacity) from key
// to row number, plus a row arena of fixed-size chunks.
//  - Slots are {key, row number} (16 bytes), kept apart from the rows: growing rehashes only
//    the slots, and an empty slot costs 16 bytes instead of a whole row.
//  - Keys are full-range uint64 (0 and UINT64_MAX are valid keys): a slot is empty when its
//    row number is kNoRow; no key value is reserved.
//  - The slot index is the top bits of MixKey(key). Not the low bits: PlaceKey
//    (common/sharding.h) picks server and shard from the same mix modulo the server and
//    shard counts, which for power-of-two counts are low bits shared by every key of a shard.
//  - The slot array doubles before it passes 3/4 full and never shrinks.
//  - Erase uses backward-shift deletion (no tombstones), so probes stay short under churn.
//    The erased row goes to a free list and is reused by the next insert.
//  - Rows never move: a row pointer stays valid until its key is erased or the store is
//    destroyed. This is stronger than RowStore's contract; code written against RowStore must
//    not rely on it.
//  - The batch calls prefetch the slot of the key kPrefetchDistance ahead and the cache lines
//    holding the first touch_floats floats of each row found, so the caller's pass over the
//    returned rows hits cache. Chunks are 64-byte aligned, so a row whose size divides 64
//    bytes never straddles two lines.
//
// Thread-safety: none (see RowStore). Not copyable.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "common/sharding.h"
#include "server/storage/row_store.h"

namespace fleetps::server {

class MemoryRowStore final : public RowStore {
 public:
  // Row numbers are uint32; the last value marks an empty slot.
  static constexpr size_t kMaxRows = UINT32_MAX - 1;
  // Keys looked ahead by the batch calls.
  static constexpr size_t kPrefetchDistance = 8;

  // row_floats >= 1. `expected_rows` pre-sizes the index (0: start small).
  explicit MemoryRowStore(uint32_t row_floats, size_t expected_rows = 0);

  // RowStore. FindOrInsertBatch is Busy only when a row cannot be added (kMaxRows rows held,
  // or no memory for a new chunk).
  Status FindBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows) override;
  Status FindOrInsertBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows,
                           bool* inserted) override;
  StatusOr<bool> Erase(uint64_t key) override;
  Status ForEach(const RowVisitor& visit) const override;
  Status Rewrite(const RowRewriter& rewrite) override;
  // Upserts (a present key is overwritten).
  Status InsertAbsentBatch(const uint64_t* keys, size_t n, const float* rows) override;
  // Frees every row and shrinks the index back to its minimum.
  Status Clear() override;
  size_t size() const override { return size_; }
  size_t MemoryBytes() const override;

  // Single-key forms, no prefetch.
  // The row of `key`, or nullptr.
  float* Find(uint64_t key) { return RowOrNull(FindRowNumber(key)); }
  const float* Find(uint64_t key) const { return RowOrNull(FindRowNumber(key)); }
  // The row of `key`, inserted (floats unspecified, *inserted = true) when absent; nullptr
  // when a row cannot be added (see FindOrInsertBatch).
  float* FindOrInsert(uint64_t key, bool* inserted);

  // Sizes the index for `rows` rows without growing again.
  void Reserve(size_t rows) override;
  // Slots in the index (a power of two).
  size_t capacity() const { return slots_.size(); }
  // Calls visit(key, row) for every row whose slot is in [first, first + count), slots taken
  // modulo capacity(): a window over the index in hash order, for sampling rows (eviction).
  // `visit` must not call into the store.
  template <typename Visit>
  void ScanSlots(size_t first, size_t count, Visit&& visit) const {
    for (size_t i = 0; i < count; ++i) {
      const Slot& slot = slots_[(first + i) & mask_];
      if (slot.row != kNoRow) visit(slot.key, Row(slot.row));
    }
  }
  // Memory taken by `rows` rows of row_floats floats in a store Reserve()d for them, bytes
  // (index plus rows; chunk rounding and allocator overhead not counted).
  static size_t BytesFor(size_t rows, uint32_t row_floats);

 private:
  static constexpr uint32_t kNoRow = UINT32_MAX;
  static constexpr uintptr_t kCacheLine = 64;  // bytes; also the row chunks' alignment
  struct Slot {
    uint64_t key;
    uint32_t row;  // kNoRow: empty
  };

  size_t Home(uint64_t key) const { return static_cast<size_t>(MixKey(key) >> shift_); }
  size_t Next(size_t slot) const { return (slot + 1) & mask_; }
  // Prefetch helpers must be always_inline: GCC 12 deduces a function whose only effect is a
  // prefetch to be `const` and deletes the calls to it, silently (measured: pulls 2x slower).
  [[gnu::always_inline]] void PrefetchSlot(uint64_t key) const { __builtin_prefetch(slots_.data() + Home(key)); }
  // Prefetches the cache lines holding row[0, floats).
  [[gnu::always_inline]] static void PrefetchRow(const float* row, uint32_t floats) {
    if (floats == 0) return;
    const uintptr_t last = reinterpret_cast<uintptr_t>(row + floats) - 1;
    for (uintptr_t line = reinterpret_cast<uintptr_t>(row) & ~(kCacheLine - 1); line <= last; line += kCacheLine) {
      __builtin_prefetch(reinterpret_cast<const void*>(line));
    }
  }

  uint32_t FindRowNumber(uint64_t key) const {
    for (size_t i = Home(key);; i = Next(i)) {  // ends: the index is never full
      const Slot& slot = slots_[i];
      if (slot.row == kNoRow) return kNoRow;
      if (slot.key == key) return slot.row;
    }
  }
  float* Row(uint32_t row) const {
    return chunks_[row >> chunk_shift_].get() + static_cast<size_t>(row & chunk_mask_) * row_floats();
  }
  float* RowOrNull(uint32_t row) const { return row == kNoRow ? nullptr : Row(row); }

  // The first empty slot of key's probe run (key must be absent).
  size_t EmptySlotFor(uint64_t key) const {
    size_t i = Home(key);
    while (slots_[i].row != kNoRow) i = Next(i);
    return i;
  }
  // Inserts `key` (absent) at the empty slot `slot` found by probing; nullptr when no row can
  // be added.
  float* Insert(size_t slot, uint64_t key);
  // A free row number, or kNoRow when none can be had.
  uint32_t AllocateRow();
  // Bytes of one arena chunk (a multiple of kCacheLine).
  size_t ChunkBytes() const;
  // Rebuilds the index with `new_capacity` slots (a power of two above size_ / max load).
  void Rehash(size_t new_capacity);

  std::vector<Slot> slots_;
  size_t mask_ = 0;     // capacity - 1
  int shift_ = 64;      // 64 - log2(capacity): Home() keeps the top bits
  size_t grow_at_ = 0;  // size_ that triggers doubling (3/4 of capacity)
  size_t size_ = 0;

  // Row arena: row r lives in chunks_[r >> chunk_shift_] at (r & chunk_mask_).
  struct FreeChunk {
    void operator()(float* chunk) const { std::free(chunk); }
  };
  std::vector<std::unique_ptr<float[], FreeChunk>> chunks_;
  uint32_t chunk_shift_ = 0;
  uint32_t chunk_mask_ = 0;
  uint32_t rows_allocated_ = 0;      // arena high-water mark
  std::vector<uint32_t> free_rows_;  // erased rows, reused first
};

inline float* MemoryRowStore::FindOrInsert(uint64_t key, bool* inserted) {
  size_t i = Home(key);
  for (; slots_[i].row != kNoRow; i = Next(i)) {
    if (slots_[i].key == key) {
      *inserted = false;
      return Row(slots_[i].row);
    }
  }
  *inserted = true;
  return Insert(i, key);
}

}  // namespace fleetps::server
