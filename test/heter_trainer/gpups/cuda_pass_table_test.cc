// The CUDA pass table against its host twin (label gpu): the same pass built on both, the
// same batches pushed, then lookups and the exported rows must agree bitwise — the kernels
// round as the pservers' host code does. Sparse rules SGD, Adagrad (CTR accessor, rows
// extended during the pass) and Adam with weight decay and bounds; one and two shards (two
// shards on GPU 0 when only one is visible, so the key routing is exercised on any GPU
// machine); pushes refused part-way, and lookups and updates from several threads at once
// (pass_table_checks.h).
// Without a visible GPU every case reports "skipped".
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <random>

#include "heter_trainer/device/dense_device.h"
#include "heter_trainer/gpups/pass_table.h"
#include "test/heter_trainer/gpups/pass_table_checks.h"

namespace fleetps::heter {
namespace {

bool NoGpu() {
  if (VisibleCudaDevices() > 0) return false;
  WARN("skipped: no CUDA device visible");
  return true;
}

// Adam with weight decay and bounds; the other rules without.
TableOptions Table(OptimizerKind kind, bool ctr) {
  const bool adam = kind == OptimizerKind::kAdam;
  return RuleTable(kind, ctr, adam ? 0.1f : 0.0f, adam);
}

// `pass_keys` keys over `shards` shards: above 2 x 32768 (kExportChunk), each shard's rows
// leave the device in several chunks.
void Compare(const TableOptions& t, uint32_t shards, uint64_t pass_keys = 5000) {
  PassTableOptions o;
  o.table = t;
  o.devices = shards;
  o.device_ids.assign(shards, 0);
  for (uint32_t d = 0; d < shards && static_cast<int>(d) < VisibleCudaDevices(); ++d)
    o.device_ids[d] = static_cast<int>(d);
  auto host = MakeHostPassTable(o);
  auto cuda = MakeCudaPassTable(o);
  REQUIRE(host.ok());
  INFO(cuda.status().ToString());
  REQUIRE(cuda.ok());
  const uint32_t core = (*host)->core_floats(), dim = (*host)->dim();
  REQUIRE((*cuda)->core_floats() == core);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < pass_keys; ++k) keys.push_back(k * 2654435761ull + 1);
  std::vector<float> rows(keys.size() * core);
  for (auto& v : rows) v = std::abs(u(rng));  // optimizer state must stay valid (g2sum >= 0)
  std::vector<uint8_t> flags(keys.size());
  std::vector<float> stats(keys.size() * 2);
  for (size_t i = 0; i < keys.size(); ++i) {
    flags[i] = t.accessor.kind == AccessorKind::kCtr && i % 3 == 0 ? 2 : 0;  // some rows already extended
    stats[i * 2] = static_cast<float>(rng() % 6);
    stats[i * 2 + 1] = static_cast<float>(rng() % 2);
  }
  REQUIRE((*host)->Build(keys, rows, flags, stats).ok());
  REQUIRE((*cuda)->Build(keys, rows, flags, stats).ok());
  for (int step = 0; step < 20; ++step) {
    std::vector<uint64_t> batch;
    for (uint64_t k : keys) {
      if (rng() % 5 == 0) batch.push_back(k);
    }
    std::vector<float> grads(batch.size() * dim), shows(batch.size()), clicks(batch.size());
    for (auto& g : grads) g = u(rng);
    for (size_t i = 0; i < batch.size(); ++i) {
      shows[i] = static_cast<float>(1 + rng() % 2);
      clicks[i] = static_cast<float>(rng() % 2);
    }
    REQUIRE((*host)->Push(batch, grads, shows, clicks).ok());
    REQUIRE((*cuda)->Push(batch, grads, shows, clicks).ok());
    std::vector<float> a(batch.size() * dim), b(batch.size() * dim);
    REQUIRE((*host)->Pull(batch, a.data()).ok());
    REQUIRE((*cuda)->Pull(batch, b.data()).ok());
    REQUIRE(a == b);
  }
  PassRows ha, cu;
  REQUIRE((*host)->Export(&ha).ok());
  REQUIRE((*cuda)->Export(&cu).ok());
  // Export order is by shard, then by row; both tables number rows in build order.
  CheckSameRows(ha, cu);
  if (pass_keys <= 5000) CheckExportRanges(**cuda, cu);  // a call per row and per 7: kept small
  std::vector<uint64_t> missing = {7};
  std::vector<float> out(dim);
  CHECK((*cuda)->Pull(missing, out.data()).IsNotFound());
}

TEST_CASE("CUDA pass table = host twin: SGD, plain accessor", "[gpu]") {
  if (NoGpu()) return;
  Compare(Table(OptimizerKind::kSgd, false), 1);
}

TEST_CASE("CUDA pass table = host twin: Adagrad, CTR accessor with embedx extension, 2 shards", "[gpu]") {
  if (NoGpu()) return;
  Compare(Table(OptimizerKind::kAdagrad, true), 2);
}

TEST_CASE("CUDA pass table = host twin: Adam with weight decay and bounds, CTR accessor, 2 shards", "[gpu]") {
  if (NoGpu()) return;
  Compare(Table(OptimizerKind::kAdam, true), 2);
}

TEST_CASE("CUDA pass table = host twin: 70000 keys on 2 shards, exported in chunks", "[gpu]") {
  if (NoGpu()) return;
  Compare(Table(OptimizerKind::kAdagrad, true), 2, 70000);
}

TEST_CASE("CUDA pass table: a push refused part-way applies exactly what was routed before it", "[gpu]") {
  if (NoGpu()) return;
  PassTableOptions o;
  o.table = RefusedPushTable();
  o.devices = 2;
  o.device_ids = {0, VisibleCudaDevices() > 1 ? 1 : 0};
  auto cuda = MakeCudaPassTable(o);
  INFO(cuda.status().ToString());
  REQUIRE(cuda.ok());
  CheckRefusedPushes(**cuda);
}

TEST_CASE("CUDA pass table: lookups and updates from six threads at once = the host twin's one by one", "[gpu]") {
  if (NoGpu()) return;
  PassTableOptions o;
  o.table = Table(OptimizerKind::kAdam, true);
  o.devices = 2;
  o.device_ids = {0, VisibleCudaDevices() > 1 ? 1 : 0};
  auto cuda = MakeCudaPassTable(o);
  auto host = MakeHostPassTable(o);
  INFO(cuda.status().ToString());
  REQUIRE(cuda.ok());
  REQUIRE(host.ok());
  CheckConcurrentTraffic(**cuda, **host);
}

TEST_CASE("CUDA pass table: cuda_wait sets how threads wait for the device", "[gpu]") {
  if (NoGpu()) return;
  for (const auto& [wait, schedule] : {std::pair{config::CudaWait::kYield, cudaDeviceScheduleYield},
                                       std::pair{config::CudaWait::kBlock, cudaDeviceScheduleBlockingSync},
                                       std::pair{config::CudaWait::kSpin, cudaDeviceScheduleSpin}}) {
    PassTableOptions o;
    o.table = Table(OptimizerKind::kSgd, false);
    o.cuda_wait = wait;
    auto cuda = MakeCudaPassTable(o);
    INFO(cuda.status().ToString());
    REQUIRE(cuda.ok());
    unsigned flags = 0;
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudaGetDeviceFlags(&flags) == cudaSuccess);
    CHECK((flags & cudaDeviceScheduleMask) == static_cast<unsigned>(schedule));
  }
}

TEST_CASE("CUDA pass table: a pass above the device budget is refused before allocating", "[gpu]") {
  if (NoGpu()) return;
  PassTableOptions o;
  o.table = Table(OptimizerKind::kAdagrad, true);
  o.device_memory_bytes = 1 << 20;
  auto cuda = MakeCudaPassTable(o);
  REQUIRE(cuda.ok());
  std::vector<uint64_t> keys(100000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  Status st = (*cuda)->CheckFits(keys);
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("100000 keys") != std::string::npos);
}

}  // namespace
}  // namespace fleetps::heter
