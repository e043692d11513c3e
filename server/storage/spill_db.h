#pragma once
// SpillDb: the RocksDB tier of one sparse table on one server. Holds rows that the memory
// tier evicted, for every shard of the table, in one RocksDB instance.
//
// Format (schemas/checkpoint.fbs SpilledRow): key = [shard: uint32 big-endian][key: uint64
// big-endian], so a shard's rows form one contiguous key range; value = a SpilledRow
// FlatBuffer holding the row's floats verbatim, verified when read.
//
// Not durable by design: Open() wipes the directory, writes skip the WAL, and nothing is
// fsynced. Rows survive restarts through checkpoints (server/checkpoint), never through
// this tier. This file and spill_db.cc are the only code that sees RocksDB; rocksdb::Status
// becomes fleetps::Status in spill_db.cc only.
//
// Memory: a block cache of block_cache_bytes (data blocks), two memtables of
// write_buffer_bytes each, and the index and bloom filter blocks of the files on disk (about
// 2 bytes per stored row), kept in memory so that lookups do not re-read them.
//
// Thread-safety: every method is thread-safe (RocksDB is); shards call it from their own
// owner threads concurrently. A Batch belongs to one thread.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace fleetps::server {

struct SpillDbOptions {
  std::string dir;                        // wiped and created by Open()
  size_t block_cache_bytes = 32u << 20;   // RocksDB block cache (data, index, filters)
  size_t write_buffer_bytes = 16u << 20;  // per memtable; two at most
};

class SpillDb {
 public:
  static StatusOr<std::unique_ptr<SpillDb>> Open(const SpillDbOptions& options);
  ~SpillDb();
  SpillDb(const SpillDb&) = delete;
  SpillDb& operator=(const SpillDb&) = delete;

  const std::string& dir() const;

  // Writes collected by one thread and applied at once.
  class Batch {
   public:
    Batch();
    ~Batch();
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    void Put(uint32_t shard, uint64_t key, const float* row, uint32_t row_floats);
    void Delete(uint32_t shard, uint64_t key);
    size_t count() const { return count_; }
    void Clear();

   private:
    friend class SpillDb;
    struct Impl;
    std::unique_ptr<Impl> impl_;
    size_t count_ = 0;
  };
  Status Write(Batch& batch);

  // For k in [0, n): found[k] says whether keys[k] is stored; if so its row_floats floats
  // are copied to out + k * row_floats. Corruption when a stored value is not a SpilledRow
  // of row_floats floats.
  Status MultiGet(uint32_t shard, const uint64_t* keys, size_t n, uint32_t row_floats, float* out, bool* found);

  // Calls visit(key, row) for every row of `shard`, in key order, from a consistent view
  // taken at the call (writes made meanwhile are not seen). A non-OK return stops the scan.
  Status ForEach(uint32_t shard, uint32_t row_floats,
                 const std::function<Status(uint64_t key, const float* row)>& visit) const;

  // Removes every row of `shard`.
  Status DeleteShard(uint32_t shard);

  // RocksDB's own memory (block cache, memtables, readers), bytes; for statistics.
  uint64_t MemoryBytes() const;

  // Bytes one stored row of `row_floats` floats takes as written: its key and its encoded
  // SpilledRow value (before RocksDB's own overhead and compression).
  static size_t RecordBytes(uint32_t row_floats);

 private:
  struct Impl;
  explicit SpillDb(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fleetps::server
