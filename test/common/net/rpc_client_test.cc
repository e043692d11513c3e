// RpcClient's deadlines, reconnects and retries against a real RpcServer on loopback whose
// handler follows a script, with a TcpProxy in between where the network must fail: a
// server that never answers, one answering Busy, connections dropped before the reply
// (pulls re-sent, pushes not), a server that is down and comes back, a frozen server
// seen by the liveness probe.
#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "common/net/frame.h"
#include "common/net/rpc_client.h"
#include "common/net/rpc_server.h"
#include "schemas/ps_generated.h"
#include "test/common/net/tcp_proxy.h"

namespace fleetps::net {
namespace {

using wire::MessageType;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::TcpProxy;

constexpr auto kPing = static_cast<uint16_t>(MessageType::Ping);
constexpr auto kPull = static_cast<uint16_t>(MessageType::PullSparse);
constexpr auto kPush = static_cast<uint16_t>(MessageType::PushSparse);
constexpr auto kBarrier = static_cast<uint16_t>(MessageType::Barrier);

flatbuffers::DetachedBuffer PingRequest() {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreatePingRequest(fbb));
  return fbb.Release();
}
flatbuffers::DetachedBuffer PullRequest(size_t keys = 4) {
  flatbuffers::FlatBufferBuilder fbb(64);
  std::vector<uint64_t> k(keys, 7);
  fbb.Finish(wire::CreatePullSparseRequest(fbb, 0, fbb.CreateVector(k)));
  return fbb.Release();
}
flatbuffers::DetachedBuffer PushRequest() {
  flatbuffers::FlatBufferBuilder fbb(64);
  std::vector<uint64_t> k = {7};
  std::vector<float> g = {1.0f};
  fbb.Finish(wire::CreatePushSparseRequest(fbb, 0, fbb.CreateVector(k), fbb.CreateVector(g)));
  return fbb.Release();
}
flatbuffers::DetachedBuffer BarrierRequest() {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateBarrierRequest(fbb, fbb.CreateString("b"), 0, 2, 30000));
  return fbb.Release();
}

// The reply a well-behaved server would send to `req`.
void Answer(const Request& req, const Responder& r) {
  flatbuffers::FlatBufferBuilder fbb(64);
  switch (static_cast<MessageType>(req.type)) {
    case MessageType::Ping: fbb.Finish(wire::CreatePingReply(fbb, 0, 1)); break;
    case MessageType::PullSparse: {
      std::vector<float> values(4, 0.5f);
      fbb.Finish(wire::CreatePullSparseReply(fbb, 0, 1, fbb.CreateVector(values)));
      break;
    }
    case MessageType::PushSparse: fbb.Finish(wire::CreatePushSparseReply(fbb, 0, 1)); break;
    case MessageType::Barrier: fbb.Finish(wire::CreateBarrierReply(fbb, 1)); break;
    default: return r.SendError(Status::InvalidArgument("unexpected request"));
  }
  r.Send(ReplyType(static_cast<MessageType>(req.type)), fbb.Release());
}

// A real RpcServer on loopback running the test's script. Parked responders are dropped
// (answered Internal) before the server stops.
struct ScriptedServer {
  using Script = std::function<void(ScriptedServer&, const Request&, const Responder&)>;
  IoThreads io{1};
  std::mutex mu;  // guards parked
  std::vector<Responder> parked;
  std::atomic<int> requests{0};
  Script script;
  RpcServer server;

  explicit ScriptedServer(Script s, uint16_t port = 0, uint64_t max_inflight_bytes = 1ull << 30)
      : script(std::move(s)), server(io, Options(port, max_inflight_bytes), [this](Request req, Responder r) {
          ++requests;
          script(*this, req, r);
        }) {
    REQUIRE(server.Start().ok());
  }
  ~ScriptedServer() {
    ReleaseParked();
    server.Stop();
    io.Stop();
  }
  static RpcServerOptions Options(uint16_t port, uint64_t max_inflight_bytes) {
    RpcServerOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.max_inflight_bytes = max_inflight_bytes;
    return o;
  }
  uint16_t port() const { return server.port(); }
  void Park(const Responder& r) {
    std::lock_guard<std::mutex> lock(mu);
    parked.push_back(r);
  }
  size_t num_parked() {
    std::lock_guard<std::mutex> lock(mu);
    return parked.size();
  }
  // Answers every parked request as a well-behaved server would.
  void AnswerParked(const Request& like) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& r : parked) Answer(like, r);
    parked.clear();
  }
  void ReleaseParked() {
    std::lock_guard<std::mutex> lock(mu);
    parked.clear();
  }
};

// Short deadlines and back-off, so failures show within a test's patience.
RpcClientOptions Fast() {
  RpcClientOptions o;
  o.request_timeout = milliseconds(3000);
  o.connect_timeout = milliseconds(3000);
  o.initial_backoff = milliseconds(10);
  o.max_backoff = milliseconds(50);
  return o;
}

bool WaitUntil(const std::function<bool()>& done, milliseconds timeout = milliseconds(3000)) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

milliseconds Since(Clock::time_point t) { return std::chrono::duration_cast<milliseconds>(Clock::now() - t); }

std::future<StatusOr<Reply>> CallAsync(RpcClient& client, uint16_t type, flatbuffers::DetachedBuffer payload) {
  auto promise = std::make_shared<std::promise<StatusOr<Reply>>>();
  auto future = promise->get_future();
  client.Call(type, std::move(payload), [promise](StatusOr<Reply> r) { promise->set_value(std::move(r)); });
  return future;
}

TEST_CASE("Every request type has a bounded deadline by default; admin requests a longer one") {
  const RpcClientOptions o;
  CHECK(o.request_timeout.count() > 0);
  CHECK(o.request_timeout <= milliseconds(60000));
  for (uint16_t t = static_cast<uint16_t>(MessageType::Ping); t <= static_cast<uint16_t>(MessageType::ShuffleFetch);
       ++t) {
    INFO(MessageTypeName(t));
    const CallOptions c = DefaultCallOptions(t, o);
    CHECK(c.timeout.count() > 0);
    const bool admin = t == static_cast<uint16_t>(MessageType::Save) || t == static_cast<uint16_t>(MessageType::Load) ||
                       t == static_cast<uint16_t>(MessageType::Shrink);
    CHECK(c.timeout == (admin ? o.admin_timeout : o.request_timeout));
  }
  CHECK(o.admin_timeout > o.request_timeout);
  // Re-sent after a connection loss: reads only. Never: anything that applies per copy.
  CHECK(DefaultCallOptions(kPull, o).idempotent);
  CHECK(DefaultCallOptions(static_cast<uint16_t>(MessageType::PullDense), o).idempotent);
  CHECK_FALSE(DefaultCallOptions(kPush, o).idempotent);
  CHECK_FALSE(DefaultCallOptions(static_cast<uint16_t>(MessageType::PushDense), o).idempotent);
  CHECK_FALSE(DefaultCallOptions(kBarrier, o).idempotent);
  CHECK_FALSE(DefaultCallOptions(static_cast<uint16_t>(MessageType::ShuffleSend), o).idempotent);
  CHECK_FALSE(DefaultCallOptions(static_cast<uint16_t>(MessageType::ShuffleFetch), o).idempotent);
  CHECK(DefaultCallOptions(kPush, o).busy == BusyRetry::kAdmission);
  CHECK(DefaultCallOptions(static_cast<uint16_t>(MessageType::ShuffleSend), o).busy == BusyRetry::kAlways);
}

TEST_CASE("A server that never replies: TimedOut within the deadline, naming the request and the server") {
  ScriptedServer s([](ScriptedServer& self, const Request&, const Responder& r) { self.Park(r); });
  IoThreads io(1);
  RpcClientOptions o = Fast();
  o.request_timeout = milliseconds(200);
  RpcClient client(io, Endpoint{"127.0.0.1", s.port()}, o, "pserver 3 (test)");
  REQUIRE(client.Connect().ok());
  const auto start = Clock::now();
  auto r = client.CallSync(kPull, PullRequest());
  const auto took = Since(start);
  REQUIRE(r.status().IsTimedOut());
  CHECK_THAT(r.status().message(), Catch::Contains("PullSparse to pserver 3 (test)"));
  CHECK(took >= milliseconds(200));
  CHECK(took < milliseconds(700));
  CHECK(client.pending() == 0);
}

TEST_CASE("A frozen server is noticed during a long call: the liveness probe gets no answer") {
  ScriptedServer s([](ScriptedServer& self, const Request&, const Responder& r) { self.Park(r); });  // even Ping
  IoThreads io(1);
  RpcClientOptions o = Fast();
  o.request_timeout = milliseconds(200);
  o.keepalive_interval = milliseconds(100);
  RpcClient client(io, Endpoint{"127.0.0.1", s.port()}, o);
  REQUIRE(client.Connect().ok());
  CallOptions barrier = DefaultCallOptions(kBarrier, o);
  barrier.timeout = milliseconds(30000);  // a long barrier
  const auto start = Clock::now();
  auto r = client.CallSync(kBarrier, BarrierRequest(), barrier);
  REQUIRE(r.status().IsTimedOut());
  CHECK_THAT(r.status().message(), Catch::Contains("liveness"));
  CHECK_THAT(r.status().message(), Catch::Contains("Barrier to server 127.0.0.1:" + std::to_string(s.port())));
  CHECK(Since(start) < milliseconds(2000));
}

TEST_CASE("A server that answers the liveness probe keeps a long call waiting") {
  ScriptedServer s([](ScriptedServer& self, const Request& req, const Responder& r) {
    if (req.type == kPing) return Answer(req, r);
    self.Park(r);
  });
  IoThreads io(1);
  RpcClientOptions o = Fast();
  o.request_timeout = milliseconds(150);
  o.keepalive_interval = milliseconds(50);
  RpcClient client(io, Endpoint{"127.0.0.1", s.port()}, o);
  REQUIRE(client.Connect().ok());
  CallOptions barrier = DefaultCallOptions(kBarrier, o);
  barrier.timeout = milliseconds(5000);
  auto f = CallAsync(client, kBarrier, BarrierRequest());
  auto call = std::async(std::launch::async, [&] { return client.CallSync(kBarrier, BarrierRequest(), barrier); });
  // The first Barrier (default deadline 150 ms) times out; the long one outlives several probes.
  CHECK(f.get().status().IsTimedOut());
  std::this_thread::sleep_for(milliseconds(600));
  Request like;
  like.type = kBarrier;
  s.AnswerParked(like);
  auto r = call.get();
  INFO(r.status().ToString());
  CHECK(r.ok());
  CHECK(s.requests > 4);  // the barriers and some probes
}

TEST_CASE("A request answered Busy twice, then OK, succeeds") {
  std::atomic<int> pulls{0};
  ScriptedServer s([&](ScriptedServer&, const Request& req, const Responder& r) {
    if (req.type == kPull && ++pulls <= 2) return r.SendError(Status::Busy("shard 3 is busy"));
    Answer(req, r);
  });
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", s.port()}, Fast());
  REQUIRE(client.Connect().ok());
  auto r = client.CallSync(kPull, PullRequest());
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(pulls == 3);
  CHECK(client.counters().busy_retries == 2);
}

TEST_CASE("A push answered Busy by its handler is not re-sent: the handler may have applied part of it") {
  std::atomic<int> pushes{0};
  ScriptedServer s([&](ScriptedServer&, const Request&, const Responder& r) {
    ++pushes;
    r.SendError(Status::Busy("memory row store cannot add a row"));
  });
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", s.port()}, Fast());
  REQUIRE(client.Connect().ok());
  auto r = client.CallSync(kPush, PushRequest());
  CHECK(r.status().IsBusy());
  CHECK_THAT(r.status().message(), Catch::Contains("PushSparse to server"));
  CHECK(pushes == 1);
}

TEST_CASE("A push refused by the server's admission control waits for room and is applied once") {
  // The pull below is parked and holds its bytes; a push that would pass the bound is
  // refused Busy before any handler sees it, then admitted once the pull is answered.
  const uint64_t pull_bytes = PullRequest(32).size();
  std::atomic<int> pushes{0};
  ScriptedServer s(
      [&](ScriptedServer& self, const Request& req, const Responder& r) {
        if (req.type == kPull) return self.Park(r);
        ++pushes;
        Answer(req, r);
      },
      0, pull_bytes + PushRequest().size() / 2);
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", s.port()}, Fast());
  REQUIRE(client.Connect().ok());
  auto pull = CallAsync(client, kPull, PullRequest(32));
  REQUIRE(WaitUntil([&] { return s.num_parked() == 1; }));
  auto push = CallAsync(client, kPush, PushRequest());
  REQUIRE(WaitUntil([&] { return client.counters().busy_retries >= 2; }));
  CHECK(pushes == 0);
  Request like;
  like.type = kPull;
  s.AnswerParked(like);
  CHECK(pull.get().ok());
  auto r = push.get();
  INFO(r.status().ToString());
  CHECK(r.ok());
  CHECK(pushes == 1);
}

TEST_CASE("A connection dropped after the server got a pull: the client reconnects and the pull succeeds") {
  std::atomic<int> pulls{0};
  ScriptedServer s([&](ScriptedServer& self, const Request& req, const Responder& r) {
    if (req.type == kPull && ++pulls == 1) return self.Park(r);  // the first never answered
    Answer(req, r);
  });
  TcpProxy proxy(s.port());
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", proxy.port()}, Fast());
  REQUIRE(client.Connect().ok());
  auto pull = CallAsync(client, kPull, PullRequest());
  REQUIRE(WaitUntil([&] { return pulls == 1; }));
  proxy.Cut();
  auto r = pull.get();
  INFO(r.status().ToString());
  CHECK(r.ok());
  CHECK(pulls == 2);
  CHECK(proxy.accepted() == 2);
  CHECK(client.counters().reconnects == 1);
  CHECK(client.counters().resent == 1);
}

TEST_CASE("A connection dropped after the server got a push: Unavailable, and the push is not re-sent") {
  std::atomic<int> pushes{0};
  ScriptedServer s([&](ScriptedServer& self, const Request& req, const Responder& r) {
    if (req.type == kPush) {
      ++pushes;  // "applied"; the reply is lost with the connection
      return self.Park(r);
    }
    Answer(req, r);
  });
  TcpProxy proxy(s.port());
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", proxy.port()}, Fast(), "pserver 1 (test)");
  REQUIRE(client.Connect().ok());
  auto push = CallAsync(client, kPush, PushRequest());
  REQUIRE(WaitUntil([&] { return pushes == 1; }));
  proxy.Cut();
  auto r = push.get();
  REQUIRE(r.status().IsUnavailable());
  CHECK_THAT(r.status().message(), Catch::Contains("PushSparse to pserver 1 (test)"));
  CHECK_THAT(r.status().message(), Catch::Contains("not re-sent"));
  // The client is usable again (it reconnects on the next call) and never sent the push twice.
  CHECK(client.CallSync(kPing, PingRequest()).ok());
  CHECK(pushes == 1);
  CHECK(client.counters().resent == 0);
}

TEST_CASE("Many pipelined pulls cut mid-flight all complete after the reconnect") {
  std::atomic<int> pulls{0};
  ScriptedServer s([&](ScriptedServer& self, const Request& req, const Responder& r) {
    if (++pulls <= 50) return self.Park(r);
    Answer(req, r);
  });
  TcpProxy proxy(s.port());
  IoThreads io(2);
  RpcClient client(io, Endpoint{"127.0.0.1", proxy.port()}, Fast());
  REQUIRE(client.Connect().ok());
  std::vector<std::future<StatusOr<Reply>>> calls;
  for (int i = 0; i < 50; ++i) calls.push_back(CallAsync(client, kPull, PullRequest()));
  REQUIRE(WaitUntil([&] { return pulls == 50; }));
  for (int i = 0; i < 50; ++i) calls.push_back(CallAsync(client, kPull, PullRequest()));
  proxy.Cut();
  for (auto& c : calls) CHECK(c.get().ok());
  CHECK(client.counters().reconnects >= 1);
}

TEST_CASE("A connection idle for max_idle is replaced before the next call, not raced against the server's close") {
  ScriptedServer s([](ScriptedServer&, const Request& req, const Responder& r) { Answer(req, r); });
  TcpProxy proxy(s.port());
  IoThreads io(1);
  RpcClientOptions o = Fast();
  o.max_idle = milliseconds(100);
  RpcClient client(io, Endpoint{"127.0.0.1", proxy.port()}, o);
  REQUIRE(client.Connect().ok());
  REQUIRE(client.CallSync(kPush, PushRequest()).ok());
  REQUIRE(client.CallSync(kPush, PushRequest()).ok());  // in use: the same connection
  CHECK(proxy.accepted() == 1);
  std::this_thread::sleep_for(milliseconds(150));
  REQUIRE(client.CallSync(kPush, PushRequest()).ok());
  CHECK(proxy.accepted() == 2);
  CHECK(s.requests == 3);
}

// A port that was free a moment ago (a server bound it and went away).
uint16_t FreePort() {
  ScriptedServer s([](ScriptedServer&, const Request& req, const Responder& r) { Answer(req, r); });
  return s.port();
}

TEST_CASE("Connect() waits for a server that comes up within the connect deadline") {
  const uint16_t port = FreePort();
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", port}, Fast());
  auto connected = std::async(std::launch::async, [&] { return client.Connect(); });
  std::this_thread::sleep_for(milliseconds(200));
  ScriptedServer s([](ScriptedServer&, const Request& req, const Responder& r) { Answer(req, r); }, port);
  Status st = connected.get();
  INFO(st.ToString());
  REQUIRE(st.ok());
  CHECK(client.CallSync(kPing, PingRequest()).ok());
}

TEST_CASE("A server restarted within the request deadline: the call made while it was down succeeds") {
  IoThreads io(1);
  std::unique_ptr<RpcClient> client;
  uint16_t port = 0;
  {
    ScriptedServer first([](ScriptedServer&, const Request& req, const Responder& r) { Answer(req, r); });
    port = first.port();
    client = std::make_unique<RpcClient>(io, Endpoint{"127.0.0.1", port}, Fast());
    REQUIRE(client->Connect().ok());
    REQUIRE(client->CallSync(kPull, PullRequest()).ok());
  }  // the server goes away
  auto pull = CallAsync(*client, kPull, PullRequest());
  std::this_thread::sleep_for(milliseconds(200));
  ScriptedServer second([](ScriptedServer&, const Request& req, const Responder& r) { Answer(req, r); }, port);
  auto r = pull.get();
  INFO(r.status().ToString());
  CHECK(r.ok());
  CHECK(client->counters().reconnects == 1);
}

TEST_CASE("A server that stays down: Unavailable at the deadline, naming the server and the last error") {
  IoThreads io(1);
  RpcClientOptions o = Fast();
  o.request_timeout = milliseconds(300);
  std::unique_ptr<RpcClient> client, closing;
  {
    ScriptedServer s([](ScriptedServer&, const Request& req, const Responder& r) { Answer(req, r); });
    client = std::make_unique<RpcClient>(io, Endpoint{"127.0.0.1", s.port()}, o, "pserver 0 (test)");
    REQUIRE(client->Connect().ok());
    closing = std::make_unique<RpcClient>(io, Endpoint{"127.0.0.1", s.port()}, Fast());
    REQUIRE(closing->Connect().ok());
  }
  const auto start = Clock::now();
  auto r = client->CallSync(kPull, PullRequest());
  REQUIRE(r.status().IsUnavailable());
  CHECK_THAT(r.status().message(), Catch::Contains("PullSparse to pserver 0 (test)"));
  CHECK_THAT(r.status().message(), Catch::Contains("refused"));
  CHECK(Since(start) >= milliseconds(300));
  CHECK(Since(start) < milliseconds(1000));
  // Close() ends a reconnection loop and fails what waits at once (a client whose calls
  // still wait: its deadline is 3 s).
  auto waiting = CallAsync(*closing, kPull, PullRequest());
  std::this_thread::sleep_for(milliseconds(30));
  closing->Close();
  CHECK(waiting.get().status().code() == StatusCode::kAborted);
}

TEST_CASE("A server unreachable for a whole deadline fails the next call at once, not a deadline later") {
  // A trainer lets an Unavailable push pass (a push lost with its pserver) and notices a gone
  // pserver at its next pull: that pull must not wait a second deadline.
  IoThreads io(1);
  RpcClientOptions o = Fast();
  o.request_timeout = milliseconds(1500);
  std::unique_ptr<RpcClient> client;
  {
    ScriptedServer s([](ScriptedServer&, const Request& req, const Responder& r) { Answer(req, r); });
    client = std::make_unique<RpcClient>(io, Endpoint{"127.0.0.1", s.port()}, o, "pserver 0 (test)");
    REQUIRE(client->Connect().ok());
  }
  // The client must have seen its connection close: a push written to the dying connection
  // fails at once as lost, and then the pull, not the push, would be the first to wait.
  REQUIRE(WaitUntil([&] { return !client->connected(); }));
  auto push = client->CallSync(kPush, PushRequest());
  REQUIRE(push.status().IsUnavailable());  // not sent within its deadline
  const auto start = Clock::now();
  auto pull = client->CallSync(kPull, PullRequest());
  const auto took = Since(start);
  REQUIRE(pull.status().IsUnavailable());
  CHECK_THAT(pull.status().message(), Catch::Contains("PullSparse to pserver 0 (test)") &&
                                          Catch::Contains("has been unreachable for") && Catch::Contains("refused"));
  CHECK(took < o.request_timeout);  // the next failed attempt, not its own deadline
}

TEST_CASE("A server that closes every connection unanswered is redialled with back-off, not in a loop") {
  // Accepts and closes at once, as a server at its connection cap or expecting TLS does.
  boost::asio::io_context raw;
  boost::asio::ip::tcp::acceptor acceptor(raw, {boost::asio::ip::make_address("127.0.0.1"), 0});
  std::atomic<int> accepted{0};
  std::atomic<bool> stop{false};
  acceptor.non_blocking(true);
  std::thread closer([&] {
    while (!stop) {
      boost::system::error_code ec;
      boost::asio::ip::tcp::socket socket = acceptor.accept(ec);
      if (!ec) {
        ++accepted;
        socket.close(ec);
      } else {
        std::this_thread::sleep_for(milliseconds(1));
      }
    }
  });
  IoThreads io(1);
  RpcClientOptions o = Fast();
  o.initial_backoff = milliseconds(20);
  o.max_backoff = milliseconds(200);
  o.request_timeout = milliseconds(1000);
  RpcClient client(io, Endpoint{"127.0.0.1", acceptor.local_endpoint().port()}, o);
  REQUIRE(client.Connect().ok());  // TCP connects
  auto r = client.CallSync(kPing, PingRequest(), CallOptions{milliseconds(1000), true});
  stop = true;
  closer.join();
  CHECK_FALSE(r.ok());
  // Delays of 20, 40, 80, 160, 200, 200 ... ms (jittered down to half) over one second:
  // at most ~15 connections; without the back-off there are thousands.
  INFO("connections accepted: " << accepted.load());
  CHECK(accepted.load() >= 2);
  CHECK(accepted.load() <= 30);
}

}  // namespace
}  // namespace fleetps::net
