#pragma once
// SparseTable: this server's part of a sparse embedding table, uint64 key -> `dim` floats.
//
// A key belongs to server PlaceKey(key).server and, inside it, to shard PlaceKey(key).shard
// (common/sharding.h). The table holds options.shards shards, each a RowStore. A stored row
// is [dim weights][optimizer state, Optimizer::StateSize(dim) floats]; the CTR accessor
// (next issue) will own this layout and add its statistics.
//
// Missing keys read as their initial value, a pure function of (initializer seed, key,
// column) (server/table/initializer.h), so every server and shard count agrees. A push to a
// missing key first creates its row with that value and fresh optimizer state.
//
// Thread-safety: the shard calls (PullShard, PushShard, Stats) on one shard must all come
// from that shard's owner (the service posts them to the shard's executor); different shards
// may be used concurrently. The rest is immutable after Create and safe from any thread.
// Not copyable.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/config/table_options.h"
#include "common/optimizer/optimizer.h"
#include "common/status.h"
#include "server/storage/row_store.h"
#include "server/table/initializer.h"

namespace fleetps::server {

// One shard's counters (since Create).
struct ShardStats {
  uint64_t rows = 0;          // rows stored
  uint64_t memory_bytes = 0;  // RAM held by the shard's store, bytes
  uint64_t pulls = 0;         // keys pulled (a key repeated in a request counts each time)
  uint64_t pushes = 0;        // keys pushed (likewise)
  uint64_t created = 0;       // rows created, by push or by pull with create_on_pull
};

// Per-key counters that ride along with a push, indexed like the gradients (shows[idx[k]]
// belongs to keys[idx[k]]). Either may be null. The CTR accessor (next issue) accumulates
// them into each row; until then they are accepted and ignored.
struct PushCounters {
  const float* shows = nullptr;
  const float* clicks = nullptr;
};

class SparseTable {
 public:
  // Largest accepted dim: keeps row sizes in uint32 for every optimizer.
  static constexpr uint64_t kMaxDim = uint64_t{1} << 20;

  // InvalidArgument (naming the table and the field) unless options.kind is sparse,
  // 1 <= dim <= kMaxDim, shards >= 1, server_index < num_servers and the optimizer and
  // initializer options are valid.
  static StatusOr<std::unique_ptr<SparseTable>> Create(const TableOptions& options, uint32_t server_index,
                                                       uint32_t num_servers);
  SparseTable(const SparseTable&) = delete;
  SparseTable& operator=(const SparseTable&) = delete;

  const TableOptions& options() const { return options_; }
  uint32_t num_shards() const { return static_cast<uint32_t>(shards_.size()); }
  uint32_t dim() const { return dim_; }
  // Floats per stored row: dim weights plus optimizer state.
  uint32_t row_floats() const { return row_floats_; }
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

  // For k in [0, n), in order: applies the gradient grads + idx[k] * dim to keys[idx[k]] with
  // the table's optimizer, creating a missing row with its initial value first. A key repeated
  // in one push is updated once per occurrence, in order. `counters` is for the CTR accessor
  // (see PushCounters). Same key and error rules as PullShard; on error a prefix of the keys
  // may have been applied.
  Status PushShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, const float* grads,
                   const PushCounters& counters = {});

  ShardStats Stats(uint32_t shard) const;

 private:
  struct Shard {
    std::unique_ptr<RowStore> store;
    uint64_t pulls = 0;
    uint64_t pushes = 0;
    uint64_t created = 0;
  };

  SparseTable(const TableOptions& options, uint32_t server_index, uint32_t num_servers,
              std::unique_ptr<optimizer::Optimizer> optimizer, Initializer initializer);

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
  const uint32_t row_floats_;
  std::vector<Shard> shards_;
};

}  // namespace fleetps::server
