#pragma once
// TieredRowStore: one shard's rows in two tiers, RAM up to a row limit and the rest in the
// table's RocksDB instance (SpillDb). Callers see one store: a row on disk is promoted back
// into RAM when a batch call asks for it, and the coldest rows move to disk when RAM is full.
//
// Memory tier: a MemoryRowStore whose rows carry two extra floats of bookkeeping (never
// shown to callers): the shard clock at the row's last use, and whether RocksDB holds a
// copy of the row (InCold) and whether the RAM copy differs from it (Dirty).
//  - Every batch call advances the clock and stamps the rows it returns.
//  - Eviction: at the start of a batch call, when RAM holds more than max_memory_rows, rows
//    are evicted down to the low watermark (max_memory_rows minus an eviction batch), coldest
//    first: windows of the hash index (a pseudo-random sample) are scanned from a moving
//    hand and the older half of each window's rows goes (sampled LRU, as Redis does). Rows
//    are written to RocksDB in one WriteBatch before they leave RAM; a row whose identical
//    copy is already on disk (promoted by a read, never written since) is just dropped.
//  - Rows handed out by FindBatch are promoted clean (their disk copy stays); rows from
//    FindOrInsertBatch and Rewrite are marked dirty (callers may write them).
// Eviction runs only at the start of a call, so row pointers from a call stay valid until
// the next call, as RowStore promises; the memory tier may exceed max_memory_rows by the
// rows of one batch in between.
//
// Each key lives in RAM, on disk, or both (a clean copy); size() counts it once.
// Thread-safety: none (see RowStore). The SpillDb is shared with the table's other shards
// and outlives the store.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/storage/memory_row_store.h"
#include "server/storage/row_store.h"
#include "server/storage/spill_db.h"

namespace fleetps::server {

class TieredRowStore final : public RowStore {
 public:
  // Least RAM rows a tiered store accepts.
  static constexpr size_t kMinMemoryRows = 1024;

  // The most rows of `row_floats` floats that fit in `budget_bytes` of RAM (index, rows and
  // bookkeeping), with room for one batch above the limit; 0 when not even kMinMemoryRows do.
  static size_t MemoryRowsFor(size_t budget_bytes, uint32_t row_floats);

  // max_memory_rows >= kMinMemoryRows; `spill` outlives the store; `shard` names this
  // store's key range in it (the range must be empty).
  TieredRowStore(uint32_t row_floats, size_t max_memory_rows, SpillDb* spill, uint32_t shard);

  Status FindBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows) override;
  Status FindOrInsertBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows,
                           bool* inserted) override;
  StatusOr<bool> Erase(uint64_t key) override;
  Status ForEach(const RowVisitor& visit) const override;
  Status Rewrite(const RowRewriter& rewrite) override;
  // Fills RAM up to max_memory_rows, then writes the rest straight to RocksDB (no lookups,
  // no eviction).
  Status InsertAbsentBatch(const uint64_t* keys, size_t n, const float* rows) override;
  Status Clear() override;
  size_t size() const override { return memory_.size() + disk_only_rows(); }
  size_t disk_rows() const override { return disk_only_rows(); }
  // disk_rows() x SpillDb::RecordBytes(row_floats): key and encoded row, as written.
  uint64_t DiskBytes() const override { return uint64_t{disk_only_rows()} * record_bytes_; }
  size_t MemoryBytes() const override { return memory_.MemoryBytes(); }

  size_t memory_rows() const { return memory_.size(); }
  size_t max_memory_rows() const { return max_memory_rows_; }
  // Rows written to / read back from RocksDB since construction.
  uint64_t evicted() const { return evicted_; }
  uint64_t promoted() const { return promoted_; }

 private:
  // Bookkeeping bits (second extra float).
  static constexpr uint32_t kInCold = 1;  // RocksDB holds a copy (counted in cold_rows_)
  static constexpr uint32_t kDirty = 2;   // the RAM copy differs from the disk copy

  uint32_t Tick(const float* row) const;
  uint32_t Bits(const float* row) const;
  void SetMeta(float* row, uint32_t tick, uint32_t bits) const;
  size_t disk_only_rows() const { return cold_rows_ - memory_in_cold_; }

  // Evicts down to the low watermark when over max_memory_rows_.
  Status MaybeEvict();
  // Moves `count` of the coldest rows to RocksDB.
  Status Evict(size_t count);
  // Rows of keys[miss[i]] found on disk are inserted into RAM (clean, or dirty when
  // `dirty`), copied, and rows[miss[i]] set; found[i] says which. Duplicate keys share a row.
  Status Promote(const uint64_t* keys, const std::vector<uint32_t>& miss, bool dirty, float** rows,
                 std::vector<uint8_t>* found);

  const uint32_t row_floats_;
  const size_t record_bytes_;  // SpillDb::RecordBytes(row_floats_)
  const size_t max_memory_rows_;
  const size_t evict_batch_;
  SpillDb* const spill_;  // the table's; outlives every shard store
  const uint32_t shard_;
  MemoryRowStore memory_;      // rows of row_floats_ + 2 floats
  uint32_t clock_ = 0;         // advanced per batch call
  size_t hand_ = 0;            // next slot the eviction scan looks at
  size_t cold_rows_ = 0;       // keys stored in RocksDB
  size_t memory_in_cold_ = 0;  // of those, keys also in RAM
  uint64_t evicted_ = 0;
  uint64_t promoted_ = 0;
  // Scratch reused by the batch calls.
  std::vector<uint32_t> miss_;
  std::vector<float> disk_rows_buf_;
  std::vector<uint8_t> found_;
};

}  // namespace fleetps::server
