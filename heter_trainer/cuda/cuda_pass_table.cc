// The CUDA pass table (heter_trainer/gpups/pass_table.h): per device shard, an open-addressing
// hash table (keys and row indices, at most half full), the rows being trained and the rows
// the pass started from (RowAccessor layout), and per-row show/click/touched, all in device
// memory; every batch is routed by DeviceOfKey and handled with the kernels of
// pass_table_kernels.cu. Every call leases a stream and its scratch from the shard's pool:
// several workers' lookups run at once, under the shard's lock held shared; an update finds
// its rows, checks them and copies its gradients in with no lock (the key table changes only
// in Build), and holds the lock exclusively only for the update kernel. Rows a push must
// extend come back as a list: their initial embedx weights are computed on the host
// (server::Initializer, the pservers' code) and written by a kernel, so values match the
// pservers' bitwise.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <shared_mutex>

#include "common/key_index.h"
#include "heter_trainer/cuda/cuda_resources.h"
#include "heter_trainer/cuda/cuda_status.h"
#include "heter_trainer/cuda/pass_table_kernels.h"
#include "heter_trainer/gpups/pass_table.h"
#include "heter_trainer/gpups/pass_table_impl.h"
#include "server/accessor/row_accessor.h"
#include "server/table/table_common.h"

namespace fleetps::heter {
namespace {

using gpu::DeviceBuffer;
using gpu::DeviceGuard;
using gpu::PinnedBuffer;
using gpu::Stream;

// Room on a device kept free beside the pass table (CUDA context, cuBLAS, the dense replica).
constexpr uint64_t kReserveBytes = uint64_t{1} << 30;
// Rows an export copies to the host at a time (end_pass writes back ranges of 32768).
constexpr uint64_t kExportChunk = uint64_t{1} << 15;

uint64_t Capacity(uint64_t keys) {  // slots: a power of two, at most half full
  uint64_t c = 16;
  while (c < keys * 2) c <<= 1;
  return c;
}

// A growable device buffer (per-call scratch).
template <typename T>
Status Reserve(int device, DeviceBuffer<T>* buf, size_t count) {
  if (buf->size() >= count) return Status::OK();
  ASSIGN_OR_RETURN(*buf, DeviceBuffer<T>::Allocate(device, std::max<size_t>(count, buf->size() * 2)));
  return Status::OK();
}

template <typename T>
Status Reserve(PinnedBuffer<T>* buf, size_t count) {
  if (buf->size() >= count) return Status::OK();
  ASSIGN_OR_RETURN(*buf, PinnedBuffer<T>::Allocate(std::max<size_t>(count, buf->size() * 2)));
  return Status::OK();
}

// A lookup's or an update's stream and scratch, leased from its shard's pool for one call.
// The host ends are pinned, so that the copies run at the link's rate and a synchronisation
// waits for the device alone.
struct Lookup {
  Stream stream;
  DeviceBuffer<uint64_t> query;
  DeviceBuffer<uint32_t> found;
  DeviceBuffer<float> values;
  PinnedBuffer<uint64_t> keys_in;
  PinnedBuffer<uint32_t> found_out;
  PinnedBuffer<float> values_out;
  // An update's: its gradients, shows and clicks staged ([grads | shows | clicks]), the rows
  // it extended (their positions), [rows extended, limit] on the device and on the host, the
  // extended rows' initial weights; the check for a key given twice.
  PinnedBuffer<float> update_in;
  DeviceBuffer<float> update_grads;
  DeviceBuffer<uint32_t> extend, counts;
  PinnedBuffer<uint32_t> counts_out;
  DeviceBuffer<float> initial;
  KeyIndex seen;
};

// A shard's idle leases: one per concurrent call, made on first need and kept.
class LookupPool {
 public:
  StatusOr<std::unique_ptr<Lookup>> Take(int device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto l = std::move(idle_.back());
        idle_.pop_back();
        return l;
      }
    }
    auto l = std::make_unique<Lookup>();
    ASSIGN_OR_RETURN(l->stream, Stream::Create(device));
    return l;
  }
  void Give(std::unique_ptr<Lookup> l) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(l));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Lookup>> idle_;
};

class CudaPassTable : public PassTable {
 public:
  CudaPassTable(const PassTableOptions& options, server::TableParts parts, std::vector<uint64_t> budgets)
      : options_(options),
        optimizer_(std::move(parts.optimizer)),
        initializer_(std::move(parts.initializer)),
        accessor_(options.table.accessor, static_cast<uint32_t>(options.table.dim), *optimizer_),
        dim_(accessor_.dim()),
        core_(accessor_.flags_offset()),
        row_floats_(accessor_.row_floats()),
        budgets_(std::move(budgets)),
        rule_(PassRuleOf(options.table, *optimizer_, accessor_)) {}

  Status Init() {
    for (uint32_t d = 0; d < options_.devices; ++d) {
      auto shard = std::make_unique<Shard>();
      shard->device = DeviceId(d);
      ASSIGN_OR_RETURN(shard->stream, Stream::Create(shard->device));
      shards_.push_back(std::move(shard));
    }
    return Status::OK();
  }

  std::string device_name() const override { return "cuda"; }
  uint32_t devices() const override { return options_.devices; }
  uint32_t dim() const override { return dim_; }
  uint32_t core_floats() const override { return core_; }
  uint64_t size() const override {
    uint64_t n = 0;
    for (const auto& s : shards_) n += s->keys.size();
    return n;
  }
  // Two rows, show/click/touched, up to 4 table slots (key + row index) and the key itself
  // (the build's query buffer) per key.
  uint64_t BytesPerKey() const override { return uint64_t{row_floats_} * 8 + 9 + 4 * 12 + 8; }

  Status CheckFits(std::span<const uint64_t> keys) const override {
    return CheckPassFits(keys, options_.devices, BytesPerKey(), [&](uint32_t d) { return budgets_[d]; });
  }

  Status Build(std::span<const uint64_t> keys, std::span<const float> rows, std::span<const uint8_t> flags,
               std::span<const float> stats) override {
    RETURN_IF_ERROR(CheckBuildSpans(keys, rows, flags, stats, core_));
    Clear();
    RETURN_IF_ERROR(CheckFits(keys));
    auto by_device = RouteToDevices(keys, options_.devices);
    // Each device's keys in routing order, checked for a repeat as the host twin checks them
    // (a repeated key lands on one device): the same key is named.
    std::vector<std::vector<uint64_t>> mine(options_.devices);
    {
      KeyIndex seen;
      std::vector<uint32_t> slots;
      for (uint32_t d = 0; d < options_.devices; ++d) {
        for (uint32_t i : by_device[d]) mine[d].push_back(keys[i]);
        seen.Clear();
        RETURN_IF_ERROR(IndexPassKeys(mine[d], &seen, &slots));
      }
    }
    for (uint32_t d = 0; d < options_.devices; ++d) {
      Status st = BuildShard(*shards_[d], std::move(mine[d]), rows, flags, stats, by_device[d]);
      if (!st.ok()) {
        Clear();
        return st.WithContext("pass table on GPU " + std::to_string(shards_[d]->device));
      }
    }
    return Status::OK();
  }

  Status Pull(std::span<const uint64_t> keys, float* out) override {
    auto by_device = RouteToDevices(keys, options_.devices);
    for (uint32_t d = 0; d < options_.devices; ++d) {
      if (by_device[d].empty()) continue;
      Shard& s = *shards_[d];
      std::shared_lock<ShardMutex> lock(s.mu);
      ASSIGN_OR_RETURN(auto guard, DeviceGuard::Enter(s.device));
      ASSIGN_OR_RETURN(auto lookup, s.lookups.Take(s.device));
      Status st = PullShard(s, d, *lookup, keys, by_device[d], out);
      // A call that failed part-way may have left copies queued: done before the next user.
      if (!st.ok()) (void)lookup->stream.Synchronize();
      s.lookups.Give(std::move(lookup));
      RETURN_IF_ERROR(st);
    }
    return Status::OK();
  }

  Status Push(std::span<const uint64_t> keys, std::span<const float> grads, std::span<const float> shows,
              std::span<const float> clicks) override {
    RETURN_IF_ERROR(CheckPushSpans(keys, grads, shows, clicks, dim_));
    auto by_device = RouteToDevices(keys, options_.devices);
    for (uint32_t d = 0; d < options_.devices; ++d) {
      if (by_device[d].empty()) continue;
      Shard& s = *shards_[d];
      ASSIGN_OR_RETURN(auto guard, DeviceGuard::Enter(s.device));
      ASSIGN_OR_RETURN(auto lookup, s.lookups.Take(s.device));
      Status st = PushShard(s, d, *lookup, keys, by_device[d], grads, shows, clicks);
      // A call that failed part-way may have left copies queued: done before the next user.
      if (!st.ok()) (void)lookup->stream.Synchronize();
      s.lookups.Give(std::move(lookup));
      RETURN_IF_ERROR(st);
    }
    return Status::OK();
  }

  Status ExportRange(uint64_t first, uint64_t count, PassRows* out) const override {
    *out = PassRows{};
    std::lock_guard<std::mutex> lock(export_.mu);  // one export at a time: its staging is shared
    uint64_t base = 0;                             // the shard's first row in the pass's numbering
    for (const auto& sp : shards_) {
      const Shard& s = *sp;
      const uint64_t n = s.keys.size();
      const auto [lo, hi] = RowsOnShard(first, count, base, n);
      base += n;
      if (lo >= hi) continue;
      ASSIGN_OR_RETURN(auto guard, DeviceGuard::Enter(s.device));
      // At most kExportChunk rows at a time through the page-locked staging: copies at the
      // link's rate into memory that is neither allocated nor zeroed per call.
      for (uint64_t c = lo; c < hi; c += kExportChunk) {
        const size_t m = std::min<uint64_t>(hi - c, kExportChunk);
        const size_t floats = m * row_floats_;
        RETURN_IF_ERROR(Reserve(&export_.floats, 2 * floats + 2 * m));
        RETURN_IF_ERROR(Reserve(&export_.touched, m));
        float* rows = export_.floats.data();
        float* begin = rows + floats;
        float* shows = begin + floats;
        float* clicks = shows + m;
        // On Build's stream, the only work on it: the rows are final (every call finished its
        // own stream's work before it returned).
        auto to_host = [stream = s.stream.get()](void* to, const void* from, size_t bytes) {
          return cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream);
        };
        RETURN_IF_CUDA_ERROR(to_host(rows, s.rows.data() + c * row_floats_, floats * sizeof(float)));
        RETURN_IF_CUDA_ERROR(to_host(begin, s.begin.data() + c * row_floats_, floats * sizeof(float)));
        RETURN_IF_CUDA_ERROR(to_host(shows, s.pass_stats.data() + c, m * sizeof(float)));
        RETURN_IF_CUDA_ERROR(to_host(clicks, s.pass_stats.data() + n + c, m * sizeof(float)));
        RETURN_IF_CUDA_ERROR(to_host(export_.touched.data(), s.touched.data() + c, m));
        RETURN_IF_ERROR(s.stream.Synchronize());
        AppendTouchedRows(accessor_, std::span<const uint64_t>(s.keys).subspan(c, m), export_.touched.data(), rows,
                          begin, shows, clicks, out);
      }
    }
    return Status::OK();
  }

  void Clear() override {
    for (auto& sp : shards_) {
      Shard& s = *sp;
      s.keys.clear();
      s.table_keys = {};
      s.table_rows = {};
      s.rows = {};
      s.begin = {};
      s.pass_stats = {};
      s.touched = {};
      s.mask = 0;
    }
  }

 private:
  // One device's share of the pass. mu: held shared by lookups, exclusively by the update
  // kernels (a lookup never sees a row half updated); Build, Export and Clear run with no
  // pass traffic, and are the only writers of the key table.
  struct Shard {
    ShardMutex mu;
    int device = 0;
    Stream stream;                      // Build's
    std::vector<uint64_t> keys;         // row index -> key (host copy)
    DeviceBuffer<uint64_t> table_keys;  // slots
    DeviceBuffer<uint32_t> table_rows;  // slots: row index, kEmptySlot when free
    uint64_t mask = 0;
    DeviceBuffer<float> rows, begin;  // row index x row_floats
    DeviceBuffer<float> pass_stats;   // [shows of every row | clicks of every row]
    DeviceBuffer<uint8_t> touched;
    LookupPool lookups;            // one lease per call in flight
    DeviceBuffer<uint64_t> query;  // Build's keys
  };

  int DeviceId(uint32_t d) const {
    return d < options_.device_ids.size() ? options_.device_ids[d] : static_cast<int>(d);
  }

  // Shard s's part of the pass: `keys` (the pass's keys members[k], in order) with their rows.
  Status BuildShard(Shard& s, std::vector<uint64_t> keys, std::span<const float> rows, std::span<const uint8_t> flags,
                    std::span<const float> stats, const std::vector<uint32_t>& members) {
    ASSIGN_OR_RETURN(auto guard, DeviceGuard::Enter(s.device));
    const size_t n = members.size();
    s.keys = std::move(keys);
    RowVector host(std::max<size_t>(n, 1) * row_floats_);
    ParallelChunks(n, kBuildChunk, [&](size_t lo, size_t hi) {
      std::fill(host.begin() + lo * row_floats_, host.begin() + hi * row_floats_, 0.0f);
      for (size_t k = lo; k < hi; ++k) FillPassRow(accessor_, rows, flags, stats, members[k], &host[k * row_floats_]);
    });
    const uint64_t capacity = Capacity(n);
    s.mask = capacity - 1;
    const size_t m = std::max<size_t>(n, 1);
    ASSIGN_OR_RETURN(s.table_keys, DeviceBuffer<uint64_t>::Allocate(s.device, capacity));
    ASSIGN_OR_RETURN(s.table_rows, DeviceBuffer<uint32_t>::Allocate(s.device, capacity));
    ASSIGN_OR_RETURN(s.rows, DeviceBuffer<float>::Allocate(s.device, m * row_floats_));
    ASSIGN_OR_RETURN(s.begin, DeviceBuffer<float>::Allocate(s.device, m * row_floats_));
    ASSIGN_OR_RETURN(s.pass_stats, DeviceBuffer<float>::Allocate(s.device, m * 2));
    ASSIGN_OR_RETURN(s.touched, DeviceBuffer<uint8_t>::Allocate(s.device, m));
    RETURN_IF_ERROR(Reserve(s.device, &s.query, m));
    cudaStream_t stream = s.stream.get();
    RETURN_IF_CUDA_ERROR(cudaMemsetAsync(s.table_rows.data(), 0xff, capacity * sizeof(uint32_t), stream));
    RETURN_IF_CUDA_ERROR(cudaMemsetAsync(s.pass_stats.data(), 0, m * 2 * sizeof(float), stream));
    RETURN_IF_CUDA_ERROR(cudaMemsetAsync(s.touched.data(), 0, m, stream));
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(s.rows.data(), host.data(), n * row_floats_ * sizeof(float), cudaMemcpyHostToDevice, stream));
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(s.begin.data(), s.rows.data(), n * row_floats_ * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream));
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(s.query.data(), s.keys.data(), n * sizeof(uint64_t), cudaMemcpyHostToDevice, stream));
    RETURN_IF_ERROR(gpu::LaunchInsert(s.query.data(), static_cast<uint32_t>(n), s.table_keys.data(),
                                      s.table_rows.data(), s.mask, stream));
    return s.stream.Synchronize();
  }

  // Rows that update l made reach the embedx threshold (positions k in the push's keys,
  // `extend` of them in l.extend), extended as the pservers would: embedx from the
  // initializer (host code). On l's stream, shard s's lock held exclusively.
  Status ExtendRows(Shard& s, Lookup& l, std::span<const uint64_t> keys, const std::vector<uint32_t>& members,
                    uint32_t extend) {
    std::vector<uint32_t> positions(extend);
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(positions.data(), l.extend.data(), extend * sizeof(uint32_t),
                                         cudaMemcpyDeviceToHost, l.stream.get()));
    RETURN_IF_ERROR(l.stream.Synchronize());
    std::vector<float> initial(size_t{extend} * dim_, 0.0f);
    for (uint32_t e = 0; e < extend; ++e) {
      initializer_.FillRow(keys[members[positions[e]]], initial.data() + size_t{e} * dim_, dim_);
    }
    cudaStream_t stream = l.stream.get();
    RETURN_IF_ERROR(Reserve(s.device, &l.initial, initial.size()));
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(l.initial.data(), initial.data(), initial.size() * sizeof(float),
                                         cudaMemcpyHostToDevice, stream));
    RETURN_IF_ERROR(gpu::LaunchExtend(rule_, l.extend.data(), l.found.data(), extend, l.initial.data(), s.rows.data(),
                                      s.begin.data(), stream));
    return l.stream.Synchronize();
  }

  // Queues on `stream`: keys[members[k]] to l.query, their row indices on shard s to l.found
  // (kEmptySlot: not in the pass), and, when first_missing is a device scalar, the least k
  // not in the pass into it. The shard must hold a pass (s.mask != 0).
  Status QueueFind(const Shard& s, Lookup& l, cudaStream_t stream, std::span<const uint64_t> keys,
                   std::span<const uint32_t> members, uint32_t* first_missing) {
    const auto n = static_cast<uint32_t>(members.size());
    RETURN_IF_ERROR(Reserve(s.device, &l.query, n));
    RETURN_IF_ERROR(Reserve(s.device, &l.found, n));
    RETURN_IF_ERROR(Reserve(&l.keys_in, n));
    for (uint32_t k = 0; k < n; ++k) l.keys_in.data()[k] = keys[members[k]];
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(l.query.data(), l.keys_in.data(), n * sizeof(uint64_t), cudaMemcpyHostToDevice, stream));
    return gpu::LaunchFind(l.query.data(), n, s.table_keys.data(), s.table_rows.data(), s.mask, l.found.data(),
                           first_missing, stream);
  }

  // How many of the n keys found into l.found_out lead the first one not in the pass.
  static uint32_t FoundPrefix(const Lookup& l, uint32_t n) {
    uint32_t k = 0;
    while (k < n && l.found_out.data()[k] != gpu::kEmptySlot) ++k;
    return k;
  }

  // Push's part on shard d, on l's stream, with one synchronisation: the keys before the
  // first one not in the pass or given twice are pushed, as the host twin does; then the
  // error. The host finds the first key given twice (p: the keys before it), stages the p
  // keys' gradients, shows and clicks in pinned memory and queues them with the find, which
  // lowers the device's limit from p to the first key not in the pass; with no lock so far
  // (the key table changes only in Build). Then, the shard's lock held exclusively, the
  // update kernel over the keys below the limit, and the limit and the count of rows it
  // extended back to the host; those rows are extended after it.
  Status PushShard(Shard& s, uint32_t d, Lookup& l, std::span<const uint64_t> keys,
                   const std::vector<uint32_t>& members, std::span<const float> grads, std::span<const float> shows,
                   std::span<const float> clicks) {
    if (s.mask == 0) return KeyNotInPass(keys[members[0]], d);
    cudaStream_t stream = l.stream.get();
    const auto m = static_cast<uint32_t>(members.size());
    uint32_t p = 0;
    l.seen.Reserve(m);
    for (; p < m; ++p) {
      const size_t before = l.seen.size();
      l.seen.Insert(keys[members[p]]);
      if (l.seen.size() == before) break;
    }
    l.seen.Clear();
    const size_t grad_floats = size_t{p} * dim_;
    const size_t staged = grad_floats + (shows.empty() ? 0 : p) + (clicks.empty() ? 0 : p);
    RETURN_IF_ERROR(Reserve(&l.update_in, staged));
    RETURN_IF_ERROR(Reserve(s.device, &l.update_grads, staged));
    RETURN_IF_ERROR(Reserve(s.device, &l.extend, p));
    RETURN_IF_ERROR(Reserve(s.device, &l.counts, 2));
    RETURN_IF_ERROR(Reserve(&l.counts_out, 2));
    float* in = l.update_in.data();
    float* in_shows = shows.empty() ? nullptr : in + grad_floats;
    float* in_clicks = clicks.empty() ? nullptr : in + grad_floats + (shows.empty() ? 0 : p);
    for (uint32_t k = 0; k < p; ++k) {
      const uint32_t i = members[k];
      std::memcpy(in + size_t{k} * dim_, grads.data() + size_t{i} * dim_, dim_ * sizeof(float));
      if (in_shows != nullptr) in_shows[k] = shows[i];
      if (in_clicks != nullptr) in_clicks[k] = clicks[i];
    }
    // [rows extended, limit] from [0, p].
    uint32_t* counts = l.counts_out.data();
    counts[0] = 0;
    counts[1] = p;
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(l.counts.data(), counts, 2 * sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
    RETURN_IF_ERROR(QueueFind(s, l, stream, keys, std::span(members).first(p), l.counts.data() + 1));
    float* dev = l.update_grads.data();
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(dev, in, staged * sizeof(float), cudaMemcpyHostToDevice, stream));
    std::unique_lock<ShardMutex> lock(s.mu);
    Status st = UpdateRows(s, l, keys, members, p, dev, in_shows ? dev + (in_shows - in) : nullptr,
                           in_clicks ? dev + (in_clicks - in) : nullptr);
    // Nothing of a failed update may run on once the shard is free again.
    if (!st.ok()) (void)l.stream.Synchronize();
    RETURN_IF_ERROR(st);
    const uint32_t pushed = counts[1];
    if (pushed < p) return KeyNotInPass(keys[members[pushed]], d);
    if (p < m) return KeyGivenTwice(keys[members[p]]);
    return Status::OK();
  }

  // Push's update on shard s (its lock held exclusively): the kernel over the first
  // min(n, limit) rows l found, with the staged gradients, shows and clicks on the device;
  // the count of rows it extended and the limit back to l.counts_out (one synchronisation);
  // then the extension of those rows.
  Status UpdateRows(Shard& s, Lookup& l, std::span<const uint64_t> keys, const std::vector<uint32_t>& members,
                    uint32_t n, const float* grads, const float* shows, const float* clicks) {
    cudaStream_t stream = l.stream.get();
    RETURN_IF_ERROR(gpu::LaunchPush(rule_, l.found.data(), n, l.counts.data() + 1, grads, shows, clicks, s.rows.data(),
                                    s.pass_stats.data(), s.pass_stats.data() + s.keys.size(), s.touched.data(),
                                    l.extend.data(), l.counts.data(), stream));
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(l.counts_out.data(), l.counts.data(), 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
    RETURN_IF_ERROR(l.stream.Synchronize());
    const uint32_t extend = l.counts_out.data()[0];
    return extend > 0 ? ExtendRows(s, l, keys, members, extend) : Status::OK();
  }

  // out[members[k] * dim_, ...) = the weights of keys[members[k]], all owned by shard d: the
  // keys in, find, gather, the row indices and weights out, on the lookup's stream with one
  // synchronisation; then NotFound naming the first key not in the pass.
  Status PullShard(const Shard& s, uint32_t d, Lookup& l, std::span<const uint64_t> keys,
                   const std::vector<uint32_t>& members, float* out) {
    const auto n = static_cast<uint32_t>(members.size());
    if (s.mask == 0) return KeyNotInPass(keys[members[0]], d);
    cudaStream_t stream = l.stream.get();
    RETURN_IF_ERROR(QueueFind(s, l, stream, keys, members, nullptr));
    RETURN_IF_ERROR(Reserve(&l.found_out, n));
    RETURN_IF_ERROR(Reserve(s.device, &l.values, size_t{n} * dim_));
    RETURN_IF_ERROR(Reserve(&l.values_out, size_t{n} * dim_));
    RETURN_IF_ERROR(gpu::LaunchGather(l.found.data(), n, s.rows.data(), row_floats_, dim_, l.values.data(), stream));
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(l.found_out.data(), l.found.data(), n * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(l.values_out.data(), l.values.data(), size_t{n} * dim_ * sizeof(float),
                                         cudaMemcpyDeviceToHost, stream));
    RETURN_IF_ERROR(l.stream.Synchronize());
    if (const uint32_t found = FoundPrefix(l, n); found < n) return KeyNotInPass(keys[members[found]], d);
    for (uint32_t k = 0; k < n; ++k) {
      std::memcpy(out + size_t{members[k]} * dim_, l.values_out.data() + size_t{k} * dim_, dim_ * sizeof(float));
    }
    return Status::OK();
  }

  const PassTableOptions options_;
  const std::unique_ptr<optimizer::Optimizer> optimizer_;
  const server::Initializer initializer_;
  const server::RowAccessor accessor_;  // refers to *optimizer_
  const uint32_t dim_;
  const uint32_t core_;
  const uint32_t row_floats_;
  const std::vector<uint64_t> budgets_;  // bytes per device
  const gpu::PassRule rule_;
  std::vector<std::unique_ptr<Shard>> shards_;
  // ExportRange's page-locked staging: [rows | begin | shows | clicks] and touched, of up to
  // kExportChunk rows; made on the first export, kept with the table.
  struct ExportStaging {
    std::mutex mu;
    PinnedBuffer<float> floats;
    PinnedBuffer<uint8_t> touched;
  };
  mutable ExportStaging export_;
};

}  // namespace

StatusOr<double> MeasureDeviceCopyGBps(int device) {
  ASSIGN_OR_RETURN(auto guard, DeviceGuard::Enter(device));
  constexpr size_t kBytes = size_t{1} << 30;
  constexpr int kRounds = 10;
  ASSIGN_OR_RETURN(auto a, DeviceBuffer<uint8_t>::Allocate(device, kBytes));
  ASSIGN_OR_RETURN(auto b, DeviceBuffer<uint8_t>::Allocate(device, kBytes));
  ASSIGN_OR_RETURN(auto stream, Stream::Create(device));
  ASSIGN_OR_RETURN(auto start, gpu::Event::Create(device, true));
  ASSIGN_OR_RETURN(auto stop, gpu::Event::Create(device, true));
  RETURN_IF_CUDA_ERROR(cudaMemsetAsync(a.data(), 1, kBytes, stream.get()));
  RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(b.data(), a.data(), kBytes, cudaMemcpyDeviceToDevice, stream.get()));
  RETURN_IF_ERROR(start.Record(stream.get()));
  for (int i = 0; i < kRounds; ++i) {
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(b.data(), a.data(), kBytes, cudaMemcpyDeviceToDevice, stream.get()));
  }
  RETURN_IF_ERROR(stop.Record(stream.get()));
  RETURN_IF_ERROR(stop.Synchronize());
  ASSIGN_OR_RETURN(float ms, gpu::Event::ElapsedMs(start, stop));
  return 2.0 * kBytes * kRounds / (ms / 1000.0) / 1e9;
}

StatusOr<std::unique_ptr<PassTable>> MakeCudaPassTable(const PassTableOptions& options) {
  if (options.devices == 0) return Status::InvalidArgument("pass table: devices must be >= 1");
  int visible = 0;
  const cudaError_t counted = cudaGetDeviceCount(&visible);
  if (counted != cudaSuccess || visible == 0) {
    const std::string why = counted != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorName(counted) +
                                                         " (" + cudaGetErrorString(counted) + ")"
                                                   : "no CUDA device is visible";
    return Status::Unavailable("GPU-PS: " + why +
                               "; run with HETER_DEVICE_TYPE=cpu for the pass table's host-memory twin "
                               "(FLAGS_selected_gpus=0,1 gives two host shards)");
  }
  std::vector<uint64_t> budgets;
  for (uint32_t d = 0; d < options.devices; ++d) {
    const int id = d < options.device_ids.size() ? options.device_ids[d] : static_cast<int>(d);
    if (id < 0 || id >= visible) {
      return Status::InvalidArgument("FLAGS_selected_gpus names GPU " + std::to_string(id) + " but " +
                                     std::to_string(visible) + " are visible");
    }
    RETURN_IF_ERROR(gpu::SetCudaWait(id, options.cuda_wait));
    uint64_t budget = options.device_memory_bytes;
    if (budget == 0) {
      ASSIGN_OR_RETURN(auto guard, DeviceGuard::Enter(id));
      size_t free_bytes = 0, total = 0;
      RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total));
      // Shards that share a GPU share its memory.
      const auto sharing = static_cast<uint64_t>(std::count(options.device_ids.begin(), options.device_ids.end(), id));
      budget = (free_bytes > kReserveBytes ? free_bytes - kReserveBytes : 0) / std::max<uint64_t>(sharing, 1);
    }
    budgets.push_back(budget);
  }
  ASSIGN_OR_RETURN(server::TableParts parts, server::BuildTableParts(options.table, TableKind::kSparse, 0, 1));
  auto table = std::make_unique<CudaPassTable>(options, std::move(parts), std::move(budgets));
  RETURN_IF_ERROR(table->Init());
  return std::unique_ptr<PassTable>(std::move(table));
}

}  // namespace fleetps::heter
