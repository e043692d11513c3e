#include <algorithm>
#include <cstring>
#include <mutex>
#include <shared_mutex>

#include "common/key_index.h"
#include "heter_trainer/gpups/pass_table.h"
#include "heter_trainer/gpups/pass_table_impl.h"
#include "server/accessor/row_accessor.h"
#include "server/table/table_common.h"

namespace fleetps::heter {

namespace {

class HostPassTable : public PassTable {
 public:
  HostPassTable(const PassTableOptions& options, server::TableParts parts)
      : options_(options),
        optimizer_(std::move(parts.optimizer)),
        initializer_(std::move(parts.initializer)),
        accessor_(options.table.accessor, static_cast<uint32_t>(options.table.dim), *optimizer_),
        dim_(accessor_.dim()),
        core_(accessor_.flags_offset()),
        row_floats_(accessor_.row_floats()) {
    for (uint32_t d = 0; d < options_.devices; ++d) shards_.push_back(std::make_unique<Shard>());
  }

  std::string device_name() const override { return "host"; }
  uint32_t devices() const override { return options_.devices; }
  uint32_t dim() const override { return dim_; }
  uint32_t core_floats() const override { return core_; }
  uint64_t size() const override {
    uint64_t n = 0;
    for (const auto& s : shards_) n += s->index.size();
    return n;
  }
  // Two rows (the pass's and the one it started from), show/click/touched, and the key index
  // (at most half full: up to 4 slots of 16 bytes after rounding, and the key list).
  uint64_t BytesPerKey() const override { return uint64_t{row_floats_} * 8 + 9 + 4 * 16 + 8; }

  Status Build(std::span<const uint64_t> keys, std::span<const float> rows, std::span<const uint8_t> flags,
               std::span<const float> stats) override {
    RETURN_IF_ERROR(CheckBuildSpans(keys, rows, flags, stats, core_));
    Clear();
    RETURN_IF_ERROR(CheckFits(keys));
    auto by_device = RouteToDevices(keys, options_.devices);
    std::vector<uint64_t> mine;
    std::vector<uint32_t> slots;
    for (uint32_t d = 0; d < options_.devices; ++d) {
      Shard& s = *shards_[d];
      const auto& members = by_device[d];
      const size_t n = members.size();
      mine.resize(n);
      for (size_t k = 0; k < n; ++k) mine[k] = keys[members[k]];
      s.index = KeyIndex(n);
      if (Status st = IndexPassKeys(mine, &s.index, &slots); !st.ok()) {
        Clear();
        return st;
      }
      // Distinct keys take slots 0, 1, ... in order: member k's row is slot k.
      s.rows.resize(n * size_t{row_floats_});
      s.begin.resize(s.rows.size());
      s.shows.assign(n, 0.0f);
      s.clicks.assign(n, 0.0f);
      s.touched.assign(n, 0);
      ParallelChunks(n, kBuildChunk, [&](size_t lo, size_t hi) {
        std::fill(s.rows.begin() + lo * row_floats_, s.rows.begin() + hi * row_floats_, 0.0f);
        for (size_t k = lo; k < hi; ++k)
          FillPassRow(accessor_, rows, flags, stats, members[k], &s.rows[k * row_floats_]);
        std::copy(s.rows.begin() + lo * row_floats_, s.rows.begin() + hi * row_floats_,
                  s.begin.begin() + lo * row_floats_);
      });
    }
    return Status::OK();
  }

  Status CheckFits(std::span<const uint64_t> keys) const override {
    if (options_.device_memory_bytes == 0) return Status::OK();
    return CheckPassFits(keys, options_.devices, BytesPerKey(), [&](uint32_t) { return options_.device_memory_bytes; });
  }

  Status Pull(std::span<const uint64_t> keys, float* out) override {
    auto by_device = RouteToDevices(keys, options_.devices);
    for (uint32_t d = 0; d < options_.devices; ++d) {
      if (by_device[d].empty()) continue;
      Shard& s = *shards_[d];
      std::shared_lock<ShardMutex> lock(s.mu);  // lookups only read: the workers' run at once
      for (uint32_t i : by_device[d]) {
        const uint32_t slot = s.index.Find(keys[i]);
        if (slot == KeyIndex::kNone) return KeyNotInPass(keys[i], d);
        std::memcpy(out + size_t{i} * dim_, s.rows.data() + size_t{slot} * row_floats_, dim_ * sizeof(float));
      }
    }
    return Status::OK();
  }

  Status Push(std::span<const uint64_t> keys, std::span<const float> grads, std::span<const float> shows,
              std::span<const float> clicks) override {
    RETURN_IF_ERROR(CheckPushSpans(keys, grads, shows, clicks, dim_));
    auto by_device = RouteToDevices(keys, options_.devices);
    std::vector<uint32_t> found;
    KeyIndex seen;
    std::vector<float> initial;
    for (uint32_t d = 0; d < options_.devices; ++d) {
      const auto& members = by_device[d];
      if (members.empty()) continue;
      Shard& s = *shards_[d];
      // The rows first, with no lock: the key index changes only in Build and Clear. Only the
      // updates themselves hold the shard alone.
      found.resize(members.size());
      for (size_t k = 0; k < members.size(); ++k) found[k] = s.index.Find(keys[members[k]]);
      Status refused;
      const uint32_t n = PushablePrefix(keys, members, found.data(), d, seen, &refused);
      std::unique_lock<ShardMutex> lock(s.mu);
      for (uint32_t k = 0; k < n; ++k) {
        const uint32_t i = members[k], slot = found[k];
        float* row = s.rows.data() + size_t{slot} * row_floats_;
        const float show = shows.empty() ? 0.0f : shows[i];
        const float click = clicks.empty() ? 0.0f : clicks[i];
        if (accessor_.ApplyPush(row, grads.data() + size_t{i} * dim_, show, click, /*delta=*/false)) {
          // Extended now, as the pservers would: embedx from the initializer, fresh state. The
          // row it started from is extended alike, so WriteRows finds an untouched server row
          // (which it extends the same way) equal to it.
          initial.resize(dim_);
          initializer_.FillRow(keys[i], initial.data(), dim_);
          float* start = s.begin.data() + size_t{slot} * row_floats_;
          std::copy(initial.begin() + 1, initial.end(), row + 1);
          std::copy(initial.begin() + 1, initial.end(), start + 1);
          accessor_.Extend(row);
          accessor_.Extend(start);
        }
        s.shows[slot] += show;
        s.clicks[slot] += click;
        s.touched[slot] = 1;
      }
      RETURN_IF_ERROR(refused);
    }
    return Status::OK();
  }

  Status ExportRange(uint64_t first, uint64_t count, PassRows* out) const override {
    *out = PassRows{};
    uint64_t base = 0;  // the shard's first row in the pass's numbering
    for (const auto& sp : shards_) {
      const Shard& s = *sp;
      const uint64_t n = s.index.size();
      const auto [lo, hi] = RowsOnShard(first, count, base, n);
      base += n;
      if (lo >= hi) continue;
      AppendTouchedRows(accessor_, std::span<const uint64_t>(s.index.keys()).subspan(lo, hi - lo),
                        s.touched.data() + lo, s.rows.data() + lo * row_floats_, s.begin.data() + lo * row_floats_,
                        s.shows.data() + lo, s.clicks.data() + lo, out);
    }
    return Status::OK();
  }

  void Clear() override {
    for (auto& sp : shards_) {
      Shard& s = *sp;
      s.index = KeyIndex();
      s.rows = {};
      s.begin = {};
      s.shows = {};
      s.clicks = {};
      s.touched = {};
    }
  }

 private:
  // One device's share of the pass. mu guards the rows and statistics during a pass: Pull
  // holds it shared, Push's updates exclusive (as the CUDA table: lookups at once, updates
  // one at a time); Build, Export and Clear run with no pass traffic, and are the only
  // writers of the index.
  struct Shard {
    ShardMutex mu;
    KeyIndex index;            // key -> slot
    RowVector rows;            // slot x row_floats_: the rows being trained
    RowVector begin;           // slot x row_floats_: the rows as pulled (extended along)
    std::vector<float> shows;  // per slot: counted in this pass
    std::vector<float> clicks;
    std::vector<uint8_t> touched;  // per slot: pushed at least once
  };

  const PassTableOptions options_;
  const std::unique_ptr<optimizer::Optimizer> optimizer_;
  const server::Initializer initializer_;
  const server::RowAccessor accessor_;  // refers to *optimizer_
  const uint32_t dim_;
  const uint32_t core_;
  const uint32_t row_floats_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace

StatusOr<std::unique_ptr<PassTable>> MakeHostPassTable(const PassTableOptions& options) {
  if (options.devices == 0) return Status::InvalidArgument("pass table: devices must be >= 1");
  ASSIGN_OR_RETURN(server::TableParts parts, server::BuildTableParts(options.table, TableKind::kSparse, 0, 1));
  return std::unique_ptr<PassTable>(new HostPassTable(options, std::move(parts)));
}

}  // namespace fleetps::heter
