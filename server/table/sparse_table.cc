#include "server/table/sparse_table.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "common/sharding.h"
#include "server/checkpoint/row_file.h"
#include "server/storage/memory_row_store.h"
#include "server/storage/tiered_row_store.h"
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
                                                           uint32_t num_servers, const StorageOptions& storage) {
  ASSIGN_OR_RETURN(TableParts parts, BuildTableParts(options, TableKind::kSparse, server_index, num_servers));
  if (options.dim > kMaxDim) {
    return Status::InvalidArgument(TableLabel(options) + ": dim " + std::to_string(options.dim) +
                                   " is above the sparse maximum " + std::to_string(kMaxDim));
  }
  if (options.shards == 0) return Status::InvalidArgument(TableLabel(options) + ": shards must be >= 1");
  std::unique_ptr<SparseTable> table(
      new SparseTable(options, server_index, num_servers, std::move(parts.optimizer), std::move(parts.initializer)));
  RETURN_IF_ERROR(table->OpenStores(storage));
  return table;
}

SparseTable::~SparseTable() = default;

SparseTable::SparseTable(const TableOptions& options, uint32_t server_index, uint32_t num_servers,
                         std::unique_ptr<optimizer::Optimizer> optimizer, Initializer initializer)
    : options_(options),
      server_index_(server_index),
      num_servers_(num_servers),
      dim_(static_cast<uint32_t>(options.dim)),
      optimizer_(std::move(optimizer)),
      initializer_(std::move(initializer)),
      accessor_(options.accessor, dim_, *optimizer_),
      row_floats_(accessor_.row_floats()),
      plain_(!accessor_.ctr()),
      shards_(options.shards) {}

Status SparseTable::OpenStores(const StorageOptions& storage) {
  const uint64_t budget = options_.memory_budget_bytes;
  if (budget == 0) {
    for (Shard& shard : shards_) shard.store = std::make_unique<MemoryRowStore>(row_floats_);
    return Status::OK();
  }
  const std::string label = TableLabel(options_);
  if (storage.spill_dir.empty()) {
    return Status::InvalidArgument(label + ": memory_budget_bytes needs a RocksDB directory (server.data_dir)");
  }
  const size_t per_shard = static_cast<size_t>(budget / 4 * 3 / shards_.size());
  const size_t rows = TieredRowStore::MemoryRowsFor(per_shard, row_floats_);
  if (rows == 0) {
    return Status::InvalidArgument(label + ": memory_budget_bytes " + std::to_string(budget) + " leaves " +
                                   std::to_string(per_shard) + " bytes of RAM per shard, fewer than " +
                                   std::to_string(TieredRowStore::kMinMemoryRows) + " rows of " +
                                   std::to_string(row_floats_ * 4) + " bytes (raise the budget or lower shards)");
  }
  SpillDbOptions spill_options;
  spill_options.dir = storage.spill_dir;
  spill_options.block_cache_bytes = static_cast<size_t>(budget / 8);
  spill_options.write_buffer_bytes = static_cast<size_t>(budget / 16);
  auto spill = SpillDb::Open(spill_options);
  if (!spill.ok()) return spill.status().WithContext(label);
  spill_ = std::move(spill).value();
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    shards_[s].store = std::make_unique<TieredRowStore>(row_floats_, rows, spill_.get(), s);
  }
  return Status::OK();
}

uint32_t SparseTable::ShardOf(uint64_t key) const { return PlaceKey(key, num_servers_, num_shards()).shard; }

bool SparseTable::Owns(uint64_t key) const { return ServerOfKey(key, num_servers_) == server_index_; }

SparseTable::Shard& SparseTable::ShardFor(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n) {
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

uint64_t SparseTable::InitInserted(const uint64_t* keys, float* const* rows, const bool* inserted, size_t n) const {
  uint64_t created = 0;
  for (size_t k = 0; k < n; ++k) {
    if (!inserted[k]) continue;
    initializer_.FillRow(keys[k], rows[k], accessor_.CreateWeights());
    accessor_.InitRow(rows[k]);
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

Status SparseTable::PullShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, float* out) {
  Shard& s = ShardFor(shard, keys, idx, n);
  uint64_t batch_keys[kBatch];
  float* rows[kBatch];
  for (size_t begin = 0; begin < n; begin += kBatch) {
    const size_t m = std::min(kBatch, n - begin);
    const uint32_t* batch_idx = idx + begin;
    RETURN_IF_ERROR(
        FetchRows(s, shard, keys, batch_idx, m, options_.create_on_pull, /*touch_floats=*/dim_, batch_keys, rows));
    for (size_t k = 0; k < m; ++k) {
      float* dst = out + size_t{batch_idx[k]} * dim_;
      if (rows[k] != nullptr) {
        CopyRow(rows[k], dim_, dst);
      } else {
        const uint32_t created = accessor_.CreateWeights();
        initializer_.FillRow(batch_keys[k], dst, created);
        std::fill(dst + created, dst + dim_, 0.0f);
      }
    }
    s.pulls += m;
  }
  return Status::OK();
}

Status SparseTable::PushShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, const float* grads,
                              const PushCounters& counters, PushMode mode) {
  Shard& s = ShardFor(shard, keys, idx, n);
  uint64_t batch_keys[kBatch];
  float* rows[kBatch];
  const bool delta = mode == PushMode::kDelta;
  const uint32_t flags_offset = accessor_.flags_offset();
  for (size_t begin = 0; begin < n; begin += kBatch) {
    const size_t m = std::min(kBatch, n - begin);
    const uint32_t* batch_idx = idx + begin;
    RETURN_IF_ERROR(FetchRows(s, shard, keys, batch_idx, m, /*create=*/true, row_floats_, batch_keys, rows));
    if (plain_ && !delta) {
      // The hot path: a plain row's only flags are Changed and kDirty.
      constexpr float kPushedFlags = static_cast<float>(RowAccessor::kChanged | RowAccessor::kDirty);
      for (size_t k = 0; k < m; ++k) {
        optimizer_->Update(rows[k], rows[k] + dim_, grads + size_t{batch_idx[k]} * dim_, dim_);
        rows[k][flags_offset] = kPushedFlags;
      }
    } else {
      ApplyRows(batch_keys, rows, batch_idx, m, grads, counters, delta);
    }
    s.pushes += m;
  }
  return Status::OK();
}

void SparseTable::ApplyRows(const uint64_t* batch_keys, float* const* rows, const uint32_t* batch_idx, size_t m,
                            const float* grads, const PushCounters& counters, bool delta) {
  std::vector<float> initial;  // a row's initial weights, for the rare extension
  for (size_t k = 0; k < m; ++k) {
    const uint32_t i = batch_idx[k];
    const float show = counters.shows != nullptr ? counters.shows[i] : 0.0f;
    const float click = counters.clicks != nullptr ? counters.clicks[i] : 0.0f;
    if (accessor_.ApplyPush(rows[k], grads + size_t{i} * dim_, show, click, delta)) {
      initial.resize(dim_);
      initializer_.FillRow(batch_keys[k], initial.data(), dim_);
      std::copy(initial.begin() + 1, initial.end(), rows[k] + 1);
      accessor_.Extend(rows[k]);
    }
  }
}

Status SparseTable::PullRowsShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n, float* rows,
                                  uint8_t* flags, float* stats) {
  Shard& s = ShardFor(shard, keys, idx, n);
  uint64_t batch_keys[kBatch];
  float* found[kBatch];
  const uint32_t core = core_floats();
  std::vector<float> fresh(row_floats_);
  for (size_t begin = 0; begin < n; begin += kBatch) {
    const size_t m = std::min(kBatch, n - begin);
    const uint32_t* batch_idx = idx + begin;
    RETURN_IF_ERROR(FetchRows(s, shard, keys, batch_idx, m, /*create=*/false, row_floats_, batch_keys, found));
    for (size_t k = 0; k < m; ++k) {
      const float* row = found[k];
      if (row == nullptr) {  // the row a push would create
        initializer_.FillRow(batch_keys[k], fresh.data(), accessor_.CreateWeights());
        accessor_.InitRow(fresh.data());
        row = fresh.data();
      }
      const size_t i = batch_idx[k];
      CopyRow(row, core, rows + i * core);
      flags[i] = static_cast<uint8_t>(accessor_.SavedFlags(row));
      if (stats != nullptr && accessor_.ctr()) {
        stats[i * 2] = accessor_.StatOf(row, RowAccessor::kShow);
        stats[i * 2 + 1] = accessor_.StatOf(row, RowAccessor::kClick);
      }
    }
    s.pulls += m;
  }
  return Status::OK();
}

Status SparseTable::WriteRowsShard(uint32_t shard, const uint64_t* keys, const uint32_t* idx, size_t n,
                                   const RowWrite& write, RowWriteCounts* counts) {
  Shard& s = ShardFor(shard, keys, idx, n);
  uint64_t batch_keys[kBatch];
  float* rows[kBatch];
  const uint32_t core = core_floats();
  std::vector<float> initial;  // a row's initial weights, for an extension
  for (size_t begin = 0; begin < n; begin += kBatch) {
    const size_t m = std::min(kBatch, n - begin);
    const uint32_t* batch_idx = idx + begin;
    RETURN_IF_ERROR(FetchRows(s, shard, keys, batch_idx, m, /*create=*/true, row_floats_, batch_keys, rows));
    for (size_t k = 0; k < m; ++k) {
      float* row = rows[k];
      const size_t i = batch_idx[k];
      if (write.extended != nullptr && write.extended[i] != 0 && !accessor_.Extended(row)) {
        initial.resize(dim_);
        initializer_.FillRow(batch_keys[k], initial.data(), dim_);
        std::copy(initial.begin() + 1, initial.end(), row + 1);
        accessor_.Extend(row);
      }
      const float* from = write.begin + i * core;
      const float* to = write.end + i * core;
      if (std::memcmp(row, from, core * sizeof(float)) == 0) {
        CopyRow(to, core, row);
        ++counts->written;
      } else {
        if (write.average) {
          for (uint32_t j = 0; j < core; ++j) row[j] = 0.5f * (row[j] + to[j]);
        } else {
          for (uint32_t j = 0; j < core; ++j) row[j] += to[j] - from[j];
        }
        ++counts->merged;
      }
      if (accessor_.ctr()) {
        const float show = write.shows != nullptr ? write.shows[i] : 0.0f;
        const float click = write.clicks != nullptr ? write.clicks[i] : 0.0f;
        float* stats = row + accessor_.stats_offset();
        stats[RowAccessor::kShow] += show;
        stats[RowAccessor::kClick] += click;
        stats[RowAccessor::kDeltaScore] += accessor_.Score(show, click);
        stats[RowAccessor::kUnseenDays] = 0.0f;
      }
      accessor_.SetFlags(row, accessor_.Flags(row) | RowAccessor::kChanged | RowAccessor::kDirty);
    }
    s.pushes += m;
  }
  return Status::OK();
}

ShardStats SparseTable::Stats(uint32_t shard) const {
  FLEETPS_CHECK_LT(shard, num_shards());
  const Shard& s = shards_[shard];
  return ShardStats{s.store->size(),      s.store->MemoryBytes(), s.pulls, s.pushes, s.created,
                    s.store->disk_rows(), s.store->DiskBytes()};
}

StatusOr<uint64_t> SparseTable::ShrinkShard(uint32_t shard) {
  FLEETPS_CHECK_LT(shard, num_shards());
  if (plain_) return uint64_t{0};
  uint64_t deleted = 0;
  Status st = shards_[shard].store->Rewrite([&](uint64_t, float* row) {
    if (accessor_.Shrink(row)) {
      ++deleted;
      return RowStore::RowAction::kErase;
    }
    return RowStore::RowAction::kModified;
  });
  if (!st.ok()) return st.WithContext(TableLabel(options_) + " shard " + std::to_string(shard) + ": shrink");
  return deleted;
}

StatusOr<ShardSaveResult> SparseTable::SaveShard(uint32_t shard, disk::SaveMode mode, const std::string& path) {
  FLEETPS_CHECK_LT(shard, num_shards());
  const std::string where = TableLabel(options_) + " shard " + std::to_string(shard) + ": save";
  auto writer = SparseRowWriter::Create(path);
  if (!writer.ok()) return writer.status().WithContext(where);
  const bool full = mode == disk::SaveMode::Checkpoint || mode == disk::SaveMode::Batch;
  const bool only_changed = mode == disk::SaveMode::Delta;
  std::vector<float> payload(row_floats_);
  // Writes the row when the mode takes it; *taken says whether it did.
  auto write = [&](uint64_t key, const float* row, bool* taken) -> Status {
    const uint32_t flags = accessor_.SavedFlags(row);
    *taken = !only_changed || (flags & RowAccessor::kChanged) != 0;
    if (!*taken) return Status::OK();
    const uint32_t n = accessor_.Encode(row, full, payload.data());
    return (*writer)->Add(key, static_cast<uint8_t>(flags), payload.data(), n);
  };
  Status st;
  if (!accessor_.HasAfterSave(mode)) {
    // Nothing to mark: a read-only pass (a tiered store writes nothing back).
    st = shards_[shard].store->ForEach([&](uint64_t key, const float* row) {
      bool taken = false;
      return write(key, row, &taken);
    });
  } else {
    Status error;
    st = shards_[shard].store->Rewrite([&](uint64_t key, float* row) {
      if (!error.ok()) return RowStore::RowAction::kKeep;
      bool taken = false;
      error = write(key, row, &taken);
      if (!error.ok() || !taken) return RowStore::RowAction::kKeep;
      return accessor_.MarkSaved(row) ? RowStore::RowAction::kModified : RowStore::RowAction::kKeep;
    });
    if (st.ok()) st = error;
  }
  if (!st.ok()) return st.WithContext(where);
  ShardSaveResult result;
  result.rows = (*writer)->rows();
  auto digest = (*writer)->Finish();
  if (!digest.ok()) return digest.status().WithContext(where);
  result.file = *digest;
  return result;
}

StatusOr<uint64_t> SparseTable::ApplySaveEffects(uint32_t shard, disk::SaveMode mode) {
  FLEETPS_CHECK_LT(shard, num_shards());
  if (!accessor_.HasAfterSave(mode)) return uint64_t{0};
  uint64_t changed = 0;
  Status st = shards_[shard].store->Rewrite([&](uint64_t, float* row) {
    if (accessor_.Dirty(row) || !accessor_.AfterSave(mode, row)) return RowStore::RowAction::kKeep;
    ++changed;
    return RowStore::RowAction::kModified;
  });
  if (!st.ok()) {
    return st.WithContext(TableLabel(options_) + " shard " + std::to_string(shard) + ": after-save changes");
  }
  return changed;
}

Status SparseTable::ClearShard(uint32_t shard) {
  FLEETPS_CHECK_LT(shard, num_shards());
  return shards_[shard].store->Clear().WithContext(TableLabel(options_) + " shard " + std::to_string(shard));
}

void SparseTable::ReserveShard(uint32_t shard, size_t rows) {
  FLEETPS_CHECK_LT(shard, num_shards());
  RowStore& store = *shards_[shard].store;
  store.Reserve(store.size() + rows);
}

Status SparseTable::LoadRows(uint32_t shard, const uint64_t* keys, const uint8_t* flags, const float* const* payloads,
                             size_t n, bool full, bool merge) {
  FLEETPS_CHECK_LT(shard, num_shards());
  Shard& s = shards_[shard];
  const std::string where = TableLabel(options_) + " shard " + std::to_string(shard) + ": load";
#ifndef NDEBUG
  for (size_t k = 0; k < n; ++k) {
    const KeyPlacement place = PlaceKey(keys[k], num_servers_, num_shards());
    FLEETPS_CHECK(place.server == server_index_ && place.shard == shard) << "key " << keys[k];
  }
#endif
  if (!merge) {
    // Replacing a cleared shard: checkpoint keys are unique, so rows are built here and
    // handed over without lookups (a tiered store writes what exceeds RAM straight to disk).
    std::vector<float> rows(std::min(n, kBatch) * size_t{row_floats_});
    for (size_t begin = 0; begin < n; begin += kBatch) {
      const size_t m = std::min(kBatch, n - begin);
      for (size_t k = 0; k < m; ++k) {
        accessor_.Decode(flags[begin + k], full, payloads[begin + k], rows.data() + k * size_t{row_floats_});
      }
      Status st = s.store->InsertAbsentBatch(keys + begin, m, rows.data());
      if (!st.ok()) return st.WithContext(where);
    }
    return Status::OK();
  }
  float* rows[kBatch];
  bool inserted[kBatch];
  for (size_t begin = 0; begin < n; begin += kBatch) {
    const size_t m = std::min(kBatch, n - begin);
    Status st = s.store->FindOrInsertBatch(keys + begin, m, row_floats_, rows, inserted);
    if (!st.ok()) return st.WithContext(where);
    for (size_t k = 0; k < m; ++k) {
      if (inserted[k]) {
        accessor_.Decode(flags[begin + k], full, payloads[begin + k], rows[k]);
      } else {
        accessor_.MergeWeights(flags[begin + k], payloads[begin + k], rows[k]);
      }
      accessor_.SetFlags(rows[k], accessor_.Flags(rows[k]) | RowAccessor::kChanged | RowAccessor::kDirty);
    }
  }
  return Status::OK();
}

Status SparseTable::ForEachRow(uint32_t shard, const RowStore::RowVisitor& visit) const {
  FLEETPS_CHECK_LT(shard, num_shards());
  return shards_[shard].store->ForEach(visit);
}

}  // namespace fleetps::server
