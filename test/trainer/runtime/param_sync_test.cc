// ParamSync against a real pserver (the App in-process on a loopback port): GEO's delta
// exchange checked against hand-computed values, and no update lost when Hogwild workers
// keep training while an exchange (GEO) or a background send (async) is under way.
#include <catch2/catch.hpp>
#include <algorithm>
#include <thread>

#include "test/common/net/tcp_proxy.h"
#include "test/support/process.h"
#include "test/trainer/runtime/local_pserver.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::trainer {
namespace {

constexpr uint32_t kSparse = 0, kDense = 1;

TableOptions Table(uint32_t id, TableKind kind, uint64_t dim) {
  TableOptions t;
  t.id = id;
  t.name = kind == TableKind::kSparse ? "emb" : "dense";
  t.kind = kind;
  t.dim = dim;
  t.shards = 2;
  t.optimizer.kind = OptimizerKind::kSgd;
  t.optimizer.learning_rate = 1.0f;
  t.initializer.kind = InitializerKind::kZeros;
  return t;
}

// One pserver holding a dim-2 sparse table and a 3-float dense table, both SGD lr 1 from 0.
struct Cluster : testing::LocalPserver {
  Cluster() : LocalPserver({Table(kSparse, TableKind::kSparse, 2), Table(kDense, TableKind::kDense, 3)}) {}

  config::TrainerOptions Options(config::SyncMode mode, uint32_t trainer_id, uint32_t trainers) const {
    config::TrainerOptions o;
    o.sync_mode = mode;
    o.trainer_id = trainer_id;
    o.trainers_num = trainers;
    o.pservers = {endpoint};
    o.sparse_table = Table(kSparse, TableKind::kSparse, 2);  // GEO's local optimizer: SGD lr 1
    o.dense_table = Table(kDense, TableKind::kDense, 3);
    return o;
  }

  std::vector<float> Row(uint64_t key) {
    std::vector<float> row(2);
    const std::vector<uint64_t> keys = {key};
    REQUIRE(client->PullSparse(kSparse, keys, row.data()).get().ok());
    return row;
  }
  std::vector<float> Dense() {
    std::vector<float> dense(3);
    REQUIRE(client->PullDense(kDense, dense).get().ok());
    return dense;
  }
};

std::vector<float> Pull(ParamSync& sync, uint64_t key) {
  std::vector<float> row(2);
  const std::vector<uint64_t> keys = {key};
  REQUIRE(sync.PullSparse(0, keys, row.data()).ok());
  return row;
}

Status Push(ParamSync& sync, uint64_t key, std::vector<float> grad, std::vector<float> dense) {
  const std::vector<uint64_t> keys = {key};
  return sync.Push(0, StepGrads{keys, grad, {}, {}, dense});
}

}  // namespace

TEST_CASE("GEO pushes (local - base) / trainers every geo_step steps and refreshes what it touched") {
  Cluster c;
  auto o0 = c.Options(config::SyncMode::kGeo, 0, 2), o1 = c.Options(config::SyncMode::kGeo, 1, 2);
  o0.geo_step = o1.geo_step = 2;
  auto t0 = MakeParamSync(o0, *c.client, 1), t1 = MakeParamSync(o1, *c.client, 1);
  REQUIRE(t0.ok());
  REQUIRE(t1.ok());
  ParamSync& a = **t0;
  ParamSync& b = **t1;
  std::vector<float> dense;

  CHECK(Pull(a, 5) == std::vector<float>{0, 0});
  REQUIRE(a.DenseParams(0, &dense).ok());
  REQUIRE(Push(a, 5, {1, 2}, {1, 1, 1}).ok());      // a: key 5 = (-1, -2), dense (-1, -1, -1)
  CHECK(Pull(a, 5) == std::vector<float>{-1, -2});  // trained locally, nothing sent yet
  CHECK(c.Row(5) == std::vector<float>{0, 0});

  CHECK(Pull(b, 5) == std::vector<float>{0, 0});
  REQUIRE(b.DenseParams(0, &dense).ok());
  REQUIRE(Push(b, 5, {4, 0}, {2, 0, 0}).ok());  // b: key 5 = (-4, 0), dense (-2, 0, 0)

  REQUIRE(Push(a, 5, {1, 0}, {0, 0, 0}).ok());  // a's 2nd step: key 5 = (-2, -2) -> exchange
  // Server: key 5 += (-2, -2) / 2; dense += (-1, -1, -1) / 2.
  CHECK(c.Row(5) == std::vector<float>{-1, -1});
  CHECK(c.Dense() == std::vector<float>{-0.5f, -0.5f, -0.5f});
  CHECK(Pull(a, 5) == std::vector<float>{-1, -1});  // refreshed from the server

  REQUIRE(b.Flush().ok());  // key 5 += (-4, 0) / 2; dense += (-2, 0, 0) / 2
  CHECK(c.Row(5) == std::vector<float>{-3, -1});
  CHECK(c.Dense() == std::vector<float>{-1.5f, -0.5f, -0.5f});
  CHECK(Pull(b, 5) == std::vector<float>{-3, -1});

  REQUIRE(a.Flush().ok());  // nothing new on a: the server keeps its values
  CHECK(c.Row(5) == std::vector<float>{-3, -1});
  REQUIRE(a.DenseParams(0, &dense).ok());
  CHECK(dense == std::vector<float>{-1.5f, -0.5f, -0.5f});
}

TEST_CASE("No update is lost while workers train through exchanges and background sends") {
  constexpr uint32_t kWorkers = 4;
  constexpr int kSteps = 600;
  for (const auto mode : {config::SyncMode::kGeo, config::SyncMode::kAsync}) {
    INFO("mode " << config::SyncModeName(mode));
    Cluster c;
    auto o = c.Options(mode, 0, 1);
    o.geo_step = 3;
    auto made = MakeParamSync(o, *c.client, kWorkers);
    REQUIRE(made.ok());
    ParamSync& sync = **made;
    std::vector<Status> errors(kWorkers);
    std::vector<std::thread> workers;
    for (uint32_t w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&, w] {
        std::vector<float> row(2), dense;
        const std::vector<uint64_t> keys = {7};
        const std::vector<float> grad = {1, 2}, dense_grad = {1, 0, 0};
        for (int step = 0; step < kSteps && errors[w].ok(); ++step) {
          errors[w] = sync.PullSparse(w, keys, row.data());
          if (errors[w].ok()) errors[w] = sync.DenseParams(w, &dense);
          if (errors[w].ok()) errors[w] = sync.Push(w, StepGrads{keys, grad, {}, {}, dense_grad});
        }
      });
    }
    for (auto& t : workers) t.join();
    for (const auto& e : errors) REQUIRE(e.ok());
    REQUIRE(sync.Flush().ok());
    // Every step's sparse gradient arrives: GEO trains it locally with SGD lr 1 and ships
    // the deltas; async sums it into merged pushes that the server applies with SGD lr 1.
    // Integers stay exact in float.
    const float total = static_cast<float>(kWorkers * kSteps);
    CHECK(c.Row(7) == std::vector<float>{-total, -2 * total});
    if (mode == config::SyncMode::kGeo) CHECK(c.Dense() == std::vector<float>{-total, 0, 0});
  }
}

}  // namespace fleetps::trainer

namespace fleetps::trainer {
namespace {

TEST_CASE("The async communicator's queue gauges count the steps and keys not yet sent, 0 once flushed") {
  Cluster c;
  net::testing::TcpProxy proxy(c.endpoint.port);
  PsClientOptions co;
  co.servers = {{"127.0.0.1", proxy.port()}};
  auto client = PsClient::Connect(co);
  REQUIRE(client.ok());
  auto o = c.Options(config::SyncMode::kAsync, 0, 1);
  o.max_merge_steps = 8;  // three pushes never wait on back-pressure
  metrics::Registry registry;
  PushQueueGauges gauges{registry.GetGauge("steps", "steps"), registry.GetGauge("keys", "keys")};
  auto made = MakeParamSync(o, **client, 1, gauges);
  REQUIRE(made.ok());
  ParamSync& sync = **made;
  CHECK(gauges.steps.value() == 0);
  CHECK(gauges.keys.value() == 0);

  // Replies are held: the first window's send cannot complete, later steps merge behind it.
  proxy.Freeze(net::testing::TcpProxy::Frozen::kToClient);
  const std::vector<float> dense = {0, 0, 0};
  const std::vector<std::vector<uint64_t>> steps = {{1, 2}, {3}, {4, 5, 6}};  // disjoint keys
  for (const auto& keys : steps) {
    const std::vector<float> grads(keys.size() * 2, 1.0f);
    REQUIRE(sync.Push(0, StepGrads{keys, grads, {}, {}, dense}).ok());
  }
  CHECK(gauges.steps.value() == 3);
  CHECK(gauges.keys.value() == 6);  // in whichever windows they are, each key once

  proxy.Freeze(net::testing::TcpProxy::Frozen::kNone);
  REQUIRE(sync.Flush().ok());
  CHECK(gauges.steps.value() == 0);
  CHECK(gauges.keys.value() == 0);
  CHECK(c.Row(6) == std::vector<float>{-1, -1});
}

TEST_CASE(
    "The async communicator sends every step as a push of its own by default, also steps that wait behind "
    "a slow send") {
  // Adagrad: two steps on a key leave another row than one step on their sum.
  TableOptions sparse = Table(kSparse, TableKind::kSparse, 2);
  sparse.optimizer.kind = OptimizerKind::kAdagrad;
  sparse.optimizer.learning_rate = 0.5f;
  const std::vector<TableOptions> tables = {sparse, Table(kDense, TableKind::kDense, 3)};
  testing::LocalPserver server(tables), per_step(tables), summed(tables);
  net::testing::TcpProxy proxy(server.endpoint.port);
  PsClientOptions co;
  co.servers = {{"127.0.0.1", proxy.port()}};
  auto client = PsClient::Connect(co);
  REQUIRE(client.ok());
  config::TrainerOptions o;
  o.sync_mode = config::SyncMode::kAsync;
  o.pservers = {server.endpoint};
  o.sparse_table = sparse;
  o.dense_table = Table(kDense, TableKind::kDense, 3);
  REQUIRE(o.max_merge_steps == 1);  // the default
  auto made = MakeParamSync(o, **client, 1);
  REQUIRE(made.ok());
  ParamSync& sync = **made;

  // Replies are held: the first step's send cannot complete, the next two wait behind it
  // (as many as back-pressure lets wait).
  proxy.Freeze(net::testing::TcpProxy::Frozen::kToClient);
  const std::vector<uint64_t> keys = {7, 8};
  const std::vector<std::vector<float>> steps = {{1, 2, -1, 0.5f}, {0.25f, -3, 2, 2}, {4, 1, -0.5f, 1}};
  const std::vector<float> dense = {1, 0, 0};
  for (const auto& grads : steps) REQUIRE(sync.Push(0, StepGrads{keys, grads, {}, {}, dense}).ok());
  proxy.Freeze(net::testing::TcpProxy::Frozen::kNone);
  REQUIRE(sync.Flush().ok());

  std::vector<float> sum(4, 0.0f);
  for (const auto& grads : steps) {
    REQUIRE(per_step.client->PushSparse(kSparse, keys, grads).get().ok());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += grads[i];
  }
  REQUIRE(summed.client->PushSparse(kSparse, keys, sum).get().ok());
  std::vector<float> got(4), want(4), merged(4);
  REQUIRE(server.client->PullSparse(kSparse, keys, got.data()).get().ok());
  REQUIRE(per_step.client->PullSparse(kSparse, keys, want.data()).get().ok());
  REQUIRE(summed.client->PullSparse(kSparse, keys, merged.data()).get().ok());
  CHECK(got == want);  // three Adagrad steps per key, bitwise
  CHECK(want != merged);
  std::vector<float> dense_now(3);
  REQUIRE(server.client->PullDense(kDense, dense_now).get().ok());
  CHECK(dense_now == std::vector<float>{-3, 0, 0});  // three SGD steps, not one of the mean
}

// What a weight moves by (SGD lr 1, from 0) when steps of gradient g[0], g[1], ... are sent in
// consecutive windows of at most `n` steps, each applying its mean: one value per split.
void WindowTotals(const std::vector<float>& g, size_t from, size_t n, float moved, std::vector<float>* out) {
  if (from == g.size()) {
    out->push_back(moved);
    return;
  }
  float sum = 0;
  for (size_t k = from; k < std::min(g.size(), from + n); ++k) {
    sum += g[k];
    WindowTotals(g, k + 1, n, moved - sum * (1.0f / static_cast<float>(k + 1 - from)), out);
  }
}

TEST_CASE(
    "With max_merge_steps 2 the async communicator merges at most two steps into a send, also while a slow "
    "send holds the ones behind it") {
  Cluster c;
  net::testing::TcpProxy proxy(c.endpoint.port);
  PsClientOptions co;
  co.servers = {{"127.0.0.1", proxy.port()}};
  auto client = PsClient::Connect(co);
  REQUIRE(client.ok());
  auto o = c.Options(config::SyncMode::kHeter, 0, 1);
  o.max_merge_steps = 2;
  auto dense_only = MakeAsyncSync(o, **client, AsyncParts::kDenseOnly);
  // Replies held: the first window's send cannot complete, the other steps wait behind it
  // (back-pressure lets two windows of two wait: none of the five waits for a reply).
  proxy.Freeze(net::testing::TcpProxy::Frozen::kToClient);
  const std::vector<float> grads = {1, 2, 3, 4, 5};
  for (float g : grads) REQUIRE(dense_only->Push(0, StepGrads{{}, {}, {}, {}, std::vector<float>{g, 0, 0}}).ok());
  proxy.Freeze(net::testing::TcpProxy::Frozen::kNone);
  REQUIRE(dense_only->Flush().ok());
  std::vector<float> allowed;
  WindowTotals(grads, 0, 2, 0.0f, &allowed);
  REQUIRE(allowed.size() == 8);  // the splits of five steps into runs of one or two
  const float moved = c.Dense()[0];
  INFO("dense[0] " << moved);
  CHECK(std::find(allowed.begin(), allowed.end(), moved) != allowed.end());
  CHECK(moved != -15.0f);  // not every step alone: merging was asked for and took place
}

TEST_CASE("Heter mode splits the async communicator: cpu-trainers send sparse only, heter-trainers dense only") {
  Cluster c;
  auto cpu_side = c.Options(config::SyncMode::kHeter, 0, 1);
  cpu_side.heter_trainers = {{"127.0.0.1", 1}};
  auto made = MakeParamSync(cpu_side, *c.client, 1);
  REQUIRE(made.ok());
  ParamSync& sparse_only = **made;
  REQUIRE(sparse_only.Push(0, StepGrads{std::vector<uint64_t>{7}, std::vector<float>{1, 2}, {}, {}, {}}).ok());
  REQUIRE(sparse_only.Flush().ok());
  CHECK(c.Row(7) == std::vector<float>{-1, -2});
  CHECK(c.Dense() == std::vector<float>{0, 0, 0});

  auto heter_side = c.Options(config::SyncMode::kHeter, 0, 1);
  auto dense_only = MakeAsyncSync(heter_side, *c.client, AsyncParts::kDenseOnly);
  auto before = dense_only->DenseSnapshot(0);
  REQUIRE(before.ok());
  auto again = dense_only->DenseSnapshot(0);
  CHECK(again->get() == before->get());  // the same snapshot until a refresh
  // max_merge_steps 1 (the default): each step its own push (SGD lr 1).
  REQUIRE(dense_only->Push(0, StepGrads{{}, {}, {}, {}, std::vector<float>{2, 0, 4}}).ok());
  REQUIRE(dense_only->Push(1, StepGrads{{}, {}, {}, {}, std::vector<float>{0, 2, 0}}).ok());
  CHECK(dense_only->Push(0, StepGrads{{}, {}, {}, {}, std::vector<float>{1}}).IsInvalidArgument());
  REQUIRE(dense_only->Flush().ok());
  const auto dense = c.Dense();
  CHECK(dense == std::vector<float>{-2, -2, -4});
  auto after = dense_only->DenseSnapshot(0);
  REQUIRE(after.ok());
  CHECK(after->get() != before->get());  // Flush refreshed it
  CHECK(**after == dense);
  CHECK(c.Row(7) == std::vector<float>{-1, -2});  // the dense side sent no sparse rows
  // Nothing new since the last flush: returns at once, without a pull.
  REQUIRE(dense_only->Flush().ok());
  CHECK(dense_only->DenseSnapshot(0)->get() == after->get());
}

}  // namespace
}  // namespace fleetps::trainer
