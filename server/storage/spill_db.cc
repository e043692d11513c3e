#include "server/storage/spill_db.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "schemas/checkpoint_generated.h"

namespace fleetps::server {
namespace {

constexpr size_t kKeyBytes = 12;

// The one seam from rocksdb::Status to fleetps::Status.
Status FromRocks(const rocksdb::Status& st, const std::string& what) {
  if (st.ok()) return Status::OK();
  const std::string msg = "RocksDB " + what + ": " + st.ToString();
  if (st.IsCorruption()) return Status::Corruption(msg);
  if (st.IsNotFound()) return Status::NotFound(msg);
  if (st.IsInvalidArgument() || st.IsNotSupported()) return Status::InvalidArgument(msg);
  if (st.IsBusy() || st.IsTryAgain()) return Status::Busy(msg);
  if (st.IsTimedOut()) return Status::TimedOut(msg);
  if (st.IsAborted()) return Status::Aborted(msg);
  return Status::IOError(msg);
}

void EncodeKey(uint32_t shard, uint64_t key, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(shard >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) out[4 + i] = static_cast<char>(key >> (56 - 8 * i));
}

uint64_t DecodeKey(const char* in) {
  uint64_t key = 0;
  for (int i = 0; i < 8; ++i) key = (key << 8) | static_cast<uint8_t>(in[4 + i]);
  return key;
}

// Copies the row floats of a SpilledRow value to out[0, row_floats), or Corruption.
// `scratch` is reused between calls: RocksDB values are not aligned, and FlatBuffers reads
// scalars in place, so the value is copied to aligned memory first.
Status DecodeRow(const rocksdb::Slice& value, uint32_t row_floats, uint64_t key, const std::string& dir,
                 std::vector<uint64_t>* scratch, float* out) {
  scratch->resize(value.size() / sizeof(uint64_t) + 1);
  std::memcpy(scratch->data(), value.data(), value.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(scratch->data());
  flatbuffers::Verifier verifier(bytes, value.size());
  if (!verifier.VerifyBuffer<disk::SpilledRow>(nullptr)) {
    return Status::Corruption("RocksDB tier " + dir + ": the row of key " + std::to_string(key) +
                              " is not a SpilledRow (" + std::to_string(value.size()) + " bytes)");
  }
  const auto* row = flatbuffers::GetRoot<disk::SpilledRow>(bytes);
  if (row->values() == nullptr || row->values()->size() != row_floats) {
    return Status::Corruption("RocksDB tier " + dir + ": the row of key " + std::to_string(key) + " has " +
                              std::to_string(row->values() ? row->values()->size() : 0) + " floats, expected " +
                              std::to_string(row_floats));
  }
  std::memcpy(out, row->values()->data(), row_floats * sizeof(float));
  return Status::OK();
}

}  // namespace

struct SpillDb::Impl {
  SpillDbOptions options;
  std::unique_ptr<rocksdb::DB> db;
  std::shared_ptr<rocksdb::Cache> cache;
  rocksdb::WriteOptions write_options;
};

struct SpillDb::Batch::Impl {
  rocksdb::WriteBatch batch;
  flatbuffers::FlatBufferBuilder fbb{1024};
};

SpillDb::Batch::Batch() : impl_(std::make_unique<Impl>()) {}
SpillDb::Batch::~Batch() = default;

void SpillDb::Batch::Put(uint32_t shard, uint64_t key, const float* row, uint32_t row_floats) {
  char k[kKeyBytes];
  EncodeKey(shard, key, k);
  auto& fbb = impl_->fbb;
  fbb.Clear();
  fbb.Finish(disk::CreateSpilledRow(fbb, fbb.CreateVector(row, row_floats)));
  impl_->batch.Put(rocksdb::Slice(k, kKeyBytes),
                   rocksdb::Slice(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()));
  ++count_;
}

void SpillDb::Batch::Delete(uint32_t shard, uint64_t key) {
  char k[kKeyBytes];
  EncodeKey(shard, key, k);
  impl_->batch.Delete(rocksdb::Slice(k, kKeyBytes));
  ++count_;
}

void SpillDb::Batch::Clear() {
  impl_->batch.Clear();
  count_ = 0;
}

SpillDb::SpillDb(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpillDb::~SpillDb() = default;

StatusOr<std::unique_ptr<SpillDb>> SpillDb::Open(const SpillDbOptions& options) {
  if (options.dir.empty()) return Status::InvalidArgument("RocksDB tier: empty directory");
  std::error_code ec;
  std::filesystem::remove_all(options.dir, ec);
  if (ec) return Status::IOError("RocksDB tier: cannot wipe " + options.dir + ": " + ec.message());
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return Status::IOError("RocksDB tier: cannot create " + options.dir + ": " + ec.message());

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->cache = rocksdb::NewLRUCache(std::max<size_t>(options.block_cache_bytes, 1u << 20));
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = impl->cache;
  // Index and bloom filter blocks stay in the table readers, outside the block cache: in a
  // cache sized by the budget they were evicted by data blocks and re-read (and
  // checksummed) on nearly every lookup (measured: 10x slower). They cost about 2 bytes per
  // row on disk (10-bit bloom + index over 4 KiB blocks), on top of the budget.
  table.cache_index_and_filter_blocks = false;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));  // lookups of new keys mostly miss
  table.optimize_filters_for_memory = true;
  table.block_size = 4 << 10;  // point lookups: read (and checksum) little per row
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.error_if_exists = true;
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  db_options.write_buffer_size = std::max<size_t>(options.write_buffer_bytes, 1u << 20);
  db_options.max_write_buffer_number = 2;
  db_options.compression = rocksdb::kNoCompression;  // float rows barely compress
  db_options.max_background_jobs = 2;
  // Universal compaction: the tier is rewritten at the eviction rate, so write amplification
  // (leveled: ~10x) is what limits it; universal keeps it near 2-3x at some space cost.
  db_options.compaction_style = rocksdb::kCompactionStyleUniversal;
  db_options.level0_file_num_compaction_trigger = 4;
  db_options.level0_slowdown_writes_trigger = 24;
  db_options.level0_stop_writes_trigger = 40;
  db_options.max_open_files = 512;
  db_options.info_log_level = rocksdb::WARN_LEVEL;
  db_options.keep_log_file_num = 2;
  db_options.avoid_unnecessary_blocking_io = true;
  rocksdb::DB* db = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(db_options, options.dir, &db), "open " + options.dir));
  impl->db.reset(db);
  impl->write_options.disableWAL = true;  // not durable by design (see the header)
  return std::unique_ptr<SpillDb>(new SpillDb(std::move(impl)));
}

const std::string& SpillDb::dir() const { return impl_->options.dir; }

Status SpillDb::Write(Batch& batch) {
  if (batch.count() == 0) return Status::OK();
  Status st = FromRocks(impl_->db->Write(impl_->write_options, &batch.impl_->batch), "write in " + dir());
  batch.Clear();
  return st;
}

Status SpillDb::MultiGet(uint32_t shard, const uint64_t* keys, size_t n, uint32_t row_floats, float* out, bool* found) {
  if (n == 0) return Status::OK();
  std::vector<char> key_bytes(n * kKeyBytes);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t k = 0; k < n; ++k) {
    EncodeKey(shard, keys[k], key_bytes.data() + k * kKeyBytes);
    slices[k] = rocksdb::Slice(key_bytes.data() + k * kKeyBytes, kKeyBytes);
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  impl_->db->MultiGet(rocksdb::ReadOptions(), impl_->db->DefaultColumnFamily(), n, slices.data(), values.data(),
                      statuses.data());
  std::vector<uint64_t> scratch;
  for (size_t k = 0; k < n; ++k) {
    if (statuses[k].IsNotFound()) {
      found[k] = false;
      continue;
    }
    RETURN_IF_ERROR(FromRocks(statuses[k], "read in " + dir()));
    RETURN_IF_ERROR(DecodeRow(values[k], row_floats, keys[k], dir(), &scratch, out + k * size_t{row_floats}));
    found[k] = true;
  }
  return Status::OK();
}

Status SpillDb::ForEach(uint32_t shard, uint32_t row_floats,
                        const std::function<Status(uint64_t key, const float* row)>& visit) const {
  char lower[kKeyBytes], upper[kKeyBytes];
  EncodeKey(shard, 0, lower);
  EncodeKey(shard + 1, 0, upper);  // shards are < 2^32 - 1 (TableOptions::shards <= 4096)
  rocksdb::Slice upper_slice(upper, kKeyBytes);
  rocksdb::ReadOptions read;
  read.iterate_upper_bound = &upper_slice;
  read.fill_cache = false;  // a full scan would evict the hot blocks
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(read));
  std::vector<float> row(row_floats);
  std::vector<uint64_t> scratch;
  for (it->Seek(rocksdb::Slice(lower, kKeyBytes)); it->Valid(); it->Next()) {
    if (it->key().size() != kKeyBytes) {
      return Status::Corruption("RocksDB tier " + dir() + ": a key of " + std::to_string(it->key().size()) +
                                " bytes (expected 12)");
    }
    const uint64_t key = DecodeKey(it->key().data());
    RETURN_IF_ERROR(DecodeRow(it->value(), row_floats, key, dir(), &scratch, row.data()));
    RETURN_IF_ERROR(visit(key, row.data()));
  }
  return FromRocks(it->status(), "scan in " + dir());
}

Status SpillDb::DeleteShard(uint32_t shard) {
  char lower[kKeyBytes], upper[kKeyBytes];
  EncodeKey(shard, 0, lower);
  EncodeKey(shard + 1, 0, upper);
  return FromRocks(impl_->db->DeleteRange(impl_->write_options, impl_->db->DefaultColumnFamily(),
                                          rocksdb::Slice(lower, kKeyBytes), rocksdb::Slice(upper, kKeyBytes)),
                   "delete range in " + dir());
}

size_t SpillDb::RecordBytes(uint32_t row_floats) {
  flatbuffers::FlatBufferBuilder fbb(64 + size_t{row_floats} * sizeof(float));
  const std::vector<float> zeros(row_floats, 0.0f);
  fbb.Finish(disk::CreateSpilledRow(fbb, fbb.CreateVector(zeros)));
  return kKeyBytes + fbb.GetSize();
}

uint64_t SpillDb::MemoryBytes() const {
  uint64_t mem = 0, readers = 0;
  impl_->db->GetIntProperty("rocksdb.cur-size-all-mem-tables", &mem);
  impl_->db->GetIntProperty("rocksdb.estimate-table-readers-mem", &readers);
  return mem + readers + impl_->cache->GetUsage();
}

}  // namespace fleetps::server
