#pragma once
// RowStore: one shard's rows, uint64 key -> a row of row_floats() floats.
//
// The table owns the layout of a row (server/accessor/row_accessor.h); a store only keeps
// the floats. Implementations are storage tiers, one file each: MemoryRowStore (every row
// in RAM) and TieredRowStore (RAM up to a budget, colder rows in RocksDB, promoted back on
// lookup). So the contract does not assume rows stay in RAM:
//  - every call that reaches rows returns a Status (a cold tier does I/O);
//  - a row pointer handed out by a call is valid only until the next call on the store (a
//    tier may promise more; MemoryRowStore does);
//  - rows handed out by FindBatch are for reading: the caller must not write them (a tier
//    may keep an identical copy elsewhere and skip writing it back); rows from
//    FindOrInsertBatch and Rewrite may be written;
//  - ForEach and Rewrite visit every row wherever it lives.
//
// The hot-path calls take a batch of keys, so there is one virtual call per batch and an
// implementation can overlap the memory latency of consecutive keys (prefetching). They
// also take `touch_floats`, a hint: the caller will next read the first touch_floats floats
// of each returned row (a pull reads the weights, a push the whole row), so the store can
// bring exactly those into cache. Correctness never depends on it.
//
// Thread-safety: none. A store belongs to its shard's owner thread (see SparseTable).
// Ownership: a store owns its rows.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/status.h"

namespace fleetps::server {

class RowStore {
 public:
  // Called once per row by ForEach; `row` is valid during the call only. A non-OK return
  // stops the iteration and is returned by ForEach. Must not call into the store.
  using RowVisitor = std::function<Status(uint64_t key, const float* row)>;
  // What a Rewrite function did with a row.
  enum class RowAction : uint8_t {
    kKeep,      // left it as it was
    kModified,  // wrote to it (the store keeps the new floats)
    kErase,     // the row is to be removed
  };
  // Called once per row by Rewrite with a writable row; must not call into the store.
  using RowRewriter = std::function<RowAction(uint64_t key, float* row)>;

  explicit RowStore(uint32_t row_floats) : row_floats_(row_floats) {}
  virtual ~RowStore() = default;
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;

  // Floats per row, fixed for the store's life.
  uint32_t row_floats() const { return row_floats_; }

  // rows[k] = the row of keys[k], or nullptr when the key has no row. Never inserts.
  virtual Status FindBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows) = 0;

  // rows[k] = the row of keys[k], inserted when absent. inserted[k] says whether it was; an
  // inserted row's floats are unspecified and the caller initializes them. A key repeated in
  // the batch gets the same row, and only its first occurrence has inserted[k] set.
  // Busy when the store cannot take another row; keys before the failing one are done.
  virtual Status FindOrInsertBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows,
                                   bool* inserted) = 0;

  // Removes the row of `key`; true when there was one.
  virtual StatusOr<bool> Erase(uint64_t key) = 0;

  // Calls `visit` once for every row, in unspecified order.
  virtual Status ForEach(const RowVisitor& visit) const = 0;

  // Calls `rewrite` once for every row, in unspecified order, and applies what it returns.
  // On error, a prefix of the rows may have been rewritten.
  virtual Status Rewrite(const RowRewriter& rewrite) = 0;

  // Removes every row.
  virtual Status Clear() = 0;

  // Stores rows[k * row_floats(), (k + 1) * row_floats()) as the row of keys[k], for keys
  // the caller knows are absent and distinct (a load into a cleared shard: checkpoint keys
  // are unique), so a tier may skip its lookups and write rows that do not fit in RAM
  // straight to disk. A present or repeated key breaks size() accounting in a tiered store.
  virtual Status InsertAbsentBatch(const uint64_t* keys, size_t n, const float* rows) = 0;

  // Hint: about `rows` rows are about to be inserted (a checkpoint load), so an index can be
  // sized once. Bulk inserts in another table's hash order are slow into an index that is
  // much smaller than the final row count (linear probing clusters); this avoids that.
  virtual void Reserve(size_t rows) {}

  // Rows held, in all tiers.
  virtual size_t size() const = 0;
  // Rows held only outside RAM (0 for a memory-only store).
  virtual size_t disk_rows() const { return 0; }
  // Bytes of those rows as stored outside RAM (0 for a memory-only store).
  virtual uint64_t DiskBytes() const { return 0; }
  // RAM held by the store (rows, index, free lists), in bytes; not disk.
  virtual size_t MemoryBytes() const = 0;

 private:
  const uint32_t row_floats_;
};

}  // namespace fleetps::server
