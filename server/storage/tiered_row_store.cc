#include "server/storage/tiered_row_store.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace fleetps::server {
namespace {

// Rows one batch call can add above the limit (SparseTable hands out batches of 256).
constexpr size_t kBatchSlack = 256;
// Floats of bookkeeping after each row: tick, bits.
constexpr uint32_t kMetaFloats = 2;
// Rows written per RocksDB WriteBatch by Rewrite.
constexpr size_t kRewriteBatch = 4096;

}  // namespace

size_t TieredRowStore::MemoryRowsFor(size_t budget_bytes, uint32_t row_floats) {
  // BytesFor grows with rows (the index in power-of-two steps); find the largest count whose
  // store, with one batch of slack, fits.
  size_t lo = 0, hi = budget_bytes / ((row_floats + kMetaFloats) * sizeof(float)) + 1;
  while (lo + 1 < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (MemoryRowStore::BytesFor(mid + kBatchSlack, row_floats + kMetaFloats) <= budget_bytes) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo >= kMinMemoryRows ? lo : 0;
}

TieredRowStore::TieredRowStore(uint32_t row_floats, size_t max_memory_rows, SpillDb* spill, uint32_t shard)
    : RowStore(row_floats),
      row_floats_(row_floats),
      record_bytes_(SpillDb::RecordBytes(row_floats)),
      max_memory_rows_(max_memory_rows),
      evict_batch_(std::max<size_t>(256, max_memory_rows / 32)),
      spill_(spill),
      shard_(shard),
      memory_(row_floats + kMetaFloats) {
  FLEETPS_CHECK_GE(max_memory_rows, kMinMemoryRows);
  FLEETPS_CHECK(spill != nullptr);
  memory_.Reserve(max_memory_rows + kBatchSlack);
}

uint32_t TieredRowStore::Tick(const float* row) const {
  uint32_t v;
  std::memcpy(&v, row + row_floats_, sizeof(v));
  return v;
}

uint32_t TieredRowStore::Bits(const float* row) const {
  uint32_t v;
  std::memcpy(&v, row + row_floats_ + 1, sizeof(v));
  return v;
}

void TieredRowStore::SetMeta(float* row, uint32_t tick, uint32_t bits) const {
  std::memcpy(row + row_floats_, &tick, sizeof(tick));
  std::memcpy(row + row_floats_ + 1, &bits, sizeof(bits));
}

Status TieredRowStore::MaybeEvict() {
  if (memory_.size() <= max_memory_rows_) return Status::OK();
  const size_t low = max_memory_rows_ - std::min(evict_batch_, max_memory_rows_ / 2);
  return Evict(memory_.size() - low);
}

Status TieredRowStore::Evict(size_t count) {
  struct Victim {
    uint32_t age;
    uint64_t key;
  };
  std::vector<Victim> window;
  std::vector<uint64_t> victims;
  victims.reserve(count);
  const size_t capacity = memory_.capacity();
  // Each window holds about 3/8..3/4 of its slots' worth of rows; take the older half.
  while (victims.size() < count && memory_.size() > victims.size()) {
    const size_t want = count - victims.size();
    const size_t slots = std::min(capacity, std::max<size_t>(1024, std::bit_ceil(want * 4)));
    window.clear();
    memory_.ScanSlots(hand_, slots, [&](uint64_t key, const float* row) {
      window.push_back(Victim{clock_ - Tick(row), key});
    });
    hand_ = (hand_ + slots) & (capacity - 1);
    if (window.empty()) continue;
    const size_t take = std::min(want, std::max<size_t>(1, window.size() / 2));
    std::nth_element(window.begin(), window.begin() + static_cast<ptrdiff_t>(take - 1), window.end(),
                     [](const Victim& a, const Victim& b) { return a.age > b.age; });
    for (size_t i = 0; i < take; ++i) victims.push_back(window[i].key);
    // A window scanned twice in one call could pick a key twice; windows advance by whole
    // windows over a fixed-size index, so that happens only after a full turn, when every
    // row of the index was already considered. Stop there.
    if (slots == capacity) break;
  }
  std::sort(victims.begin(), victims.end());
  victims.erase(std::unique(victims.begin(), victims.end()), victims.end());

  // Write first, then drop from RAM: a failed write loses nothing.
  SpillDb::Batch batch;
  size_t new_cold = 0, had_copy = 0;
  for (uint64_t key : victims) {
    const float* row = memory_.Find(key);
    const uint32_t bits = Bits(row);
    if ((bits & kInCold) == 0) {
      batch.Put(shard_, key, row, row_floats_);
      ++new_cold;
    } else {
      if ((bits & kDirty) != 0) batch.Put(shard_, key, row, row_floats_);  // else the disk copy is current
      ++had_copy;
    }
  }
  RETURN_IF_ERROR(spill_->Write(batch).WithContext("evicting " + std::to_string(victims.size()) + " rows"));
  cold_rows_ += new_cold;
  memory_in_cold_ -= had_copy;
  evicted_ += victims.size();
  for (uint64_t key : victims) RETURN_IF_ERROR(memory_.Erase(key).status());
  return Status::OK();
}

Status TieredRowStore::Promote(const uint64_t* keys, const std::vector<uint32_t>& miss, bool dirty, float** rows,
                               std::vector<uint8_t>* found) {
  const size_t m = miss.size();
  found->assign(m, 0);
  if (m == 0 || cold_rows_ == memory_in_cold_) return Status::OK();  // nothing only on disk
  std::vector<uint64_t> miss_keys(m);
  for (size_t i = 0; i < m; ++i) miss_keys[i] = keys[miss[i]];
  disk_rows_buf_.resize(m * size_t{row_floats_});
  // MultiGet wants bool*; vector<bool> has none.
  std::unique_ptr<bool[]> hit(new bool[m]);
  RETURN_IF_ERROR(spill_->MultiGet(shard_, miss_keys.data(), m, row_floats_, disk_rows_buf_.data(), hit.get()));
  for (size_t i = 0; i < m; ++i) {
    if (!hit[i]) continue;
    (*found)[i] = 1;
    bool inserted = false;
    float* row = memory_.FindOrInsert(miss_keys[i], &inserted);
    if (row == nullptr) {
      return Status::Busy("memory tier cannot add a row (" + std::to_string(memory_.size()) + " rows held)");
    }
    if (inserted) {  // a key repeated in the batch is promoted once
      std::memcpy(row, disk_rows_buf_.data() + i * size_t{row_floats_}, row_floats_ * sizeof(float));
      SetMeta(row, clock_, kInCold | (dirty ? kDirty : 0));
      ++memory_in_cold_;
      ++promoted_;
    }
    rows[miss[i]] = row;
  }
  return Status::OK();
}

Status TieredRowStore::FindBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows) {
  RETURN_IF_ERROR(MaybeEvict());
  ++clock_;
  RETURN_IF_ERROR(memory_.FindBatch(keys, n, touch_floats, rows));
  miss_.clear();
  for (size_t k = 0; k < n; ++k) {
    if (rows[k] == nullptr) {
      miss_.push_back(static_cast<uint32_t>(k));
    } else {
      SetMeta(rows[k], clock_, Bits(rows[k]));
    }
  }
  return Promote(keys, miss_, /*dirty=*/false, rows, &found_);
}

Status TieredRowStore::FindOrInsertBatch(const uint64_t* keys, size_t n, uint32_t touch_floats, float** rows,
                                         bool* inserted) {
  RETURN_IF_ERROR(MaybeEvict());
  ++clock_;
  RETURN_IF_ERROR(memory_.FindOrInsertBatch(keys, n, touch_floats, rows, inserted));
  miss_.clear();
  for (size_t k = 0; k < n; ++k) {
    if (inserted[k]) {
      // New in RAM: it may still be on disk. Not promoted through Promote(): the row is
      // already allocated, so the disk copy is read straight into it below.
      miss_.push_back(static_cast<uint32_t>(k));
      SetMeta(rows[k], clock_, kDirty);
    } else {
      SetMeta(rows[k], clock_, Bits(rows[k]) | kDirty);
    }
  }
  if (miss_.empty() || cold_rows_ == memory_in_cold_) return Status::OK();
  const size_t m = miss_.size();
  std::vector<uint64_t> miss_keys(m);
  for (size_t i = 0; i < m; ++i) miss_keys[i] = keys[miss_[i]];
  disk_rows_buf_.resize(m * size_t{row_floats_});
  std::unique_ptr<bool[]> hit(new bool[m]);
  RETURN_IF_ERROR(spill_->MultiGet(shard_, miss_keys.data(), m, row_floats_, disk_rows_buf_.data(), hit.get()));
  for (size_t i = 0; i < m; ++i) {
    if (!hit[i]) continue;
    const uint32_t k = miss_[i];
    std::memcpy(rows[k], disk_rows_buf_.data() + i * size_t{row_floats_}, row_floats_ * sizeof(float));
    SetMeta(rows[k], clock_, kInCold | kDirty);
    inserted[k] = false;
    ++memory_in_cold_;
    ++promoted_;
  }
  return Status::OK();
}

StatusOr<bool> TieredRowStore::Erase(uint64_t key) {
  if (const float* row = memory_.Find(key)) {
    if ((Bits(row) & kInCold) != 0) {
      SpillDb::Batch batch;
      batch.Delete(shard_, key);
      RETURN_IF_ERROR(spill_->Write(batch));
      --cold_rows_;
      --memory_in_cold_;
    }
    return memory_.Erase(key);
  }
  if (disk_only_rows() == 0) return false;
  disk_rows_buf_.resize(row_floats_);
  bool hit = false;
  RETURN_IF_ERROR(spill_->MultiGet(shard_, &key, 1, row_floats_, disk_rows_buf_.data(), &hit));
  if (!hit) return false;
  SpillDb::Batch batch;
  batch.Delete(shard_, key);
  RETURN_IF_ERROR(spill_->Write(batch));
  --cold_rows_;
  return true;
}

Status TieredRowStore::ForEach(const RowVisitor& visit) const {
  RETURN_IF_ERROR(memory_.ForEach(visit));  // the visitor reads the first row_floats floats
  if (disk_only_rows() == 0) return Status::OK();
  return spill_->ForEach(shard_, row_floats_, [&](uint64_t key, const float* row) -> Status {
    if (memory_.Find(key) != nullptr) return Status::OK();  // the RAM copy was visited
    return visit(key, row);
  });
}

Status TieredRowStore::Rewrite(const RowRewriter& rewrite) {
  // RAM rows in place.
  std::vector<uint64_t> erase;
  Status st = memory_.Rewrite([&](uint64_t key, float* row) {
    switch (rewrite(key, row)) {
      case RowAction::kKeep: break;
      case RowAction::kModified: SetMeta(row, Tick(row), Bits(row) | kDirty); break;
      case RowAction::kErase: erase.push_back(key); break;
    }
    return RowAction::kKeep;  // erased below, with their disk copies
  });
  RETURN_IF_ERROR(st);
  // Rows only on disk: rewritten through a copy, written back in batches.
  if (disk_only_rows() > 0) {
    SpillDb::Batch batch;
    std::vector<float> copy(row_floats_);
    size_t deleted = 0;
    RETURN_IF_ERROR(spill_->ForEach(shard_, row_floats_, [&](uint64_t key, const float* row) -> Status {
      if (memory_.Find(key) != nullptr) return Status::OK();
      std::memcpy(copy.data(), row, row_floats_ * sizeof(float));
      switch (rewrite(key, copy.data())) {
        case RowAction::kKeep: break;
        case RowAction::kModified: batch.Put(shard_, key, copy.data(), row_floats_); break;
        case RowAction::kErase:
          batch.Delete(shard_, key);
          ++deleted;
          break;
      }
      if (batch.count() >= kRewriteBatch) {
        RETURN_IF_ERROR(spill_->Write(batch));
        cold_rows_ -= deleted;
        deleted = 0;
      }
      return Status::OK();
    }));
    RETURN_IF_ERROR(spill_->Write(batch));
    cold_rows_ -= deleted;
  }
  for (uint64_t key : erase) RETURN_IF_ERROR(Erase(key).status());
  return Status::OK();
}

Status TieredRowStore::InsertAbsentBatch(const uint64_t* keys, size_t n, const float* rows) {
  ++clock_;
  SpillDb::Batch batch;
  for (size_t k = 0; k < n; ++k) {
    const float* src = rows + k * size_t{row_floats_};
    if (memory_.size() < max_memory_rows_) {
      bool inserted = false;
      float* row = memory_.FindOrInsert(keys[k], &inserted);
      if (row == nullptr) return Status::Busy("memory tier cannot add a row");
      std::memcpy(row, src, row_floats_ * sizeof(float));
      SetMeta(row, clock_, kDirty);
    } else {
      batch.Put(shard_, keys[k], src, row_floats_);
    }
  }
  const size_t written = batch.count();
  RETURN_IF_ERROR(spill_->Write(batch));
  cold_rows_ += written;
  return Status::OK();
}

Status TieredRowStore::Clear() {
  RETURN_IF_ERROR(spill_->DeleteShard(shard_));
  RETURN_IF_ERROR(memory_.Clear());
  memory_.Reserve(max_memory_rows_ + kBatchSlack);
  cold_rows_ = 0;
  memory_in_cold_ = 0;
  hand_ = 0;
  return Status::OK();
}

}  // namespace fleetps::server
