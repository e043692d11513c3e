#include "server/storage/memory_row_store.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <utility>

namespace fleetps::server {
namespace {

constexpr size_t kMinCapacity = 16;
// Target bytes per arena chunk: big enough that the chunk table stays tiny, small enough
// that a near-empty shard does not hold much.
constexpr size_t kChunkBytes = size_t{256} << 10;

// Smallest power-of-two slot count that holds `rows` under the 3/4 max load.
size_t CapacityFor(size_t rows) { return std::bit_ceil(std::max(kMinCapacity, rows + rows / 3 + 1)); }

}  // namespace

MemoryRowStore::MemoryRowStore(uint32_t row_floats, size_t expected_rows) : RowStore(row_floats) {
  FLEETPS_CHECK_GE(row_floats, 1u);
  const size_t row_bytes = size_t{row_floats} * sizeof(float);
  chunk_shift_ = std::bit_width(std::max<size_t>(1, kChunkBytes / row_bytes)) - 1;
  chunk_mask_ = (uint32_t{1} << chunk_shift_) - 1;
  Rehash(CapacityFor(expected_rows));
}

Status MemoryRowStore::FindBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows) {
  for (size_t k = 0; k < n; ++k) {
    if (k + kPrefetchDistance < n) PrefetchSlot(keys[k + kPrefetchDistance]);
    float* row = Find(keys[k]);
    if (row != nullptr) PrefetchRow(row, touch_floats);
    rows[k] = row;
  }
  return Status::OK();
}

Status MemoryRowStore::FindOrInsertBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows,
                                         bool* inserted) {
  for (size_t k = 0; k < n; ++k) {
    if (k + kPrefetchDistance < n) PrefetchSlot(keys[k + kPrefetchDistance]);
    float* row = FindOrInsert(keys[k], &inserted[k]);
    if (row == nullptr) {
      return Status::Busy("memory row store cannot add a row: " + std::to_string(size_) + " rows held (limit " +
                          std::to_string(kMaxRows) + " per shard) or out of memory");
    }
    PrefetchRow(row, touch_floats);
    rows[k] = row;
  }
  return Status::OK();
}

StatusOr<bool> MemoryRowStore::Erase(uint64_t key) {
  size_t hole = Home(key);
  for (;; hole = Next(hole)) {
    if (slots_[hole].row == kNoRow) return false;
    if (slots_[hole].key == key) break;
  }
  free_rows_.push_back(slots_[hole].row);
  --size_;
  // Backward shift: pull each later entry of the probe run into the hole unless the hole
  // lies before its home (cyclically), where a probe for it would never look.
  for (size_t i = Next(hole); slots_[i].row != kNoRow; i = Next(i)) {
    const size_t home = Home(slots_[i].key);
    if (((i - home) & mask_) >= ((i - hole) & mask_)) {
      slots_[hole] = slots_[i];
      hole = i;
    }
  }
  slots_[hole].row = kNoRow;
  return true;
}

Status MemoryRowStore::ForEach(const RowVisitor& visit) const {
  for (const Slot& slot : slots_) {
    if (slot.row != kNoRow) RETURN_IF_ERROR(visit(slot.key, Row(slot.row)));
  }
  return Status::OK();
}

Status MemoryRowStore::Rewrite(const RowRewriter& rewrite) {
  std::vector<uint64_t> erase;
  for (const Slot& slot : slots_) {
    if (slot.row == kNoRow) continue;
    if (rewrite(slot.key, Row(slot.row)) == RowAction::kErase) erase.push_back(slot.key);
  }
  // Erased after the pass: backward-shift deletion moves slots under the loop.
  for (uint64_t key : erase) RETURN_IF_ERROR(Erase(key).status());
  return Status::OK();
}

Status MemoryRowStore::InsertAbsentBatch(const uint64_t* keys, size_t n, const float* rows) {
  for (size_t k = 0; k < n; ++k) {
    bool inserted = false;
    float* row = FindOrInsert(keys[k], &inserted);
    if (row == nullptr) {
      return Status::Busy("memory row store cannot add a row: " + std::to_string(size_) + " rows held");
    }
    std::memcpy(row, rows + k * size_t{row_floats()}, row_floats() * sizeof(float));
  }
  return Status::OK();
}

Status MemoryRowStore::Clear() {
  chunks_.clear();
  chunks_.shrink_to_fit();
  free_rows_.clear();
  free_rows_.shrink_to_fit();
  rows_allocated_ = 0;
  size_ = 0;
  slots_.clear();
  Rehash(CapacityFor(0));
  return Status::OK();
}

size_t MemoryRowStore::BytesFor(size_t rows, uint32_t row_floats) {
  return CapacityFor(rows) * sizeof(Slot) + rows * size_t{row_floats} * sizeof(float);
}

size_t MemoryRowStore::ChunkBytes() const {
  const size_t bytes = (size_t{chunk_mask_} + 1) * row_floats() * sizeof(float);
  return (bytes + kCacheLine - 1) / kCacheLine * kCacheLine;  // aligned_alloc wants a multiple
}

size_t MemoryRowStore::MemoryBytes() const {
  return sizeof(*this) + slots_.capacity() * sizeof(Slot) + chunks_.size() * ChunkBytes() +
         chunks_.capacity() * sizeof(chunks_[0]) + free_rows_.capacity() * sizeof(uint32_t);
}

void MemoryRowStore::Reserve(size_t rows) {
  const size_t capacity = CapacityFor(rows);
  if (capacity > slots_.size()) Rehash(capacity);
}

float* MemoryRowStore::Insert(size_t slot, uint64_t key) {
  if (size_ >= kMaxRows) return nullptr;
  const uint32_t row = AllocateRow();
  if (row == kNoRow) return nullptr;
  if (size_ >= grow_at_) {
    Rehash(slots_.size() * 2);
    slot = EmptySlotFor(key);
  }
  slots_[slot] = Slot{key, row};
  ++size_;
  return Row(row);
}

uint32_t MemoryRowStore::AllocateRow() {
  if (!free_rows_.empty()) {
    const uint32_t row = free_rows_.back();
    free_rows_.pop_back();
    return row;
  }
  if ((rows_allocated_ & chunk_mask_) == 0) {  // the last chunk is full (or there is none)
    std::unique_ptr<float[], FreeChunk> chunk(static_cast<float*>(std::aligned_alloc(kCacheLine, ChunkBytes())));
    if (chunk == nullptr) return kNoRow;
    chunks_.push_back(std::move(chunk));
  }
  return rows_allocated_++;
}

void MemoryRowStore::Rehash(size_t new_capacity) {
  std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(new_capacity, Slot{0, kNoRow}));
  mask_ = new_capacity - 1;
  shift_ = 64 - std::countr_zero(new_capacity);
  grow_at_ = new_capacity / 4 * 3;
  for (const Slot& slot : old) {
    if (slot.row != kNoRow) slots_[EmptySlotFor(slot.key)] = slot;
  }
}

}  // namespace fleetps::server
