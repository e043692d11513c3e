// The host-memory pass table (GPU-PS twin): routing of keys to devices, lookups, and pushes
// that give bitwise the rows the pservers' own push path gives (server::SparseTable, the
// same RowAccessor and optimizer), CTR statistics and lazy embedx extension included; the
// exported rows written back with WriteRowsShard reproduce those rows exactly; a pass too
// large for a device's budget is refused before anything is allocated.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "heter_trainer/gpups/pass_table.h"
#include "heter_trainer/gpups/pass_table_impl.h"
#include "server/table/sparse_table.h"
#include "test/heter_trainer/gpups/pass_table_checks.h"

namespace fleetps::heter {
namespace {

TableOptions CtrTable() {
  TableOptions t;
  t.id = 0;
  t.name = "embedding";
  t.dim = 4;
  t.shards = 3;
  t.optimizer.kind = OptimizerKind::kAdagrad;
  t.optimizer.learning_rate = 0.1f;
  t.optimizer.initial_accumulator = 0.5f;
  t.initializer.kind = InitializerKind::kUniform;
  t.initializer.min = -0.5f;
  t.initializer.max = 0.5f;
  t.initializer.seed = 7;
  t.accessor.kind = AccessorKind::kCtr;
  t.accessor.embedx_threshold = 3.0f;  // rows are extended during the pass
  return t;
}

std::unique_ptr<server::SparseTable> Table(const TableOptions& t) {
  auto table = server::SparseTable::Create(t, 0, 1);
  REQUIRE(table.ok());
  return std::move(table).value();
}

// PullRows of every key (one call per key: each routed to its shard).
void PullRows(server::SparseTable& table, const std::vector<uint64_t>& keys, std::vector<float>* rows,
              std::vector<uint8_t>* flags, std::vector<float>* stats) {
  const uint32_t core = table.core_floats();
  rows->assign(keys.size() * core, 0.0f);
  flags->assign(keys.size(), 0);
  stats->assign(keys.size() * 2, 0.0f);
  for (uint32_t i = 0; i < keys.size(); ++i) {
    REQUIRE(table.PullRowsShard(table.ShardOf(keys[i]), keys.data(), &i, 1, rows->data(), flags->data(), stats->data())
                .ok());
  }
}

struct PushBatch {
  std::vector<uint64_t> keys;  // distinct
  std::vector<float> grads, shows, clicks;
};

std::vector<PushBatch> RandomBatches(const std::vector<uint64_t>& keys, uint32_t dim, int batches, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> g(-1.0f, 1.0f);
  std::vector<PushBatch> out(batches);
  for (auto& b : out) {
    for (uint64_t k : keys) {
      if (rng() % 3 == 0) continue;
      b.keys.push_back(k);
      for (uint32_t j = 0; j < dim; ++j) b.grads.push_back(g(rng));
      b.shows.push_back(static_cast<float>(1 + rng() % 3));
      b.clicks.push_back(static_cast<float>(rng() % 2));
    }
  }
  return out;
}

// The pservers' path: each batch pushed to the table directly.
void PushDirect(server::SparseTable& table, const PushBatch& b) {
  server::PushCounters counters{b.shows.data(), b.clicks.data()};
  for (uint32_t i = 0; i < b.keys.size(); ++i) {
    REQUIRE(table.PushShard(table.ShardOf(b.keys[i]), b.keys.data(), &i, 1, b.grads.data(), counters).ok());
  }
}

TEST_CASE("Keys are routed to devices by hash; lookups return the built rows; unknown keys are NotFound") {
  const TableOptions t = CtrTable();
  PassTableOptions o;
  o.table = t;
  o.devices = 3;
  auto made = MakeHostPassTable(o);
  REQUIRE(made.ok());
  auto& table = **made;
  CHECK(table.core_floats() == 8);  // 4 weights + 4 adagrad accumulators
  std::vector<uint64_t> keys;
  std::vector<uint32_t> per_device(3, 0);
  for (uint64_t k = 100; k < 400; ++k) {
    keys.push_back(k);
    ++per_device[DeviceOfKey(k, 3)];
  }
  for (uint32_t d = 0; d < 3; ++d) CHECK(per_device[d] > 60);  // spread over every device
  std::vector<float> rows(keys.size() * 8);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  std::vector<uint8_t> flags(keys.size(), 2);
  REQUIRE(table.Build(keys, rows, flags, {}).ok());
  CHECK(table.size() == keys.size());
  std::vector<uint64_t> ask = {399, 100, 250};
  std::vector<float> out(12);
  REQUIRE(table.Pull(ask, out.data()).ok());
  CHECK(out == std::vector<float>{299 * 8, 299 * 8 + 1, 299 * 8 + 2, 299 * 8 + 3, 0, 1, 2, 3, 150 * 8, 150 * 8 + 1,
                                  150 * 8 + 2, 150 * 8 + 3});
  std::vector<uint64_t> missing = {100, 5};
  Status st = table.Pull(missing, out.data());
  CHECK(st.IsNotFound());
  CHECK(st.message().find("key 5 ") != std::string::npos);
  CHECK(st.message().find("device " + std::to_string(DeviceOfKey(5, 3))) != std::string::npos);
  std::vector<float> grads(8, 0.1f);
  CHECK(table.Push(missing, grads, {}, {}).IsNotFound());
  // Spans that disagree with the keys are refused, naming what they needed and got.
  std::vector<uint64_t> two = {100, 101};
  st = table.Push(two, std::vector<float>(7), {}, {});
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("2 keys need 8 gradient floats") != std::string::npos);
  CHECK(st.message().find("got 7, 0, 0") != std::string::npos);
  CHECK(table.Push(two, grads, std::vector<float>(1), {}).IsInvalidArgument());
  CHECK(table.Push(two, grads, {}, std::vector<float>(3)).IsInvalidArgument());
  st = table.Build(keys, std::vector<float>(7), flags, {});
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("got 7, 300, 0") != std::string::npos);
  CHECK(table.Build(keys, rows, flags, std::vector<float>(3)).IsInvalidArgument());
  std::vector<uint64_t> dup = {1, 1};
  st = table.Build(dup, std::vector<float>(16), std::vector<uint8_t>(2), {});
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("key 1 given twice") != std::string::npos);
  table.Clear();
  CHECK(table.size() == 0);
}

TEST_CASE("A push refused part-way (a key twice, a key not in the pass) applies exactly what was routed before it") {
  PassTableOptions o;
  o.table = RefusedPushTable();
  o.devices = 2;
  auto made = MakeHostPassTable(o);
  REQUIRE(made.ok());
  CheckRefusedPushes(**made);
}

TEST_CASE("A pass on the host table gives bitwise the rows of pushing to the pservers, and WriteRows stores them") {
  const TableOptions t = CtrTable();
  for (uint32_t devices : {1u, 2u, 3u}) {
    INFO("devices " << devices);
    auto reference = Table(t);  // pushes applied directly, as async PS does
    auto server = Table(t);     // pulled from at begin_pass, written back at end_pass
    std::vector<uint64_t> keys;
    for (uint64_t k = 1; k <= 60; ++k) keys.push_back(k * 7919);
    // Some history before the pass on both: rows exist, some extended, with statistics.
    for (const auto& b : RandomBatches(keys, 4, 2, 3)) {
      PushDirect(*reference, b);
      PushDirect(*server, b);
    }
    PassTableOptions o;
    o.table = t;
    o.devices = devices;
    auto made = MakeHostPassTable(o);
    REQUIRE(made.ok());
    auto& pass = **made;
    std::vector<float> rows, stats;
    std::vector<uint8_t> flags;
    PullRows(*server, keys, &rows, &flags, &stats);
    REQUIRE(pass.Build(keys, rows, flags, stats).ok());
    for (const auto& b : RandomBatches(keys, 4, 6, 11)) {
      PushDirect(*reference, b);
      REQUIRE(pass.Push(b.keys, b.grads, b.shows, b.clicks).ok());
    }
    // The pass table's rows are the reference's.
    std::vector<float> want_rows, want_stats, got(keys.size() * 4);
    std::vector<uint8_t> want_flags;
    PullRows(*reference, keys, &want_rows, &want_flags, &want_stats);
    REQUIRE(pass.Pull(keys, got.data()).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      for (uint32_t j = 0; j < 4; ++j) CHECK(got[i * 4 + j] == want_rows[i * 8 + j]);
    }
    PassRows out;
    REQUIRE(pass.Export(&out).ok());
    CHECK(out.keys.size() == keys.size());
    size_t extended_in_pass = 0;
    for (size_t i = 0; i < out.keys.size(); ++i) {
      extended_in_pass += out.extended[i] && !(flags[std::find(keys.begin(), keys.end(), out.keys[i]) - keys.begin()] &
                                               server::RowAccessor::kExtended);
    }
    CHECK(extended_in_pass > 0);  // the test covers rows extended during the pass
    // end_pass: written back, every row is exactly the reference's (statistics included).
    server::SparseTable::RowWrite w{out.begin.data(), out.end.data(), out.extended.data(), out.shows.data(),
                                    out.clicks.data()};
    server::SparseTable::RowWriteCounts counts;
    for (uint32_t i = 0; i < out.keys.size(); ++i) {
      REQUIRE(server->WriteRowsShard(server->ShardOf(out.keys[i]), out.keys.data(), &i, 1, w, &counts).ok());
    }
    CHECK(counts.written == keys.size());
    CHECK(counts.merged == 0);
    std::vector<float> final_rows, final_stats;
    std::vector<uint8_t> final_flags;
    PullRows(*server, keys, &final_rows, &final_flags, &final_stats);
    CHECK(final_rows == want_rows);
    CHECK(final_flags == want_flags);
    CHECK(final_stats == want_stats);
  }
}

TEST_CASE("Lookups and updates from six threads at once give what one thread gives, one shard and two") {
  for (uint32_t devices : {1u, 2u}) {
    PassTableOptions o;
    o.table = RuleTable(OptimizerKind::kAdam, /*ctr=*/true, 0.1f, /*bounds=*/true);
    o.devices = devices;
    auto table = MakeHostPassTable(o);
    auto reference = MakeHostPassTable(o);
    REQUIRE(table.ok());
    REQUIRE(reference.ok());
    CheckConcurrentTraffic(**table, **reference);
  }
}

TEST_CASE(
    "Export: exactly the touched rows, in slot order, each with its starting and final row and its shows; "
    "lookups give every row") {
  PassTableOptions o;
  o.table = RefusedPushTable();  // SGD at rate 1, dim 2: a gradient of g takes a weight w to w - g
  auto table = MakeHostPassTable(o);
  REQUIRE(table.ok());
  const uint32_t core = (*table)->core_floats();
  REQUIRE(core == 2);
  // Three of Build's chunks and a part (kBuildChunk rows each: filled on several threads).
  std::vector<uint64_t> keys(3 * kBuildChunk + 7);
  std::vector<float> rows(keys.size() * core);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = i * 7919 + 3;
    rows[i * core] = static_cast<float>(i % 1000);
    rows[i * core + 1] = 0.5f;
  }
  REQUIRE((*table)->Build(keys, rows, std::vector<uint8_t>(keys.size(), 0), {}).ok());
  // Every third key is pushed with gradient (1, 2) and show i % 5.
  std::vector<uint64_t> pushed;
  std::vector<float> grads, shows;
  for (size_t i = 0; i < keys.size(); i += 3) {
    pushed.push_back(keys[i]);
    grads.insert(grads.end(), {1.0f, 2.0f});
    shows.push_back(static_cast<float>(i % 5));
  }
  REQUIRE((*table)->Push(pushed, grads, shows, {}).ok());
  PassRows out;
  REQUIRE((*table)->Export(&out).ok());
  REQUIRE(out.keys == pushed);  // one device: slots in build order
  REQUIRE(out.begin.size() == pushed.size() * core);
  REQUIRE(out.end.size() == pushed.size() * core);
  REQUIRE(out.shows.size() == pushed.size());
  size_t wrong = 0;
  for (size_t k = 0; k < pushed.size(); ++k) {
    const size_t i = k * 3;
    wrong += out.begin[k * core] != static_cast<float>(i % 1000) || out.begin[k * core + 1] != 0.5f ||
             out.end[k * core] != static_cast<float>(i % 1000) - 1.0f || out.end[k * core + 1] != -1.5f ||
             out.shows[k] != static_cast<float>(i % 5);
  }
  CHECK(wrong == 0);
  std::vector<float> weights(keys.size() * 2);
  REQUIRE((*table)->Pull(keys, weights.data()).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    const float w = static_cast<float>(i % 1000) - (i % 3 == 0 ? 1.0f : 0.0f);
    wrong += weights[i * 2] != w || weights[i * 2 + 1] != (i % 3 == 0 ? -1.5f : 0.5f);
  }
  CHECK(wrong == 0);
}

TEST_CASE("ShardMutex: once an update waits for the lookups that hold it, new lookups wait behind the update") {
  ShardMutex mu;
  mu.lock_shared();  // a lookup in progress
  std::atomic<bool> updated{false};
  std::thread update([&] {
    std::unique_lock<ShardMutex> lock(mu);
    updated = true;
  });
  // A new lookup gets in until the update waits, then no more (a reader-first lock would let
  // every one in while lookups keep coming).
  bool lookups_held_off = false;
  for (int i = 0; i < 5000 && !lookups_held_off; ++i) {
    if (mu.try_lock_shared()) {
      mu.unlock_shared();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      lookups_held_off = true;
    }
  }
  CHECK(lookups_held_off);
  CHECK_FALSE(updated);
  mu.unlock_shared();  // the lookup ends: the update goes first
  update.join();
  CHECK(updated);
  REQUIRE(mu.try_lock_shared());
  mu.unlock_shared();
}

TEST_CASE("A pass that does not fit a device's budget is refused, naming keys and bytes") {
  PassTableOptions o;
  o.table = CtrTable();
  o.devices = 2;
  auto probe = MakeHostPassTable(o);
  REQUIRE(probe.ok());
  const uint64_t per_key = (*probe)->BytesPerKey();
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 1000; ++k) keys.push_back(k);
  uint64_t most = 0;
  for (uint32_t d = 0; d < 2; ++d) {
    most = std::max<uint64_t>(
        most, std::count_if(keys.begin(), keys.end(), [&](uint64_t k) { return DeviceOfKey(k, 2) == d; }));
  }
  o.device_memory_bytes = most * per_key - 1;  // one byte short on the fuller device
  auto made = MakeHostPassTable(o);
  REQUIRE(made.ok());
  std::vector<float> rows(keys.size() * 8);
  std::vector<uint8_t> flags(keys.size());
  Status st = (*made)->Build(keys, rows, flags, {});
  INFO(st.ToString());
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("1000 keys") != std::string::npos);
  CHECK(st.message().find(std::to_string(most * per_key) + " bytes") != std::string::npos);
  CHECK((*made)->size() == 0);
  CHECK((*made)->CheckFits(keys).IsInvalidArgument());
  o.device_memory_bytes = most * per_key;  // exactly enough
  made = MakeHostPassTable(o);
  REQUIRE(made.ok());
  CHECK((*made)->Build(keys, rows, flags, {}).ok());
}

}  // namespace
}  // namespace fleetps::heter
