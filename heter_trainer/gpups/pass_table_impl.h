#pragma once
// What the two PassTable implementations (host_pass_table.cc, heter_trainer/cuda/
// cuda_pass_table.cc) share: routing keys to devices, the checks of Build's and Push's
// arguments (Build's key index, Push's pushable prefix), the budget check and its message,
// the not-in-pass and repeated-key errors, the starting row a pulled row gives, Build's
// threads and uninitialised row vectors, and the kernels' rule (pass_rules.h) from the
// table's optimizer and accessor. One definition each, so that the host twin and the CUDA table
// refuse the same inputs with the same words and start a pass from the same bytes.

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/key_index.h"
#include "common/optimizer/optimizer.h"
#include "heter_trainer/gpups/pass_rules.h"
#include "heter_trainer/gpups/pass_table.h"
#include "server/accessor/row_accessor.h"

namespace fleetps::heter {

// Build fills a pass's rows on several threads (ParallelChunks), at least this many each.
inline constexpr size_t kBuildChunk = size_t{1} << 16;

// An allocator whose vectors leave new elements uninitialised (default-initialised): Build's
// threads write (and first touch) a pass's rows, instead of one thread zeroing them first.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using RowVector = std::vector<float, UninitializedAllocator<float>>;

// Runs f(begin, end) over [0, n) in contiguous chunks on up to 16 threads (one per core),
// each chunk at least `min_chunk` long; returns when all are done. For Build's host work on
// a pass's rows.
template <typename F>
void ParallelChunks(size_t n, size_t min_chunk, F f) {
  const size_t cores = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  const size_t chunks = std::clamp<size_t>(n / std::max<size_t>(min_chunk, 1), 1, cores);
  std::vector<std::thread> threads;
  for (size_t c = 1; c < chunks; ++c) threads.emplace_back([&, c] { f(n * c / chunks, n * (c + 1) / chunks); });
  f(0, n / chunks);
  for (auto& t : threads) t.join();
}

// A shard's lock: shared by lookups, exclusive for updates, and writer-first — once an update
// waits, new lookups wait behind it. (std::shared_mutex on glibc lets lookups keep coming while
// an update waits: with several workers looking up, an update could wait for a gap between
// them indefinitely, and every other worker for it at the step's barrier.) Meets
// SharedMutex, for std::shared_lock and std::unique_lock.
class ShardMutex {
 public:
  ShardMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&rw_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~ShardMutex() { pthread_rwlock_destroy(&rw_); }
  ShardMutex(const ShardMutex&) = delete;
  ShardMutex& operator=(const ShardMutex&) = delete;

  void lock() { pthread_rwlock_wrlock(&rw_); }
  bool try_lock() { return pthread_rwlock_trywrlock(&rw_) == 0; }
  void unlock() { pthread_rwlock_unlock(&rw_); }
  void lock_shared() { pthread_rwlock_rdlock(&rw_); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&rw_) == 0; }
  void unlock_shared() { pthread_rwlock_unlock(&rw_); }

 private:
  pthread_rwlock_t rw_;
};

// Positions of `keys` per owning device, in order.
inline std::vector<std::vector<uint32_t>> RouteToDevices(std::span<const uint64_t> keys, uint32_t devices) {
  std::vector<std::vector<uint32_t>> by_device(devices);
  for (uint32_t i = 0; i < keys.size(); ++i) by_device[DeviceOfKey(keys[i], devices)].push_back(i);
  return by_device;
}

// The message of a pass refused for memory: what it needs on `device` and the budget.
inline std::string PassTooLargeMessage(uint64_t pass_keys, uint32_t device, uint64_t device_keys,
                                       uint64_t bytes_per_key, uint64_t budget_bytes) {
  return "the pass has " + std::to_string(pass_keys) + " keys; device " + std::to_string(device) + " owns " +
         std::to_string(device_keys) + " of them and needs " + std::to_string(device_keys * bytes_per_key) +
         " bytes (" + std::to_string(bytes_per_key) + " per key), above its budget of " + std::to_string(budget_bytes) +
         " bytes (fleetps.gpups.device_memory_mb): split each epoch into more passes "
         "(fleetps.gpups.passes_per_epoch), or train on more devices (FLAGS_selected_gpus)";
}

// InvalidArgument with PassTooLargeMessage when the keys one device owns need more than its
// budget of budget_of(d) bytes.
template <typename BudgetOf>
Status CheckPassFits(std::span<const uint64_t> keys, uint32_t devices, uint64_t bytes_per_key, BudgetOf budget_of) {
  std::vector<uint64_t> count(devices, 0);
  for (uint64_t k : keys) ++count[DeviceOfKey(k, devices)];
  for (uint32_t d = 0; d < devices; ++d) {
    const uint64_t budget = budget_of(d);
    if (count[d] * bytes_per_key > budget) {
      return Status::InvalidArgument(PassTooLargeMessage(keys.size(), d, count[d], bytes_per_key, budget));
    }
  }
  return Status::OK();
}

// Build's spans: rows keys x core floats, one flag per key, stats empty or two per key.
inline Status CheckBuildSpans(std::span<const uint64_t> keys, std::span<const float> rows,
                              std::span<const uint8_t> flags, std::span<const float> stats, uint32_t core) {
  if (rows.size() == keys.size() * core && flags.size() == keys.size() &&
      (stats.empty() || stats.size() == keys.size() * 2)) {
    return Status::OK();
  }
  return Status::InvalidArgument("pass table: " + std::to_string(keys.size()) + " keys need " +
                                 std::to_string(keys.size() * core) +
                                 " row floats, one flag and 0 or 2 stats each; got " + std::to_string(rows.size()) +
                                 ", " + std::to_string(flags.size()) + ", " + std::to_string(stats.size()));
}

// Push's spans: grads keys x dim floats, shows and clicks each empty or one per key.
inline Status CheckPushSpans(std::span<const uint64_t> keys, std::span<const float> grads, std::span<const float> shows,
                             std::span<const float> clicks, uint32_t dim) {
  if (grads.size() == keys.size() * dim && (shows.empty() || shows.size() == keys.size()) &&
      (clicks.empty() || clicks.size() == keys.size())) {
    return Status::OK();
  }
  return Status::InvalidArgument(
      "pass table push: " + std::to_string(keys.size()) + " keys need " + std::to_string(keys.size() * dim) +
      " gradient floats and 0 or 1 show and click "
      "each; got " +
      std::to_string(grads.size()) + ", " + std::to_string(shows.size()) + ", " + std::to_string(clicks.size()));
}

inline Status KeyNotInPass(uint64_t key, uint32_t device) {
  return Status::NotFound("key " + std::to_string(key) + " is not in this pass's table (device " +
                          std::to_string(device) + "): begin_pass collects every key of the pass's data");
}

inline Status KeyGivenTwice(uint64_t key) {
  return Status::InvalidArgument("pass table: key " + std::to_string(key) + " given twice");
}

// Build's index of one device's keys: (*slots)[k] = the slot of keys[k] in `index`, each key
// inserted in order (slots 0, 1, ... when distinct). InvalidArgument (KeyGivenTwice) naming
// the first key that repeats an earlier one.
inline Status IndexPassKeys(std::span<const uint64_t> keys, KeyIndex* index, std::vector<uint32_t>* slots) {
  slots->resize(keys.size());
  index->InsertAll(keys, slots->data());  // prefetches ahead: the keys' slots are cache misses
  if (index->size() == keys.size()) return Status::OK();
  // A key inserted again got an earlier key's slot instead of the next one.
  uint32_t next = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    if ((*slots)[k] != next) return KeyGivenTwice(keys[k]);
    ++next;
  }
  return Status::OK();  // unreachable: sizes differ only with a repeat
}

// The host twin's push checks on one shard, before any update (the CUDA table makes the same
// ones with the device's find): found[k] is the row of keys[members[k]] (KeyIndex::kNone: not
// in the pass). Returns how many of the members lead the first key not in the pass
// (NotFound) or given twice (InvalidArgument; on a device its two updates would race), and
// that key's error in *refused (OK when all pass). `seen`: the caller's scratch, left empty.
inline uint32_t PushablePrefix(std::span<const uint64_t> keys, const std::vector<uint32_t>& members,
                               const uint32_t* found, uint32_t device, KeyIndex& seen, Status* refused) {
  *refused = Status::OK();
  const auto m = static_cast<uint32_t>(members.size());
  seen.Reserve(m);
  uint32_t k = 0;
  for (; k < m; ++k) {
    const uint64_t key = keys[members[k]];
    if (found[k] == KeyIndex::kNone) {
      *refused = KeyNotInPass(key, device);
      break;
    }
    const size_t before = seen.size();
    seen.Insert(key);
    if (seen.size() == before) {
      *refused = KeyGivenTwice(key);
      break;
    }
  }
  seen.Clear();
  return k;
}

// row (accessor.row_floats() floats, zeroed) = key i's pulled row as a pass starts from it:
// its core floats, its saved flags, and on CTR tables its show/click statistics.
inline void FillPassRow(const server::RowAccessor& accessor, std::span<const float> rows,
                        std::span<const uint8_t> flags, std::span<const float> stats, uint32_t i, float* row) {
  const uint32_t core = accessor.flags_offset();
  std::memcpy(row, rows.data() + size_t{i} * core, core * sizeof(float));
  accessor.SetFlags(row, flags[i] & server::RowAccessor::kSavedFlags);
  if (accessor.ctr()) {
    float* st = row + accessor.stats_offset();
    st[server::RowAccessor::kShow] = stats.empty() ? 0.0f : stats[size_t{i} * 2];
    st[server::RowAccessor::kClick] = stats.empty() ? 0.0f : stats[size_t{i} * 2 + 1];
  }
}

// The part of rows [first, first + count) of a pass (ExportRange's numbering) that falls on a
// shard holding rows [base, base + n), as the shard's row indices [lo, hi); lo == hi: none.
struct ShardRows {
  uint64_t lo, hi;
};
inline ShardRows RowsOnShard(uint64_t first, uint64_t count, uint64_t base, uint64_t n) {
  const uint64_t end = first + std::min(count, ~uint64_t{0} - first);  // no wrap for a huge count
  return {std::clamp(first, base, base + n) - base, std::clamp(end, base, base + n) - base};
}

// Export's part for one shard: appends to `out` the rows with touched[r] set, in slot order —
// keys[r], the core floats of begin and rows (row_floats apart), the extended flag (CTR
// tables), shows[r] and clicks[r]. Sized once for the touched rows, then filled in place.
inline void AppendTouchedRows(const server::RowAccessor& accessor, std::span<const uint64_t> keys,
                              const uint8_t* touched, const float* rows, const float* begin, const float* shows,
                              const float* clicks, PassRows* out) {
  const size_t n = keys.size();
  const uint32_t core = accessor.flags_offset(), row_floats = accessor.row_floats();
  size_t count = 0;
  for (size_t r = 0; r < n; ++r) count += touched[r] != 0;
  size_t k = out->keys.size();
  out->keys.resize(k + count);
  out->begin.resize((k + count) * core);
  out->end.resize((k + count) * core);
  if (accessor.ctr()) out->extended.resize(k + count);
  out->shows.resize(k + count);
  out->clicks.resize(k + count);
  for (size_t r = 0; r < n; ++r) {
    if (!touched[r]) continue;
    const float* row = rows + r * row_floats;
    out->keys[k] = keys[r];
    std::memcpy(out->begin.data() + k * core, begin + r * row_floats, core * sizeof(float));
    std::memcpy(out->end.data() + k * core, row, core * sizeof(float));
    if (accessor.ctr()) out->extended[k] = accessor.Extended(row) ? 1 : 0;
    out->shows[k] = shows[r];
    out->clicks[k] = clicks[r];
    ++k;
  }
}

// The pass table kernels' rule (pass_rules.h) for `table`, whose rows `accessor` lays out
// with `optimizer`.
inline gpu::PassRule PassRuleOf(const TableOptions& table, const optimizer::Optimizer& optimizer,
                                const server::RowAccessor& accessor) {
  const auto& opt = table.optimizer;
  gpu::PassRule rule;
  rule.kind = static_cast<int>(opt.kind);
  rule.learning_rate = opt.learning_rate;
  rule.decay = optimizer.decay();
  rule.epsilon = opt.epsilon;
  rule.beta1 = opt.beta1;
  rule.beta2 = opt.beta2;
  rule.initial_accumulator = opt.initial_accumulator;
  rule.has_bounds = opt.has_bounds;
  rule.bound_min = opt.bound_min;
  rule.bound_max = opt.bound_max;
  rule.dim = accessor.dim();
  rule.shared_floats = optimizer.shared_state_size();
  rule.element_floats = optimizer.element_state_size();
  rule.row_floats = accessor.row_floats();
  rule.flags_offset = accessor.flags_offset();
  rule.stats_offset = accessor.stats_offset();
  rule.ctr = accessor.ctr();
  rule.nonclk_coeff = table.accessor.nonclk_coeff;
  rule.click_coeff = table.accessor.click_coeff;
  rule.embedx_threshold = table.accessor.embedx_threshold;
  return rule;
}

}  // namespace fleetps::heter
