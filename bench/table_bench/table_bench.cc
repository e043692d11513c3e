// table_bench: single-thread, in-process throughput of the sparse table and its memory
// row store. A table of --keys random uint64 keys (prefilled) with rows of --dim weights;
// each measured operation handles batches of --batch keys drawn uniformly from those keys.
// Prints keys/s per operation: the median over --rounds batches of the batch's keys divided
// by the thread's CPU time for it. CPU time, not wall time, so that other processes sharing
// the cores (builds, CI neighbours) do not show up as table slowness; shared caches and memory
// bandwidth still do.

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "server/storage/memory_row_store.h"
#include "server/table/sparse_table.h"

namespace fleetps::bench {
namespace {

using server::MemoryRowStore;
using server::SparseTable;

struct Flags {
  size_t keys = 1'000'000;
  uint32_t dim = 8;
  size_t batch = 100'000;
  int rounds = 30;
};

// The random request batches, fixed up front so the timed loops do no RNG work.
struct Workload {
  std::vector<uint64_t> table_keys;            // every key in the table
  std::vector<std::vector<uint64_t>> batches;  // requests: keys drawn from table_keys
  std::vector<uint32_t> idx;                   // 0..batch-1: the whole batch is one shard
  std::vector<float> grads;                    // batch * dim
};

Workload MakeWorkload(const Flags& flags) {
  Workload w;
  std::mt19937_64 rng(1);
  w.table_keys.resize(flags.keys);
  for (uint64_t& key : w.table_keys) key = rng();
  w.batches.resize(8);
  for (auto& batch : w.batches) {
    batch.resize(flags.batch);
    for (uint64_t& key : batch) key = w.table_keys[rng() % flags.keys];
  }
  w.idx.resize(flags.batch);
  std::iota(w.idx.begin(), w.idx.end(), 0u);
  std::uniform_real_distribution<float> grad(-0.01f, 0.01f);
  w.grads.resize(flags.batch * flags.dim);
  for (float& g : w.grads) g = grad(rng);
  return w;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs `op(batch)` over `rounds` batches (after two untimed ones) and prints the median
// rate. Returns it in keys/s.
double Measure(const char* name, const Flags& flags, const Workload& w,
               const std::function<void(const std::vector<uint64_t>&)>& op) {
  std::vector<double> seconds;
  for (int r = -2; r < flags.rounds; ++r) {
    const auto& batch = w.batches[static_cast<size_t>(r + 2) % w.batches.size()];
    const double start = ThreadCpuSeconds();
    op(batch);
    if (r >= 0) seconds.push_back(ThreadCpuSeconds() - start);
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  const double rate = static_cast<double>(flags.batch) / seconds[seconds.size() / 2];
  std::printf("%-44s %10.2f %10.1f\n", name, rate / 1e6, 1e9 / rate);
  return rate;
}

void Check(const Status& st) {
  if (!st.ok()) {
    std::fprintf(stderr, "table_bench: %s\n", st.ToString().c_str());
    std::exit(1);
  }
}

void BenchRowStore(const Flags& flags, const Workload& w) {
  MemoryRowStore store(flags.dim);
  bool inserted = false;
  for (uint64_t key : w.table_keys) store.FindOrInsert(key, &inserted)[0] = 1.0f;

  volatile float sink = 0;  // keeps the reads alive
  std::vector<float*> rows(flags.batch);
  Measure("row store: find, no prefetch", flags, w, [&](const std::vector<uint64_t>& keys) {
    for (size_t k = 0; k < keys.size(); ++k) rows[k] = store.Find(keys[k]);
  });
  Measure("row store: find, FindBatch (prefetch)", flags, w, [&](const std::vector<uint64_t>& keys) {
    Check(store.FindBatch(keys.data(), keys.size(), /*touch_floats=*/0, rows.data()));
  });
  Measure("row store: find + read row, no prefetch", flags, w, [&](const std::vector<uint64_t>& keys) {
    float sum = 0;
    for (uint64_t key : keys) sum += store.Find(key)[0];
    sink = sum;
  });
  Measure("row store: find + read row, FindBatch(256)", flags, w, [&](const std::vector<uint64_t>& keys) {
    float sum = 0;
    for (size_t begin = 0; begin < keys.size(); begin += 256) {
      const size_t m = std::min<size_t>(256, keys.size() - begin);
      Check(store.FindBatch(keys.data() + begin, m, /*touch_floats=*/1, rows.data()));
      for (size_t k = 0; k < m; ++k) sum += rows[k][0];
    }
    sink = sum;
  });
  std::printf("%-44s %10.1f MiB for %zu rows\n", "  (row store memory)", store.MemoryBytes() / 1048576.0, store.size());
}

std::unique_ptr<SparseTable> PrefilledTable(const Flags& flags, const Workload& w, OptimizerKind kind) {
  TableOptions options;
  options.name = "bench";
  options.dim = flags.dim;
  options.shards = 1;  // one shard: every request key is local, no routing in the timed loop
  options.optimizer.kind = kind;
  auto table = SparseTable::Create(options, 0, 1);
  Check(table.status());
  const std::vector<float> zeros(flags.batch * flags.dim, 0.0f);
  for (size_t begin = 0; begin < w.table_keys.size(); begin += flags.batch) {
    const size_t n = std::min(flags.batch, w.table_keys.size() - begin);
    Check((*table)->PushShard(0, w.table_keys.data() + begin, w.idx.data(), n, zeros.data()));
  }
  return std::move(table).value();
}

void BenchTable(const Flags& flags, const Workload& w) {
  std::vector<float> out(flags.batch * flags.dim);
  auto sgd = PrefilledTable(flags, w, OptimizerKind::kSgd);
  Measure("SparseTable::PullShard", flags, w, [&](const std::vector<uint64_t>& keys) {
    Check(sgd->PullShard(0, keys.data(), w.idx.data(), keys.size(), out.data()));
  });
  Measure("SparseTable::PushShard, SGD", flags, w, [&](const std::vector<uint64_t>& keys) {
    Check(sgd->PushShard(0, keys.data(), w.idx.data(), keys.size(), w.grads.data()));
  });
  const auto stats = sgd->Stats(0);
  std::printf("%-44s %10.1f MiB for %llu rows\n", "  (SGD table memory)", stats.memory_bytes / 1048576.0,
              static_cast<unsigned long long>(stats.rows));
  sgd.reset();

  auto adam = PrefilledTable(flags, w, OptimizerKind::kAdam);
  Measure("SparseTable::PullShard, Adam rows", flags, w, [&](const std::vector<uint64_t>& keys) {
    Check(adam->PullShard(0, keys.data(), w.idx.data(), keys.size(), out.data()));
  });
  Measure("SparseTable::PushShard, Adam", flags, w, [&](const std::vector<uint64_t>& keys) {
    Check(adam->PushShard(0, keys.data(), w.idx.data(), keys.size(), w.grads.data()));
  });
}

}  // namespace
}  // namespace fleetps::bench

int main(int argc, char** argv) {
  fleetps::bench::Flags flags;
  CLI::App app{"Single-thread sparse table and row store throughput"};
  app.add_option("--keys", flags.keys, "keys in the table")->check(CLI::PositiveNumber);
  app.add_option("--dim", flags.dim, "weights per row")->check(CLI::Range(1u, 4096u));
  app.add_option("--batch", flags.batch, "keys per request batch")->check(CLI::PositiveNumber);
  app.add_option("--rounds", flags.rounds, "timed batches per operation (median reported)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const auto workload = fleetps::bench::MakeWorkload(flags);
  std::printf("table_bench: %zu keys, dim %u, batches of %zu uniform random keys, 1 thread, CPU time\n", flags.keys,
              flags.dim, flags.batch);
  std::printf("%-44s %10s %10s\n", "operation", "Mkeys/s", "ns/key");
  fleetps::bench::BenchRowStore(flags, workload);
  fleetps::bench::BenchTable(flags, workload);
  return 0;
}
