#include "server/table/sparse_table.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "common/sharding.h"
#include "server/storage/memory_row_store.h"
#include "server/table/table_common.h"

namespace fleetps::server {
namespace {

// dst[0, n) = src[0, n). std::copy_n calls memmove, whose call overhead is a sizeable part of
// a whole pull at dim 8; fixed-size memcpy is inlined.
void CopyRow(const float* src, uint32_t n, float* dst) {
  constexpr uint32_t kStep = 8;
  uint32_t i = 0;
  for (; i + kStep <= n; i += kStep) std::memcpy(dst + i, src + i, kStep * sizeof(float));
  for (; i < n; ++i) dst[i] = src[i];
}

}  // namespace

StatusOr<std::unique_ptr<SparseTable>> SparseTable::Create(const TableOptions& options, uint32_t server_index,
                                                           uint32_t num_servers) {
  ASSIGN_OR_RETURN(TableParts parts, BuildTableParts(options, TableKind::kSparse, server_index, num_servers));
  if (options.dim > kMaxDim) {
    return Status::InvalidArgument(TableLabel(options) + ": dim " + std::to_string(options.dim) +
                                   " is above the sparse maximum " + std::to_string(kMaxDim));
  }
  if (options.shards == 0) return Status::InvalidArgument(TableLabel(options) + ": shards must be >= 1");
  return std::unique_ptr<SparseTable>(new SparseTable(
      options, server_index, num_servers, std::move(parts.optimizer), std::move(parts.initializer)));
}

SparseTable::SparseTable(const TableOptions& options, uint32_t server_index, uint32_t num_servers,
                         std::unique_ptr<optimizer::Optimizer> optimizer, Initializer initializer)
    : options_(options),
      server_index_(server_index),
      num_servers_(num_servers),
      dim_(static_cast<uint32_t>(options.dim)),
      optimizer_(std::move(optimizer)),
      initializer_(std::move(initializer)),
      row_floats_(dim_ + optimizer_->StateSize(dim_)),
      shards_(options.shards) {
  // The storage tier is fixed to memory until the next issue adds a RocksDB tier and a
  // storage option to choose it.
  for (Shard& shard : shards_) shard.store = std::make_unique<MemoryRowStore>(row_floats_);
}

uint32_t SparseTable::ShardOf(uint64_t key) const { return PlaceKey(key, num_servers_, num_shards()).shard; }

bool SparseTable::Owns(uint64_t key) const { return ServerOfKey(key, num_servers_) == server_index_; }

SparseTable::Shard& SparseTable::ShardFor(uint32_t shard, const uint64_t* keys, const uint32_t* idx,
                                          size_t n) {
  FLEETPS_CHECK_LT(shard, num_shards());
#ifndef NDEBUG
  // Two divisions per key: too slow for release builds, where the service has routed the
  // keys with the same PlaceKey.
  for (size_t k = 0; k < n; ++k) {
    const KeyPlacement place = PlaceKey(keys[idx[k]], num_servers_, num_shards());
    FLEETPS_CHECK(place.server == server_index_ && place.shard == shard)
        << "key " << keys[idx[k]] << " belongs to server " << place.server << " shard " << place.shard;
  }
#endif
  return shards_[shard];
}

uint64_t SparseTable::InitInserted(const uint64_t* keys, float* const* rows, const bool* inserted,
                                   size_t n) const {
  uint64_t created = 0;
  for (size_t k = 0; k < n; ++k) {
    if (!inserted[k]) continue;
    initializer_.FillRow(keys[k], rows[k], dim_);
    optimizer_->InitState(rows[k] + dim_, dim_);
    ++created;
  }
  return created;
}

Status SparseTable::FetchRows(Shard& s, uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n,
                              bool create, uint32_t touch_floats, uint64_t* batch_keys, float** rows) {
  for (size_t k = 0; k < n; ++k) batch_keys[k] = keys[idx[k]];
  Status st;
  if (create) {
    bool inserted[kBatch];
    st = s.store->FindOrInsertBatch(batch_keys, n, touch_floats, rows, inserted);
    // Initialized before the caller touches any row, so a key repeated in the batch starts
    // from its initial value once.
    if (st.ok()) s.created += InitInserted(batch_keys, rows, inserted, n);
  } else {
    st = s.store->FindBatch(batch_keys, n, touch_floats, rows);
  }
  if (!st.ok()) return st.WithContext(TableLabel(options_) + " shard " + std::to_string(shard));
  return Status::OK();
}

Status SparseTable::PullShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n,
                              float* out) {
  Shard& s = ShardFor(shard, keys, idx, n);
  uint64_t batch_keys[kBatch];
  float* rows[kBatch];
  for (size_t begin = 0; begin < n; begin += kBatch) {
    const size_t m = std::min(kBatch, n - begin);
    const uint32_t* batch_idx = idx + begin;
    RETURN_IF_ERROR(FetchRows(s, shard, keys, batch_idx, m, options_.create_on_pull, /*touch_floats=*/dim_,
                              batch_keys, rows));
    for (size_t k = 0; k < m; ++k) {
      float* dst = out + size_t{batch_idx[k]} * dim_;
      if (rows[k] != nullptr) {
        CopyRow(rows[k], dim_, dst);
      } else {
        initializer_.FillRow(batch_keys[k], dst, dim_);
      }
    }
    s.pulls += m;
  }
  return Status::OK();
}

Status SparseTable::PushShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n,
                              const float* grads,
                              const PushCounters& /*counters: CTR accessor, next issue*/) {
  Shard& s = ShardFor(shard, keys, idx, n);
  uint64_t batch_keys[kBatch];
  float* rows[kBatch];
  for (size_t begin = 0; begin < n; begin += kBatch) {
    const size_t m = std::min(kBatch, n - begin);
    const uint32_t* batch_idx = idx + begin;
    RETURN_IF_ERROR(FetchRows(s, shard, keys, batch_idx, m, /*create=*/true, row_floats_, batch_keys, rows));
    for (size_t k = 0; k < m; ++k) {
      optimizer_->Update(rows[k], rows[k] + dim_, grads + size_t{batch_idx[k]} * dim_, dim_);
    }
    s.pushes += m;
  }
  return Status::OK();
}

ShardStats SparseTable::Stats(uint32_t shard) const {
  FLEETPS_CHECK_LT(shard, num_shards());
  const Shard& s = shards_[shard];
  return ShardStats{s.store->size(), s.store->MemoryBytes(), s.pulls, s.pushes, s.created};
}

}  // namespace fleetps::server
