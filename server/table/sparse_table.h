#pragma once
// SparseTable: this server's part of a sparse embedding table, uint64 key -> `dim` floats.
//
// A key belongs to server PlaceKey(key).server and, inside it, to shard PlaceKey(key).shard
// (common/sharding.h). The table holds options.shards shards, each a RowStore: a
// MemoryRowStore, or, when options.memory_budget_bytes > 0, a TieredRowStore over one
// RocksDB instance (SpillDb) per table. A stored row's layout and its update rules belong to
// the RowAccessor (server/accessor/row_accessor.h): weights, optimizer state, flags, and
// CTR statistics with the ctr accessor.
//
// Missing keys read as their initial value, a pure function of (initializer seed, key,
// column) (server/table/initializer.h), so every server and shard count agrees (CTR rows
// without embedx read zeros there). A push to a missing key first creates its row with that
// value and fresh optimizer state.
//
// Memory budget: 3/4 of memory_budget_bytes goes to the shards' RAM tiers (equal parts),
// 1/8 to RocksDB's block cache and 1/8 to its two memtables.
//
// Thread-safety: the shard calls (PullShard, PushShard, Stats) on one shard must all come
// from that shard's owner (the service posts them to the shard's executor); different shards
// may be used concurrently. The rest is immutable after Create and safe from any thread.
// Not copyable.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>
#include <string>

#include "common/config/table_options.h"
#include "common/optimizer/optimizer.h"
#include "common/status.h"
#include "schemas/checkpoint_generated.h"
#include "server/accessor/row_accessor.h"
#include "server/checkpoint/checkpoint_file.h"
#include "server/storage/row_store.h"
#include "server/storage/spill_db.h"
#include "server/table/initializer.h"

namespace fleetps::server {

// One shard's counters (since Create).
struct ShardStats {
  uint64_t rows = 0;          // rows stored
  uint64_t memory_bytes = 0;  // RAM held by the shard's store, bytes
  uint64_t pulls = 0;         // keys pulled (a key repeated in a request counts each time)
  uint64_t pushes = 0;        // keys pushed (likewise)
  uint64_t created = 0;       // rows created, by push or by pull with create_on_pull
  uint64_t disk_rows = 0;     // rows held only on the RocksDB tier (included in rows)
  uint64_t disk_bytes = 0;    // those rows' bytes as written to RocksDB (RowStore::DiskBytes)
};

// Per-key counters that ride along with a push, indexed like the gradients (shows[idx[k]]
// belongs to keys[idx[k]]). Either may be null (no show / no click). The CTR accessor adds
// them to each row's statistics; a plain table ignores them.
struct PushCounters {
  const float* shows = nullptr;
  const float* clicks = nullptr;
};

// How a push changes the weights.
enum class PushMode : uint8_t {
  kGradient,  // one optimizer step with the pushed gradient
  kDelta,     // GEO: w += pushed delta; no optimizer, optimizer state untouched
};

// Where a table keeps what does not fit its memory budget.
struct StorageOptions {
  // RocksDB tier directory of a table with memory_budget_bytes (wiped by Create). Unused
  // without a budget.
  std::string spill_dir;
};

// One shard file written by SaveShard.
struct ShardSaveResult {
  uint64_t rows = 0;
  FileDigest file;
};

class SparseTable {
 public:
  // Largest accepted dim: keeps row sizes in uint32 for every optimizer.
  static constexpr uint64_t kMaxDim = uint64_t{1} << 20;

  // InvalidArgument (naming the table and the field) unless options.kind is sparse,
  // 1 <= dim <= kMaxDim, shards >= 1, server_index < num_servers and the optimizer and
  // initializer options are valid.
  // With memory_budget_bytes, also InvalidArgument when storage.spill_dir is empty or the
  // budget holds fewer than TieredRowStore::kMinMemoryRows rows per shard, and IOError when
  // RocksDB cannot be opened there.
  static StatusOr<std::unique_ptr<SparseTable>> Create(const TableOptions& options, uint32_t server_index,
                                                       uint32_t num_servers, const StorageOptions& storage = {});
  ~SparseTable();
  SparseTable(const SparseTable&) = delete;
  SparseTable& operator=(const SparseTable&) = delete;

  const TableOptions& options() const { return options_; }
  uint32_t num_shards() const { return static_cast<uint32_t>(shards_.size()); }
  uint32_t dim() const { return dim_; }
  // Floats per stored row (RowAccessor layout).
  uint32_t row_floats() const { return row_floats_; }
  const RowAccessor& accessor() const { return accessor_; }
  const optimizer::Optimizer& optimizer() const { return *optimizer_; }
  // True when rows beyond the memory budget go to RocksDB.
  bool tiered() const { return spill_ != nullptr; }
  uint32_t server_index() const { return server_index_; }
  uint32_t num_servers() const { return num_servers_; }

  // PlaceKey(key, num_servers, shards).shard and .server == server_index.
  uint32_t ShardOf(uint64_t key) const;
  bool Owns(uint64_t key) const;

  // For k in [0, n): writes the weights of keys[idx[k]] to out + idx[k] * dim. A missing key
  // reads as its initial value, which is stored only when options.create_on_pull.
  // Every keys[idx[k]] must be owned by this server and belong to `shard` (the caller routed
  // it; checked only in debug builds). Errors come from the store (Busy, IOError); on error a
  // prefix of the keys may have been served.
  Status PullShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, float* out);

  // For k in [0, n), in order: applies grads + idx[k] * dim to keys[idx[k]], creating a
  // missing row with its initial value first: one optimizer step (kGradient) or w += delta
  // (kDelta, GEO). A key repeated in one push is updated once per occurrence, in order.
  // `counters` feed the CTR accessor (see PushCounters). Same key and error rules as
  // PullShard; on error a prefix of the keys may have been applied.
  Status PushShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, const float* grads,
                   const PushCounters& counters = {}, PushMode mode = PushMode::kGradient);

  // ---- GPU-PS pass mode (PullRows / WriteRows, schemas/ps.fbs) ----

  // Floats of a row as a pass moves it: the weights and the optimizer state, the first
  // core_floats() floats of the RowAccessor layout.
  uint32_t core_floats() const { return accessor_.flags_offset(); }
  // For k in [0, n): the full row of keys[idx[k]]: its core_floats() floats to
  // rows + idx[k] * core_floats(), its saved flags to flags[idx[k]] and, for CTR tables when
  // `stats` is not null, its show and click to stats + idx[k] * 2. A missing key reads as
  // the row a push would create (not stored). Same key and error rules as PullShard.
  Status PullRowsShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, float* rows, uint8_t* flags,
                       float* stats);
  // What a WriteRowsShard call brings, indexed like PullRowsShard's outputs (begin/end:
  // core_floats() per key; extended, shows, clicks: one per key, each may be null).
  struct RowWrite {
    const float* begin = nullptr;
    const float* end = nullptr;
    const uint8_t* extended = nullptr;
    const float* shows = nullptr;
    const float* clicks = nullptr;
    bool average = false;  // a row changed by another writer: (stored + end) / 2, not += end - begin
  };
  // Counts of a WriteRowsShard call.
  struct RowWriteCounts {
    uint64_t written = 0;  // rows equal to `begin`: replaced by `end`
    uint64_t merged = 0;   // rows changed by another writer: end - begin added
  };
  // For k in [0, n), in order: the pass's row of keys[idx[k]] written back (schemas/ps.fbs
  // WriteRows): the stored row (created when missing, extended with its initial embedx when
  // extended[idx[k]] says so and it is not) takes `end` when its core equals `begin`
  // bitwise, else end - begin is added to it (write.average: it becomes the mean of itself
  // and end); CTR statistics take the pass's shows and
  // clicks as a push does; the row is marked Changed and dirty. Keys must be distinct. Same
  // key and error rules as PushShard.
  Status WriteRowsShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, const RowWrite& write,
                        RowWriteCounts* counts);

  ShardStats Stats(uint32_t shard) const;

  // ---- storage commands; each runs on the shard's owner, like the calls above ----

  // CTR: decays show/click and deletes the rows the shrink rules select, in both tiers;
  // returns how many. Plain tables: 0, nothing changes.
  StatusOr<uint64_t> ShrinkShard(uint32_t shard);

  // Writes the shard's rows for a save in `mode` to a SparseRows file at `path` (created,
  // fsynced, closed): Checkpoint and Batch every row in full, Base every row's weights,
  // Delta the weights of rows changed since the last Delta or Base save (Changed flag).
  // The rows' saved state (flags, statistics) stays as it is: the mode's after-save changes
  // (RowAccessor::AfterSave) belong to the committed checkpoint and are applied by
  // ApplySaveEffects once it has committed. For a mode with after-save changes the pass
  // marks the rows it considered (RowAccessor::MarkSaved: every row, or Delta's Changed
  // rows), so ApplySaveEffects can leave out rows changed after the save.
  StatusOr<ShardSaveResult> SaveShard(uint32_t shard, disk::SaveMode mode, const std::string& path);

  // The after-save changes of a committed save in `mode` whose SaveShard pass was the last
  // marking pass on this shard: applied to every row not dirty since (RowAccessor class
  // comment); a row created, pushed or merged after the pass keeps its state. Call at most
  // once per pass. Returns the rows changed. Errors come from the store; on error a prefix
  // of the rows may have been changed.
  StatusOr<uint64_t> ApplySaveEffects(uint32_t shard, disk::SaveMode mode);

  // Removes every row of the shard.
  Status ClearShard(uint32_t shard);
  // Sizes the shard's RAM index for `rows` more rows (before a load; see RowStore::Reserve).
  void ReserveShard(uint32_t shard, size_t rows);

  // Stores rows read from a checkpoint: keys[i] with the saved flags[i] and the payload
  // payloads[i] (RowAccessor::PayloadFloats(full, flags[i]) floats, checked by the caller).
  // Without `merge` the keys must be absent and distinct (the shard was cleared; checkpoint
  // keys are unique). With `merge` (Delta checkpoints) an existing row takes the saved
  // weights, a missing one is created; both are marked Changed and dirty. Every key must
  // belong to `shard` of this server (checked in debug builds).
  Status LoadRows(uint32_t shard, const uint64_t* keys, const uint8_t* flags, const float* const* payloads, size_t n,
                  bool full, bool merge);

  // Calls visit(key, row) for every stored row of the shard (row_floats() floats in the
  // RowAccessor layout), wherever it lives; for tests and tools.
  Status ForEachRow(uint32_t shard, const RowStore::RowVisitor& visit) const;

 private:
  struct Shard {
    std::unique_ptr<RowStore> store;
    uint64_t pulls = 0;
    uint64_t pushes = 0;
    uint64_t created = 0;
  };

  SparseTable(const TableOptions& options, uint32_t server_index, uint32_t num_servers,
              std::unique_ptr<optimizer::Optimizer> optimizer, Initializer initializer);
  // Builds the shards' stores (memory, or tiered over a new SpillDb).
  Status OpenStores(const StorageOptions& storage);
  // The CTR/delta push loop (the plain gradient loop is inline in PushShard).
  void ApplyRows(const uint64_t* batch_keys, float* const* rows, const uint32_t* batch_idx, size_t m,
                 const float* grads, const PushCounters& counters, bool delta);

  // Keys handed to the store per call. Small enough that the rows the store prefetched for a
  // batch are still in L1/L2 when the table copies or updates them, large enough that the
  // virtual call per batch is noise.
  static constexpr size_t kBatch = 256;

  Shard& ShardFor(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n);
  // batch_keys[k] = keys[idx[k]] and rows[k] = its row for k in [0, n), n <= kBatch. With
  // `create`, missing rows are inserted and initialized; otherwise they are nullptr.
  // touch_floats: see RowStore. Store errors come back labelled with the table and shard.
  Status FetchRows(Shard& s, uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, bool create,
                   uint32_t touch_floats, uint64_t* batch_keys, float** rows);
  // Writes the initial weights and optimizer state of each inserted row; returns how many.
  uint64_t InitInserted(const uint64_t* keys, float* const* rows, const bool* inserted, size_t n) const;

  const TableOptions options_;
  const uint32_t server_index_;
  const uint32_t num_servers_;
  const uint32_t dim_;
  const std::unique_ptr<optimizer::Optimizer> optimizer_;
  const Initializer initializer_;
  const RowAccessor accessor_;  // refers to *optimizer_
  const uint32_t row_floats_;
  const bool plain_;  // plain accessor: the push loop needs no accessor call
  // The RocksDB tier shared by the shards' stores; declared before shards_ so that it is
  // destroyed after them. Null without a memory budget.
  std::unique_ptr<SpillDb> spill_;
  std::vector<Shard> shards_;
};

}  // namespace fleetps::server
