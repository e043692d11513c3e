#pragma once
// RowStore: one shard's rows, uint64 key -> a row of row_floats() floats.
//
// The table owns the layout of a row (weights, then optimizer state; later the CTR
// accessor's show/click statistics); a store only keeps the floats. Implementations are
// storage tiers, one file each: MemoryRowStore (every row in RAM) now; a tiered store that
// evicts rows to RocksDB and promotes them back on lookup comes next. So the contract does
// not assume rows stay in RAM:
//  - every call that reaches rows returns a Status (a cold tier does I/O);
//  - a row pointer handed out by a call is valid only until the next call on the store (a
//    tier may promise more; MemoryRowStore does);
//  - ForEach visits every row wherever it lives.
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

  // Rows held, in all tiers.
  virtual size_t size() const = 0;
  // RAM held by the store (rows, index, free lists), in bytes; not disk.
  virtual size_t MemoryBytes() const = 0;

 private:
  const uint32_t row_floats_;
};

}  // namespace fleetps::server
