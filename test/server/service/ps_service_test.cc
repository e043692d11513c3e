// The pserver App in-process on a loopback port, driven through PsClient: barrier
// all-reduce, sync-mode dense accumulation, create-on-pull, initial values, and the error
// replies for bad requests.
#include <catch2/catch.hpp>
#include <thread>

#include "server/app/app.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using trainer::PsClient;

config::ServerOptions Options(bool create_on_pull) {
  config::ServerOptions o;
  o.endpoints = {{"127.0.0.1", 0}};
  o.bind_host = "127.0.0.1";
  o.io_threads = 1;
  o.shard_threads = 2;
  TableOptions sparse;
  sparse.id = 3;
  sparse.name = "emb";
  sparse.dim = 2;
  sparse.shards = 4;
  sparse.create_on_pull = create_on_pull;
  sparse.optimizer.kind = OptimizerKind::kSgd;
  sparse.optimizer.learning_rate = 0.5f;
  sparse.initializer.kind = InitializerKind::kConstant;
  sparse.initializer.value = 1.0f;
  TableOptions dense;
  dense.id = 4;
  dense.name = "dense";
  dense.kind = TableKind::kDense;
  dense.dim = 5;
  dense.optimizer.kind = OptimizerKind::kSgd;
  dense.optimizer.learning_rate = 1.0f;
  dense.initializer.kind = InitializerKind::kZeros;
  o.tables = {sparse, dense};
  return o;
}

struct Server {
  server::App app;
  std::unique_ptr<PsClient> client;
  explicit Server(bool create_on_pull = false) : app(Options(create_on_pull)) {
    REQUIRE(app.Start().ok());
    trainer::PsClientOptions co;
    co.servers = {{"127.0.0.1", app.port()}};
    co.io_threads = 1;
    auto c = PsClient::Connect(co);
    REQUIRE(c.ok());
    client = std::move(*c);
  }
  ~Server() {
    client.reset();
    app.Shutdown();
  }
};

TEST_CASE("Ping reports the tables; sparse pushes apply SGD to the initial value") {
  Server s;
  auto info = s.client->Table(3);
  REQUIRE(info.ok());
  CHECK(info->name == "emb");
  CHECK(info->dim == 2);
  CHECK(s.client->Table(4)->slice_begin == std::vector<uint64_t>{0, 5});
  std::vector<uint64_t> keys = {7, 7, 9};  // duplicate keys are summed by the client
  std::vector<float> grads = {1, 2, 3, 4, 10, 20};
  REQUIRE(s.client->PushSparse(3, keys, grads).get().ok());
  std::vector<float> rows(6);
  REQUIRE(s.client->PullSparse(3, keys, rows.data()).get().ok());
  // key 7: 1 - 0.5 * (1 + 3) = -1, 1 - 0.5 * (2 + 4) = -2; key 9: 1 - 5, 1 - 10.
  CHECK(rows == std::vector<float>{-1, -2, -1, -2, -4, -9});
}

TEST_CASE("Pulls of unknown keys return the initial value, stored only with create_on_pull") {
  for (bool create : {false, true}) {
    Server s(create);
    std::vector<uint64_t> keys = {1, 2, 3};
    std::vector<float> rows(6, -5.0f);
    REQUIRE(s.client->PullSparse(3, keys, rows.data()).get().ok());
    CHECK(rows == std::vector<float>(6, 1.0f));
    auto stats = s.client->Stats();
    REQUIRE(stats.ok());
    CHECK((*stats)[0].rows == (create ? 3u : 0u));
  }
}

TEST_CASE("Barriers all-reduce values and AND the done flags") {
  Server s;
  constexpr int kTrainers = 3;
  std::vector<StatusOr<PsClient::BarrierResult>> results(kTrainers, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> values = {1.0 * t, 10.0};
      results[t] = s.client->Barrier("b", t, kTrainers, std::chrono::seconds(10), values, /*done=*/t != 1);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kTrainers; ++t) {
    REQUIRE(results[t].ok());
    CHECK(results[t]->sum == std::vector<double>{3.0, 30.0});
    CHECK_FALSE(results[t]->all_done);  // trainer 1 was not done
    CHECK(results[t]->generation == 1);
  }
}

TEST_CASE("Metric reports sum every trainer's latest values without waiting") {
  Server s;
  std::vector<double> a = {1, 2}, b = {10, 20}, a2 = {3, 4}, bad = {1};
  auto r = s.client->ReportMetric("auc", 0, a);
  REQUIRE(r.ok());
  CHECK(r->sum == a);
  CHECK(r->reporters == 1);
  r = s.client->ReportMetric("auc", 1, b);
  REQUIRE(r.ok());
  CHECK(r->sum == std::vector<double>{11, 22});
  r = s.client->ReportMetric("auc", 0, a2);  // replaces trainer 0's earlier report
  REQUIRE(r.ok());
  CHECK(r->sum == std::vector<double>{13, 24});
  CHECK(r->reporters == 2);
  CHECK(s.client->ReportMetric("auc", 2, bad).status().IsInvalidArgument());
  CHECK(s.client->ReportMetric("other", 0, bad)->sum == bad);  // names are independent
}

TEST_CASE("A connection's metric reports are dropped when it closes") {
  // A peer that sends large reports and leaves must not leave them held by the server.
  Server s;
  std::vector<double> big(100000, 1.0), small = {5};
  {
    trainer::PsClientOptions co;
    co.servers = {{"127.0.0.1", s.app.port()}};
    co.io_threads = 1;
    auto leaving = PsClient::Connect(co);
    REQUIRE(leaving.ok());
    REQUIRE((*leaving)->ReportMetric("big", 7, big).ok());
    REQUIRE((*leaving)->ReportMetric("auc", 7, small).ok());
  }  // its connection closes
  std::vector<double> mine = {1};
  StatusOr<PsClient::MetricSum> r = Status::Internal("not run");
  for (int i = 0; i < 500; ++i) {  // the close reaches the server asynchronously
    r = s.client->ReportMetric("auc", 0, mine);
    REQUIRE(r.ok());
    if (r->reporters == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(r->reporters == 1);  // trainer 7's report left with its connection
  CHECK(r->sum == mine);
  // "big" is gone entirely: a new report of another length is not refused for differing.
  auto again = s.client->ReportMetric("big", 0, small);
  REQUIRE(again.ok());
  CHECK(again->sum == small);
}

TEST_CASE("Barrier errors: timeout, duplicate trainer, bad id") {
  Server s;
  auto r = s.client->Barrier("lonely", 0, 2, std::chrono::milliseconds(100));
  CHECK(r.status().IsTimedOut());
  CHECK(r.status().message().find("lonely") != std::string::npos);
  CHECK(s.client->Barrier("x", 5, 2, std::chrono::milliseconds(100)).status().IsInvalidArgument());
  std::thread first([&] { (void)s.client->Barrier("dup", 0, 2, std::chrono::milliseconds(500)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto dup = s.client->Barrier("dup", 0, 2, std::chrono::milliseconds(500));
  first.join();
  CHECK(dup.status().message().find("already waiting") != std::string::npos);
}

TEST_CASE("Sync dense pushes are averaged into one optimizer step") {
  Server s;
  PsClient::DensePushOptions sync;
  sync.sync_trainers = 2;
  std::vector<float> g1 = {1, 2, 3, 4, 5}, g2 = {3, 2, 1, 0, -1};
  sync.trainer_id = 0;
  REQUIRE(s.client->PushDense(4, g1, sync).get().ok());
  std::vector<float> values(5, 99.0f);
  REQUIRE(s.client->PullDense(4, values).get().ok());
  CHECK(values == std::vector<float>(5, 0.0f));  // not applied until both pushed
  sync.trainer_id = 1;
  REQUIRE(s.client->PushDense(4, g2, sync).get().ok());
  REQUIRE(s.client->PullDense(4, values).get().ok());
  CHECK(values == std::vector<float>{-2, -2, -2, -2, -2});  // 0 - 1.0 * mean
}

TEST_CASE("Bad requests get errors naming the table and the problem") {
  Server s;
  std::vector<uint64_t> keys = {1};
  std::vector<float> rows(2);
  Status st = s.client->PullSparse(42, keys, rows.data()).get();
  CHECK(st.IsNotFound());
  std::vector<float> wrong(3);
  st = s.client->PushSparse(3, keys, wrong).get();
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("emb") != std::string::npos);
  std::vector<float> dense(4);
  CHECK(s.client->PullDense(4, dense).get().IsInvalidArgument());
  CHECK(s.client->PullDense(3, dense).get().IsInvalidArgument());
}

}  // namespace
}  // namespace fleetps
