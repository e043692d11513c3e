// PsClient against a real pserver (the App in-process on loopback) behind a TcpProxy that
// scripts the network's failures: a pserver that accepts connections but never answers
// (a stopped process), one frozen in the middle of a job, a connection dropped after a
// push reached the server (reported Unavailable, applied exactly once; re-sent and counted
// once when it is a numbered sync push) or after a pull (re-sent), and a barrier bounded by its own timeout plus a margin.
// Also: calls whose keys are declared distinct (PsClient::Keys::kDistinct).
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <future>
#include <thread>

#include "common/optimizer/optimizer.h"
#include "common/sharding.h"
#include "server/app/app.h"
#include "test/common/net/tcp_proxy.h"
#include "test/support/process.h"
#include "trainer/client/ps_client.h"

namespace fleetps::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Proxy = net::testing::TcpProxy;
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

// A pserver `index` of `endpoints` holding a dim-2 sparse table and a 3-float dense one,
// both SGD lr 1 from zeros (a row is minus the sum of the gradients it was pushed), or with
// `dense` those of the dense table.
std::unique_ptr<server::App> StartServer(const std::vector<net::Endpoint>& endpoints, uint32_t index,
                                         const TableOptions& dense = Table(kDense, TableKind::kDense, 3)) {
  config::ServerOptions o;
  o.endpoints = endpoints;
  o.index = index;
  o.bind_host = "127.0.0.1";
  o.io_threads = 1;
  o.shard_threads = 1;
  o.tables = {Table(kSparse, TableKind::kSparse, 2), dense};
  auto app = std::make_unique<server::App>(o);
  REQUIRE(app->Start().ok());
  return app;
}

PsClientOptions Fast(std::vector<net::Endpoint> servers) {
  PsClientOptions o;
  o.servers = std::move(servers);
  o.io_threads = 1;
  o.rpc.request_timeout = milliseconds(300);
  o.rpc.connect_timeout = milliseconds(2000);
  o.rpc.initial_backoff = milliseconds(10);
  o.rpc.max_backoff = milliseconds(50);
  return o;
}

milliseconds Since(Clock::time_point t) { return std::chrono::duration_cast<milliseconds>(Clock::now() - t); }

// One pserver reached through a proxy (the client's view, faults scripted), plus a direct
// client that sees the true state of the tables.
struct ProxiedServer {
  uint16_t port = testing::FreePorts(1)[0];
  std::unique_ptr<server::App> app;
  std::unique_ptr<Proxy> proxy;
  std::unique_ptr<PsClient> direct;
  net::Endpoint via;

  ProxiedServer() {
    // The server's own list names the proxy: that is where the trainers reach it.
    app = StartServer({{"127.0.0.1", port}}, 0);
    proxy = std::make_unique<Proxy>(port);
    via = {"127.0.0.1", proxy->port()};
    auto d = PsClient::Connect(Fast({{"127.0.0.1", port}}));
    REQUIRE(d.ok());
    direct = std::move(*d);
  }
  ~ProxiedServer() {
    direct.reset();
    proxy.reset();
    app->Shutdown();
  }
  std::unique_ptr<PsClient> Client(PsClientOptions o) {
    auto c = PsClient::Connect(std::move(o));
    REQUIRE(c.ok());
    return std::move(*c);
  }
  std::vector<float> Row(uint64_t key) {
    std::vector<float> row(2);
    const std::vector<uint64_t> keys = {key};
    REQUIRE(direct->PullSparse(kSparse, keys, row.data()).get().ok());
    return row;
  }
};

TEST_CASE("Keys::kDistinct skips the de-duplication with the same rows; repeated keys under it are refused") {
  ProxiedServer s;
  PsClient& c = *s.direct;
  // Repeated keys are summed (SGD lr 1 from zeros: a row is minus its gradients' sum).
  const std::vector<uint64_t> repeated = {7, 7, 9};
  REQUIRE(c.PushSparse(kSparse, repeated, std::vector<float>{1, 1, 2, 2, 3, 3}).get().ok());
  PsClient::SparsePushOptions distinct;
  distinct.keys_are = PsClient::Keys::kDistinct;
  const std::vector<uint64_t> fresh = {11, 12};
  REQUIRE(c.PushSparse(kSparse, fresh, std::vector<float>{4, 5, 6, 7}, distinct).get().ok());
  const std::vector<uint64_t> keys = {7, 9, 11, 12, 13};
  std::vector<float> checked(keys.size() * 2), trusted(keys.size() * 2);
  REQUIRE(c.PullSparse(kSparse, keys, checked.data()).get().ok());
  REQUIRE(c.PullSparse(kSparse, keys, trusted.data(), PsClient::Keys::kDistinct).get().ok());
  CHECK(checked == std::vector<float>{-3, -3, -3, -3, -4, -5, -6, -7, 0, 0});
  CHECK(trusted == checked);
#ifndef NDEBUG
  // Builds with assertions check the promise: nothing is sent.
  std::vector<float> row(repeated.size() * 2);
  Status pull = c.PullSparse(kSparse, repeated, row.data(), PsClient::Keys::kDistinct).get();
  CHECK(pull.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(pull.message(), Catch::Contains("PullSparse with Keys::kDistinct got key 7 more than once"));
  Status push = c.PushSparse(kSparse, repeated, std::vector<float>{1, 1, 2, 2, 3, 3}, distinct).get();
  CHECK(push.code() == StatusCode::kInvalidArgument);
  CHECK(s.Row(7) == std::vector<float>{-3, -3});
#else
  WARN("the check of Keys::kDistinct runs only in builds with assertions (this one defines NDEBUG)");
#endif
}

TEST_CASE("The dense optimizer state goes to two servers' slices with the parameters, and comes back") {
  TableOptions adam = Table(kDense, TableKind::kDense, 5);
  adam.optimizer.kind = OptimizerKind::kAdam;
  adam.optimizer.learning_rate = 0.1f;
  const auto ports = testing::FreePorts(2);
  const std::vector<net::Endpoint> eps = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
  auto server0 = StartServer(eps, 0, adam);
  auto server1 = StartServer(eps, 1, adam);
  auto client = PsClient::Connect(Fast(eps));
  REQUIRE(client.ok());
  PsClient& c = **client;
  // A replica's state after some steps: moments (m, v per weight) and beta powers.
  const std::vector<float> params = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f};
  PsClient::DenseState state{{0.01f, 0.2f, -0.02f, 0.3f, 0.03f, 0.4f, -0.04f, 0.5f, 0.05f, 0.6f}, {0.729f, 0.997f}};
  REQUIRE(c.PushDenseParam(kDense, params, &state).get().ok());
  std::vector<float> got(5);
  PsClient::DenseState back{std::vector<float>(10), std::vector<float>(2)};
  REQUIRE(c.PullDense(kDense, got, &back).get().ok());
  CHECK(got == params);
  CHECK(back.element == state.element);
  CHECK(back.shared == state.shared);
  // The servers step from that state: the same as the rule stepping a copy here.
  const std::vector<float> grads = {0.5f, -0.5f, 0.25f, 0.0f, 1.0f};
  REQUIRE(c.PushDense(kDense, grads).get().ok());
  auto rule = optimizer::CreateOptimizer(adam.optimizer);
  REQUIRE(rule.ok());
  std::vector<float> want = params, element = state.element, shared = state.shared;
  (*rule)->UpdateSpan(want.data(), element.data(), shared.data(), grads.data(), want.size());
  REQUIRE(c.PullDense(kDense, got, &back).get().ok());
  CHECK(got == want);
  CHECK(back.element == element);
  CHECK(back.shared == shared);
  // A rule of other sizes (SGD: none; Adagrad: one float per weight) is refused, saying so.
  PsClient::DenseState sgd;
  Status st = c.PullDense(kDense, got, &sgd).get();
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains("'dense'") && Catch::Contains("keeps 0 floats per parameter + 0") &&
                               Catch::Contains("the table's 2 + 2"));
  PsClient::DenseState adagrad{std::vector<float>(5, 1.0f), {}};
  st = c.PushDenseParam(kDense, params, &adagrad).get();
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains("keeps 2 per parameter + 2"));
  PsClient::DenseState ragged{std::vector<float>(7), {}};
  CHECK(c.PushDenseParam(kDense, params, &ragged).get().IsInvalidArgument());  // not a multiple of 5
  // Parameters without a state: the servers' state starts afresh.
  REQUIRE(c.PushDenseParam(kDense, params).get().ok());
  REQUIRE(c.PullDense(kDense, got, &back).get().ok());
  CHECK(back.shared == std::vector<float>{adam.optimizer.beta1, adam.optimizer.beta2});
  CHECK(std::all_of(back.element.begin(), back.element.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("InitDenseParam sets a job's initial dense parameters only where the servers hold none") {
  const auto ports = testing::FreePorts(2);
  const std::vector<net::Endpoint> eps = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
  auto server0 = StartServer(eps, 0);
  auto server1 = StartServer(eps, 1);
  auto client = PsClient::Connect(Fast(eps));
  REQUIRE(client.ok());
  PsClient& c = **client;
  auto dense = [&] {
    std::vector<float> v(3);
    REQUIRE(c.PullDense(kDense, v).get().ok());
    return v;
  };
  // Fresh servers: every float set.
  auto kept = c.InitDenseParam(kDense, std::vector<float>{1, 2, 3});
  REQUIRE(kept.ok());
  CHECK(*kept == 0);
  CHECK(dense() == std::vector<float>{1, 2, 3});
  // A second job's (or a restarted trainer 0's) initial push keeps them; training goes on.
  REQUIRE(c.PushDense(kDense, std::vector<float>{1, 1, 1}).get().ok());  // SGD lr 1
  kept = c.InitDenseParam(kDense, std::vector<float>{7, 7, 7});
  REQUIRE(kept.ok());
  CHECK(*kept == 3);
  CHECK(dense() == std::vector<float>{0, 1, 2});
  // PushDenseParam itself still overwrites.
  REQUIRE(c.PushDenseParam(kDense, std::vector<float>{4, 5, 6}).get().ok());
  CHECK(dense() == std::vector<float>{4, 5, 6});
  // One server restarted empty: only its slice is set, and the count says how much was kept.
  client->reset();
  server1->Shutdown();
  server1.reset();
  server1 = StartServer(eps, 1);
  auto again = PsClient::Connect(Fast(eps));
  REQUIRE(again.ok());
  const uint64_t slice0 = DenseSliceBegin(3, 2, 1);  // server 0's floats: [0, slice0)
  kept = (*again)->InitDenseParam(kDense, std::vector<float>{8, 8, 8});
  REQUIRE(kept.ok());
  CHECK(*kept == slice0);
  std::vector<float> now(3);
  REQUIRE((*again)->PullDense(kDense, now).get().ok());
  for (uint64_t i = 0; i < 3; ++i) CHECK(now[i] == (i < slice0 ? 4.0f + static_cast<float>(i) : 8.0f));
  again->reset();
  server0->Shutdown();
  server1->Shutdown();
}

TEST_CASE("A pserver that accepts connections but never answers fails Connect, naming it, within the deadline") {
  // pserver 1 is a listening socket nobody accepts from: the kernel completes the TCP
  // handshake, nothing ever answers, as with a SIGSTOPped process.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor stopped(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const uint16_t port0 = testing::FreePorts(1)[0];
  const std::vector<net::Endpoint> eps = {{"127.0.0.1", port0}, {"127.0.0.1", stopped.local_endpoint().port()}};
  auto app = StartServer(eps, 0);
  const auto start = Clock::now();
  auto client = PsClient::Connect(Fast(eps));
  REQUIRE_FALSE(client.ok());
  INFO(client.status().ToString());
  CHECK(client.status().IsTimedOut());
  CHECK_THAT(client.status().message(), Catch::Contains("Ping to pserver 1 (" + eps[1].ToString() + ")"));
  CHECK(Since(start) < milliseconds(1500));
  app->Shutdown();
}

TEST_CASE("A pserver frozen in the middle of a job: pulls and pushes fail within the deadline, naming it") {
  ProxiedServer s;
  auto client = s.Client(Fast({s.via}));
  std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> rows(6), grads(6, 1.0f), dense(3, 1.0f);
  REQUIRE(client->PullSparse(kSparse, keys, rows.data()).get().ok());
  s.proxy->Freeze(Proxy::Frozen::kBoth);
  const std::string who = "pserver 0 (" + s.via.ToString() + ")";
  auto start = Clock::now();
  Status pull = client->PullSparse(kSparse, keys, rows.data()).get();
  CHECK(pull.IsTimedOut());
  CHECK_THAT(pull.message(), Catch::Contains("PullSparse to " + who));
  CHECK(Since(start) < milliseconds(1000));
  start = Clock::now();
  Status push = client->PushDense(kDense, dense).get();
  CHECK(push.IsTimedOut());
  CHECK_THAT(push.message(), Catch::Contains("PushDense to " + who));
  CHECK_THAT(push.message(), Catch::Contains("may have been applied"));
  CHECK(Since(start) < milliseconds(1000));
  // Nothing waits forever and nothing is left pending.
  CHECK(client->Stats().status().IsTimedOut());
}

TEST_CASE("A push whose reply is lost with its connection: Unavailable, and applied exactly once") {
  ProxiedServer s;
  PsClientOptions o = Fast({s.via});
  o.rpc.request_timeout = milliseconds(3000);
  auto client = s.Client(o);
  std::vector<uint64_t> keys = {42};
  std::vector<float> grads = {1.0f, 2.0f};
  s.proxy->Freeze(Proxy::Frozen::kToClient);  // requests arrive, replies are held
  auto push = client->PushSparse(kSparse, keys, grads);
  // The server applied it (seen directly), but its reply is stuck in the proxy.
  const auto deadline = Clock::now() + milliseconds(2000);
  while (s.Row(42) != std::vector<float>{-1.0f, -2.0f} && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  REQUIRE(s.Row(42) == std::vector<float>{-1.0f, -2.0f});
  s.proxy->Cut();
  s.proxy->Freeze(Proxy::Frozen::kNone);
  Status st = push.get();
  INFO(st.ToString());
  CHECK(st.IsUnavailable());
  CHECK_THAT(st.message(), Catch::Contains("PushSparse to pserver 0 (" + s.via.ToString() + ")"));
  // The client works again through a new connection, and the push was not sent twice.
  std::vector<float> row(2);
  REQUIRE(client->PullSparse(kSparse, keys, row.data()).get().ok());
  CHECK(row == std::vector<float>{-1.0f, -2.0f});
  CHECK(client->counters().reconnects == 1);
  CHECK(client->counters().resent == 0);
}

TEST_CASE("A pull whose reply is lost with its connection is re-sent after reconnecting") {
  ProxiedServer s;
  PsClientOptions o = Fast({s.via});
  o.rpc.request_timeout = milliseconds(3000);
  auto client = s.Client(o);
  std::vector<uint64_t> keys = {5, 6, 7, 8};
  std::vector<float> grads(8, 0.5f);
  REQUIRE(s.direct->PushSparse(kSparse, keys, grads).get().ok());
  std::vector<float> rows(8, 9.0f);
  s.proxy->Freeze(Proxy::Frozen::kToClient);
  auto pull = client->PullSparse(kSparse, keys, rows.data());
  std::this_thread::sleep_for(milliseconds(50));
  s.proxy->Cut();
  s.proxy->Freeze(Proxy::Frozen::kNone);
  Status st = pull.get();
  INFO(st.ToString());
  REQUIRE(st.ok());
  CHECK(rows == std::vector<float>(8, -0.5f));
  CHECK(client->counters().resent >= 1);
}

TEST_CASE("A numbered sync-mode dense push whose reply is lost is re-sent, and counted once") {
  ProxiedServer s;
  PsClientOptions o = Fast({s.via});
  o.rpc.request_timeout = milliseconds(3000);
  auto client = s.Client(o);
  const auto options = [](int32_t trainer, uint64_t step) {
    PsClient::DensePushOptions d;
    d.sync_trainers = 2;
    d.trainer_id = trainer;
    d.sync_step = step;
    return d;
  };
  const auto dense = [&] {
    std::vector<float> d(3);
    REQUIRE(s.direct->PullDense(kDense, d).get().ok());
    return d;
  };
  const std::vector<float> g0 = {2.0f, 2.0f, 2.0f}, g1 = {4.0f, 4.0f, 4.0f};
  // Trainer 1's step-1 push is in; trainer 0's completes the step, but its reply is held.
  REQUIRE(s.direct->PushDense(kDense, g1, options(1, 1)).get().ok());
  s.proxy->Freeze(Proxy::Frozen::kToClient);
  auto push = client->PushDense(kDense, g0, options(0, 1));
  const auto deadline = Clock::now() + milliseconds(2000);
  while (dense() != std::vector<float>(3, -3.0f) && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  REQUIRE(dense() == std::vector<float>(3, -3.0f));  // applied: w -= mean(2, 4)
  s.proxy->Cut();
  s.proxy->Freeze(Proxy::Frozen::kNone);
  Status st = push.get();
  INFO(st.ToString());
  REQUIRE(st.ok());  // re-sent after reconnecting; the server knew the copy
  CHECK(client->counters().resent >= 1);
  CHECK(dense() == std::vector<float>(3, -3.0f));  // not applied twice
  // Step 2 needs both trainers again: the copy did not count for it.
  REQUIRE(client->PushDense(kDense, g0, options(0, 2)).get().ok());
  CHECK(dense() == std::vector<float>(3, -3.0f));
  REQUIRE(s.direct->PushDense(kDense, g1, options(1, 2)).get().ok());
  CHECK(dense() == std::vector<float>(3, -6.0f));
}

TEST_CASE("A barrier waits its own timeout plus the margin, not the request deadline") {
  ProxiedServer s;
  PsClientOptions o = Fast({s.via});
  o.rpc.request_timeout = milliseconds(100);
  o.rpc.keepalive_interval = milliseconds(0);  // the deadline alone bounds it here
  o.barrier_margin = milliseconds(300);
  auto a = s.Client(o);
  auto b = s.Client(o);
  // Longer than request_timeout: the second trainer arrives after 400 ms.
  auto late = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(milliseconds(400));
    return b->Barrier("meet", 1, 2, milliseconds(2000)).status();
  });
  auto r = a->Barrier("meet", 0, 2, milliseconds(2000));
  INFO(r.status().ToString());
  CHECK(r.ok());
  CHECK(late.get().ok());
  // A frozen server 0: the barrier's call ends at timeout + margin, naming the server.
  s.proxy->Freeze(Proxy::Frozen::kBoth);
  const auto start = Clock::now();
  auto frozen = a->Barrier("frozen", 0, 2, milliseconds(200));
  CHECK(frozen.status().IsTimedOut());
  CHECK_THAT(frozen.status().message(), Catch::Contains("Barrier to pserver 0 (" + s.via.ToString() + ")"));
  CHECK(Since(start) >= milliseconds(500));
  CHECK(Since(start) < milliseconds(1500));
}

// A stop request (SIGTERM to a trainer) ends a barrier wait within kStopPoll, whatever its
// timeout; without a request the same wait still meets the other trainer.
TEST_CASE("A stop request ends a barrier wait") {
  ProxiedServer s;
  auto a = s.Client(Fast({s.via}));
  auto b = s.Client(Fast({s.via}));
  StopRequest stop;
  auto stopper = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(milliseconds(300));
    stop.Request("stopped by SIGTERM", SIGTERM);
  });
  const auto start = Clock::now();
  auto r = a->Barrier("alone", 0, 2, milliseconds(60000), {}, false, &stop);
  stopper.get();
  CHECK(r.status().code() == StatusCode::kAborted);
  CHECK(r.status().message() == "stopped by SIGTERM while waiting at barrier 'alone'");
  CHECK(Since(start) >= milliseconds(300));
  CHECK(Since(start) < milliseconds(5000));

  StopRequest idle;
  auto late = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(milliseconds(300));
    return b->Barrier("met", 1, 2, milliseconds(10000)).status();
  });
  auto met = a->Barrier("met", 0, 2, milliseconds(10000), {}, false, &idle);
  INFO(met.status().ToString());
  CHECK(met.ok());
  CHECK(late.get().ok());
}

}  // namespace
}  // namespace fleetps::trainer
