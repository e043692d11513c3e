// A real pserver process with small limits, attacked the ways a hostile or broken peer
// would: wrapping dense offsets, replies sized from the wire, payloads that announce more
// than the in-flight budget, a peer that pipelines requests and never reads, barriers that
// never complete, metric spam, NaN gradients, duplicated sync pushes and too many
// connections, and a server out of file descriptors (EMFILE). After each attack the server
// must still answer a polite client, and its resident memory must stay within its
// configured limits plus a fixed allowance. Then admin operations from a peer without the
// cluster's secret, and Save/Load paths that try to leave the checkpoint root.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <thread>

#include "common/net/auth.h"
#include "common/net/frame.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_client.h"
#include "common/sharding.h"
#include "schemas/ps_generated.h"
#include "test/support/process.h"

namespace fleetps {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using testing::ChildProcess;
using wire::MessageType;
using namespace std::chrono_literals;

constexpr uint32_t kDim = 64;
constexpr uint64_t kDense = 1000;
constexpr uint64_t kMaxMessage = 8u << 20;
constexpr uint64_t kMaxInflight = 4u << 20;
constexpr uint64_t kWriteQueue = 1u << 20;
constexpr uint32_t kMaxConnections = 24;

std::string Yaml(uint16_t port) {
  return "server:\n  endpoints: [\"127.0.0.1:" + std::to_string(port) +
         "\"]\n  bind_host: 127.0.0.1\n  io_threads: 2\n  shard_threads: 2\n"
         "  max_message_bytes: " +
         std::to_string(kMaxMessage) +
         "\n"
         "  max_inflight_bytes: " +
         std::to_string(kMaxInflight) +
         "\n"
         "  max_write_queue_bytes: " +
         std::to_string(kWriteQueue) +
         "\n"
         "  max_connections: " +
         std::to_string(kMaxConnections) +
         "\n"
         "  read_timeout_s: 2\n"
         "  drain_timeout_ms: 1000\n"
         "tables:\n"
         "  - {id: 0, name: emb, kind: sparse, dim: 64, shards: 2,\n"
         "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n"
         "  - {id: 1, name: dense, kind: dense, size: 1000,\n"
         "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n";
}

struct Server {
  std::string dir = testing::MakeTempDir("hostile");
  uint16_t port = testing::FreePorts(1)[0];
  ChildProcess process;
  net::IoThreads io{1};
  std::unique_ptr<net::RpcClient> polite;

  Server() {
    testing::WriteFile(dir + "/ps.yaml", Yaml(port));
    std::map<std::string, std::string> env;
    // Under ASan (gcc or clang; ignored otherwise): its quarantine keeps freed memory
    // resident (256 MiB by default), which would hide what the server itself holds —
    // measure the server, not the sanitizer.
    env["ASAN_OPTIONS"] = "quarantine_size_mb=0:detect_leaks=1:abort_on_error=1";
    REQUIRE(process.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml"}, env,
                          dir + "/pserver.log"));
    REQUIRE(testing::WaitForPort(port, 10s));
    polite = Connect();
  }
  ~Server() {
    if (polite) polite->Close();
    process.Signal(SIGKILL);
    process.Wait(5s);
  }
  std::unique_ptr<net::RpcClient> Connect() {
    net::RpcClientOptions o;
    o.max_payload = 64u << 20;
    auto c = std::make_unique<net::RpcClient>(io, net::Endpoint{"127.0.0.1", port}, o);
    REQUIRE(c->Connect().ok());
    return c;
  }
  // The server is up and answers a fresh, polite client.
  void RequireServing() {
    REQUIRE(process.running());
    auto c = Connect();
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreatePingRequest(fbb));
    auto r = c->CallSync(static_cast<uint16_t>(MessageType::Ping), fbb.Release());
    REQUIRE(r.ok());
    c->Close();
  }
  uint64_t rss() const { return testing::ResidentBytes(process.pid()); }
  std::vector<float> Dense() {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreatePullDenseRequest(fbb, 1, 0, kDense));
    auto r = polite->CallSync(static_cast<uint16_t>(MessageType::PullDense), fbb.Release());
    REQUIRE(r.ok());
    auto* v = flatbuffers::GetRoot<wire::PullDenseReply>(r->data())->values();
    return {v->begin(), v->end()};
  }
};

flatbuffers::DetachedBuffer SyncPush(uint64_t offset, const std::vector<float>& g, int trainer, uint32_t trainers) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreatePushDenseRequest(fbb, 1, offset, fbb.CreateVector(g), trainers, false, trainer));
  return fbb.Release();
}

flatbuffers::DetachedBuffer PullSparse(uint64_t first_key, size_t n) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = first_key + i;
  fbb.Finish(wire::CreatePullSparseRequest(fbb, 0, fbb.CreateVector(keys)));
  return fbb.Release();
}

// A raw socket peer writing frames without ever reading.
struct RawPeer {
  asio::io_context ctx;
  tcp::socket socket{ctx};
  explicit RawPeer(uint16_t port) { socket.connect({asio::ip::make_address("127.0.0.1"), port}); }
  boost::system::error_code Send(MessageType type, uint64_t id, const flatbuffers::DetachedBuffer& payload) {
    uint8_t h[net::kFrameHeaderSize];
    net::EncodeFrameHeader(static_cast<uint16_t>(type), id, static_cast<uint32_t>(payload.size()), h);
    boost::system::error_code ec;
    asio::write(socket, asio::buffer(h), ec);
    if (!ec) asio::write(socket, asio::buffer(payload.data(), payload.size()), ec);
    return ec;
  }
};

TEST_CASE("A hostile peer cannot crash or exhaust a pserver") {
  Server server;
  const uint64_t baseline = server.rss();
  INFO("baseline RSS " << baseline);
  const auto type = [](MessageType t) { return static_cast<uint16_t>(t); };

  SECTION("a sync dense push whose offset wraps around 2^64 is refused and writes nothing") {
    const std::vector<float> g(16, 1e30f);
    auto r = server.polite->CallSync(type(MessageType::PushDense),
                                     SyncPush(std::numeric_limits<uint64_t>::max() - 7, g, 0, 1));
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("outside this server's slice"));
    CHECK(server.Dense() == std::vector<float>(kDense, 0.0f));
    server.RequireServing();
  }

  SECTION("replies sized from the wire are refused before allocation") {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreatePullDenseRequest(fbb, 1, 0, uint64_t{1} << 40));
    auto dense = server.polite->CallSync(type(MessageType::PullDense), fbb.Release());
    CHECK(dense.status().code() == StatusCode::kInvalidArgument);
    // 40k keys x 64 floats = 10 MB > max_message_bytes, from a 320 KB request.
    auto sparse = server.polite->CallSync(type(MessageType::PullSparse), PullSparse(0, 40000));
    CHECK(sparse.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(sparse.status().message(), Catch::Contains("max_message_bytes"));
    server.RequireServing();
  }

  SECTION("payloads over the in-flight budget are never allocated, even when half-sent") {
    std::vector<std::unique_ptr<RawPeer>> peers;
    std::vector<uint8_t> part(6u << 20, 0xAB);
    for (int i = 0; i < 16; ++i) {  // 16 x 6 MiB sent of 7 MiB announced: ~100 MiB if allocated
      peers.push_back(std::make_unique<RawPeer>(server.port));
      uint8_t h[net::kFrameHeaderSize];
      net::EncodeFrameHeader(type(MessageType::PushSparse), 1, 7u << 20, h);
      boost::system::error_code ec;
      asio::write(peers.back()->socket, asio::buffer(h), ec);
      asio::write(peers.back()->socket, asio::buffer(part), ec);
    }
    std::this_thread::sleep_for(500ms);
    CHECK(server.rss() < baseline + 48u * (1u << 20));
    server.RequireServing();
  }

  SECTION("a peer that pipelines pulls and never reads is stopped at its write-queue bound") {
    RawPeer hog(server.port);
    hog.socket.set_option(asio::socket_base::receive_buffer_size(4096));
    std::atomic<bool> stop{false};
    std::thread sender([&] {
      // 2000 pulls of 1000 keys: 500 MiB of replies if they were all produced.
      for (uint64_t i = 0; i < 2000 && !stop; ++i) {
        if (hog.Send(MessageType::PullSparse, i, PullSparse(i * 1000, 1000))) break;
      }
    });
    std::this_thread::sleep_for(3s);
    CHECK(server.rss() < baseline + kMaxInflight + kWriteQueue + 64u * (1u << 20));
    server.RequireServing();
    stop = true;
    hog.socket.close();
    sender.join();
  }

  SECTION("barriers that never complete do not lock other clients out") {
    std::vector<std::unique_ptr<net::RpcClient>> waiters;
    std::vector<std::future<StatusOr<net::Reply>>> pending;
    std::vector<double> values(100000, 1.0);  // 800 KB each: 12 of them pass the in-flight budget
    for (uint32_t i = 0; i < 12; ++i) {
      waiters.push_back(server.Connect());
      flatbuffers::FlatBufferBuilder fbb;
      fbb.Finish(wire::CreateBarrierRequest(fbb, fbb.CreateString("never-" + std::to_string(i)), 0, 1000, 600000,
                                            fbb.CreateVector(values)));
      auto promise = std::make_shared<std::promise<StatusOr<net::Reply>>>();
      pending.push_back(promise->get_future());
      waiters.back()->Call(type(MessageType::Barrier), fbb.Release(),
                           [promise](StatusOr<net::Reply> r) { promise->set_value(std::move(r)); });
    }
    std::this_thread::sleep_for(300ms);
    // A polite push of 300 KB is admitted, not answered Busy.
    std::vector<uint64_t> keys(1000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
    std::vector<float> g(keys.size() * kDim, 0.0f);
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreatePushSparseRequest(fbb, 0, fbb.CreateVector(keys), fbb.CreateVector(g)));
    net::CallOptions no_retry;  // a Busy answer must reach the test, not be retried away
    no_retry.timeout = std::chrono::milliseconds(10000);
    no_retry.busy = net::BusyRetry::kNever;
    auto r = server.polite->CallSync(type(MessageType::PushSparse), fbb.Release(), no_retry);
    CHECK(r.ok());
    // An absurd barrier is refused outright.
    flatbuffers::FlatBufferBuilder bad;
    bad.Finish(wire::CreateBarrierRequest(bad, bad.CreateString("huge"), 0, 1u << 30, 1000));
    CHECK(server.polite->CallSync(type(MessageType::Barrier), bad.Release()).status().code() ==
          StatusCode::kInvalidArgument);
    for (auto& w : waiters) w->Close();
  }

  SECTION("metric reports under ever new names stay bounded") {
    std::vector<double> values(10000, 0.5);  // 80 KB per name; 3000 names = 240 MB unbounded
    for (int i = 0; i < 3000; ++i) {
      flatbuffers::FlatBufferBuilder fbb;
      fbb.Finish(
          wire::CreateMetricReportRequest(fbb, fbb.CreateString("m" + std::to_string(i)), 0, fbb.CreateVector(values)));
      REQUIRE(server.polite->CallSync(type(MessageType::MetricReport), fbb.Release()).ok());
    }
    CHECK(server.rss() < baseline + 64u * (1u << 20) + 48u * (1u << 20));
    server.RequireServing();
  }

  SECTION("NaN and infinite gradients are refused, naming the table and the key, and not applied") {
    std::vector<uint64_t> keys = {11, 12, 13};
    std::vector<float> g(keys.size() * kDim, 0.25f);
    g[kDim + 5] = std::numeric_limits<float>::quiet_NaN();  // key 12
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreatePushSparseRequest(fbb, 0, fbb.CreateVector(keys), fbb.CreateVector(g)));
    auto r = server.polite->CallSync(type(MessageType::PushSparse), fbb.Release());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("'emb'") && Catch::Contains("key 12"));
    auto pulled = server.polite->CallSync(type(MessageType::PullSparse), PullSparse(11, 3));
    REQUIRE(pulled.ok());
    auto* v = flatbuffers::GetRoot<wire::PullSparseReply>(pulled->data())->values();
    for (float x : *v) CHECK(x == 0.0f);  // key 11 and 13 were not applied either

    std::vector<float> dense(kDense, 1.0f);
    dense[7] = std::numeric_limits<float>::infinity();
    flatbuffers::FlatBufferBuilder d;
    d.Finish(wire::CreatePushDenseRequest(d, 1, 0, d.CreateVector(dense)));
    auto dr = server.polite->CallSync(type(MessageType::PushDense), d.Release());
    CHECK(dr.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(dr.status().message(), Catch::Contains("offset 7"));
    CHECK(server.Dense() == std::vector<float>(kDense, 0.0f));
  }

  SECTION("a duplicated sync push does not complete the step in another trainer's place") {
    const std::vector<float> g(kDense, 1.0f);
    REQUIRE(server.polite->CallSync(type(MessageType::PushDense), SyncPush(0, g, 0, 2)).ok());
    auto dup = server.polite->CallSync(type(MessageType::PushDense), SyncPush(0, g, 0, 2));
    CHECK(dup.status().code() == StatusCode::kInvalidArgument);
    CHECK(server.Dense() == std::vector<float>(kDense, 0.0f));  // still waiting for trainer 1
    REQUIRE(server.polite->CallSync(type(MessageType::PushDense), SyncPush(0, g, 1, 2)).ok());
    CHECK(server.Dense() == std::vector<float>(kDense, -1.0f));  // one step, mean gradient 1
    auto anonymous = server.polite->CallSync(type(MessageType::PushDense), SyncPush(0, g, -1, 2));
    CHECK(anonymous.status().code() == StatusCode::kInvalidArgument);
  }

  SECTION("a hand-crafted payload whose 8-byte keys are misaligned is refused, not read") {
    // From the fuzzer (test/fuzz/regressions/ps_service_fuzz/pullsparse-misaligned-keys): a
    // PullSparseRequest that passes FlatBuffers verification with `keys` at 4 mod 8.
    const std::string found = testing::ReadFile(std::string(FLEETPS_SOURCE_DIR) +
                                                "/test/fuzz/regressions/ps_service_fuzz/pullsparse-misaligned-keys");
    REQUIRE(found.size() == 49);
    RawPeer peer(server.port);
    uint8_t header[net::kFrameHeaderSize];
    net::EncodeFrameHeader(type(MessageType::PullSparse), 9, 44, header);
    asio::write(peer.socket, asio::buffer(header));
    asio::write(peer.socket, asio::buffer(found.data() + 5, 44));
    asio::read(peer.socket, asio::buffer(header));
    wire::FrameHeader h;
    REQUIRE(net::DecodeFrameHeader(header, 1u << 20, "server", &h).ok());
    std::vector<uint8_t> payload(h.payload_length());
    asio::read(peer.socket, asio::buffer(payload));
    REQUIRE(h.type() == type(MessageType::ErrorReply));
    const Status refused = net::ParseErrorReply(payload.data(), payload.size(), "server");
    CHECK(refused.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(refused.message(), Catch::Contains("not 8-byte aligned"));
    server.RequireServing();
  }

  SECTION("a peer that stops in the middle of a frame is disconnected after read_timeout_s") {
    RawPeer peer(server.port);
    uint8_t h[net::kFrameHeaderSize];
    net::EncodeFrameHeader(type(MessageType::Ping), 1, 100, h);
    asio::write(peer.socket, asio::buffer(h));
    asio::write(peer.socket, asio::buffer(h, 10));  // 10 of the 100 payload bytes, then silence
    const timeval wait{10, 0};
    ::setsockopt(peer.socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    const auto started = std::chrono::steady_clock::now();
    char byte;
    const ssize_t n = ::recv(peer.socket.native_handle(), &byte, 1, 0);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    CHECK(n <= 0);         // closed (0) or reset (-1), never an answer
    CHECK(waited >= 1.5);  // by the read timeout (2 s), not at once
    CHECK(waited < 9.5);   // and not left open
    server.RequireServing();
  }

  SECTION("connections beyond max_connections are refused; the server keeps serving") {
    std::vector<std::unique_ptr<RawPeer>> peers;
    for (uint32_t i = 0; i < kMaxConnections + 8; ++i) peers.push_back(std::make_unique<RawPeer>(server.port));
    // The last one is over the cap: it is told why, then closed.
    timeval tv{5, 0};
    setsockopt(peers.back()->socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t header[net::kFrameHeaderSize];
    boost::system::error_code ec;
    asio::read(peers.back()->socket, asio::buffer(header), ec);
    REQUIRE_FALSE(ec);
    wire::FrameHeader h;
    REQUIRE(net::DecodeFrameHeader(header, 1u << 20, "server", &h).ok());
    std::vector<uint8_t> payload(h.payload_length());
    asio::read(peers.back()->socket, asio::buffer(payload), ec);
    const Status refused = net::ParseErrorReply(payload.data(), payload.size(), "server");
    CHECK(refused.code() == StatusCode::kUnavailable);
    CHECK_THAT(refused.message(), Catch::Contains("max_connections"));
    peers.clear();  // the refused ones were closed by the server; the rest close now
    std::this_thread::sleep_for(300ms);
    server.RequireServing();
  }

  SECTION("out of file descriptors, accept backs off instead of spinning, and serves again later") {
    // Leave the server 4 descriptors more than it holds now, then open 12 connections: the
    // accepts beyond the 4th fail with EMFILE until some close. A request first, so that
    // nothing in the server runs for the first time while it is out of descriptors (the
    // sanitizers' own checks need a pipe then).
    server.RequireServing();
    const std::string fd_dir = "/proc/" + std::to_string(server.process.pid()) + "/fd";
    const auto fds = std::distance(std::filesystem::directory_iterator(fd_dir), std::filesystem::directory_iterator());
    rlimit before{};
    REQUIRE(::prlimit(server.process.pid(), RLIMIT_NOFILE, nullptr, &before) == 0);
    const rlimit limit{static_cast<rlim_t>(fds + 4), before.rlim_max};  // the soft limit only
    REQUIRE(::prlimit(server.process.pid(), RLIMIT_NOFILE, &limit, nullptr) == 0);
    std::vector<std::unique_ptr<RawPeer>> peers;
    for (int i = 0; i < 12; ++i) peers.push_back(std::make_unique<RawPeer>(server.port));
    std::this_thread::sleep_for(2s);
    const std::string log = testing::ReadFile(server.dir + "/pserver.log");
    size_t failures = 0;
    for (size_t at = log.find("accept failed"); at != std::string::npos; at = log.find("accept failed", at + 1)) {
      ++failures;
    }
    INFO(log.substr(log.size() > 3000 ? log.size() - 3000 : 0));
    CHECK_THAT(log, Catch::Contains("Too many open files; retrying in"));
    // Back-off 10, 20, 40 ... 1000 ms: about 10 retries in 2 s (without it, millions).
    CHECK(failures >= 1);
    CHECK(failures <= 20);
    peers.clear();
    REQUIRE(::prlimit(server.process.pid(), RLIMIT_NOFILE, &before, nullptr) == 0);
    server.RequireServing();
  }

  server.RequireServing();
}

// Shutdown: the listener closes and requests on connections that stay open are answered
// Unavailable while what is in flight drains (drain_timeout_ms), then the process exits 0.
TEST_CASE("After SIGTERM a connection that stays open gets Unavailable; the server drains and exits 0") {
  Server server;
  const auto type = [](MessageType t) { return static_cast<uint16_t>(t); };
  auto waiter = server.Connect();
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateBarrierRequest(fbb, fbb.CreateString("in-flight"), 0, 2, 60000));
  auto promise = std::make_shared<std::promise<StatusOr<net::Reply>>>();
  auto in_flight = promise->get_future();
  waiter->Call(type(MessageType::Barrier), fbb.Release(),
               [promise](StatusOr<net::Reply> r) { promise->set_value(std::move(r)); });
  std::this_thread::sleep_for(200ms);
  server.process.Signal(SIGTERM);
  std::this_thread::sleep_for(200ms);
  flatbuffers::FlatBufferBuilder ping;
  ping.Finish(wire::CreatePingRequest(ping));
  net::CallOptions once;
  once.timeout = std::chrono::milliseconds(5000);
  auto refused = server.polite->CallSync(type(MessageType::Ping), ping.Release(), once);
  CHECK(refused.status().code() == StatusCode::kUnavailable);
  CHECK(server.process.Wait(30s) == 0);  // drain_timeout_ms (1 s) for the barrier, then exit 0
  REQUIRE(in_flight.wait_for(10s) == std::future_status::ready);
  CHECK_FALSE(in_flight.get().ok());  // the barrier never completed: an error, not a hang
  waiter->Close();
}

// With a shared secret configured, the admin operations (Stop, Save, Load, Shrink) and every
// other request that changes the job's state (Heartbeat, Barrier, PushDenseParam,
// WriteRows) need a peer that proved it holds it, even where the data path is open
// (loopback, auth: auto); a member's Save and Load stay confined to the checkpoint root.
TEST_CASE("Admin operations need the shared secret, and their paths stay inside the checkpoint root") {
  const std::string dir = testing::MakeTempDir("hostile_admin");
  const uint16_t port = testing::FreePorts(1)[0];
  const std::string secret = dir + "/secret";
  testing::WriteFile(secret, "hostile admin test secret 0123456789\n");
  ::chmod(secret.c_str(), 0600);
  testing::WriteFile(dir + "/ps.yaml", "server:\n  endpoints: [\"127.0.0.1:" + std::to_string(port) +
                                           "\"]\n  io_threads: 1\n  shard_threads: 1\n  auth_secret_file: " + secret +
                                           "\n  checkpoint_root: " + dir +
                                           "/root\n"
                                           "tables:\n  - {id: 0, name: emb, kind: sparse, dim: 4, shards: 1}\n");
  ChildProcess process;
  REQUIRE(
      process.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml"}, {}, dir + "/pserver.log"));
  REQUIRE(testing::WaitForPort(port, 10s));
  INFO(testing::ReadFile(dir + "/pserver.log"));
  net::IoThreads io{1};
  auto connect = [&](std::shared_ptr<const net::AuthKey> key) {
    net::RpcClientOptions o;
    o.auth_key = std::move(key);
    auto c = std::make_unique<net::RpcClient>(io, net::Endpoint{"127.0.0.1", port}, o);
    REQUIRE(c->Connect().ok());
    return c;
  };
  auto save = [](const std::string& path) {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateSaveRequest(fbb, fbb.CreateString(path), fbb.CreateString("v1")));
    return fbb.Release();
  };
  auto load = [](const std::string& path) {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateLoadRequest(fbb, fbb.CreateString(path)));
    return fbb.Release();
  };
  auto stop = [] {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateStopRequest(fbb, fbb.CreateString("hostile")));
    return fbb.Release();
  };
  auto shrink = [] {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateShrinkRequest(fbb));
    return fbb.Release();
  };
  auto type = [](MessageType t) { return static_cast<uint16_t>(t); };

  auto anonymous = connect(nullptr);
  std::vector<std::pair<MessageType, flatbuffers::DetachedBuffer>> admin;
  admin.emplace_back(MessageType::Save, save("ckpt"));
  admin.emplace_back(MessageType::Load, load("ckpt"));
  admin.emplace_back(MessageType::Shrink, shrink());
  admin.emplace_back(MessageType::Stop, stop());
  for (auto& [t, payload] : admin) {
    INFO(net::MessageTypeName(type(t)));
    auto r = anonymous->CallSync(type(t), std::move(payload));
    CHECK(r.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(r.status().message(), Catch::Contains("admin operation") && Catch::Contains("shared secret"));
  }
  REQUIRE(process.running());
  CHECK_FALSE(std::filesystem::exists(dir + "/root/ckpt"));
  // So do the other requests that change the job's state: a heartbeat saying "trainer 0 of
  // 1 finished" would make the pserver exit, a barrier would complete in a trainer's
  // place, parameter writes would overwrite weights.
  auto heartbeat = [](bool finished) {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateHeartbeatRequest(fbb, 0, 1, finished));
    return fbb.Release();
  };
  std::vector<std::pair<MessageType, flatbuffers::DetachedBuffer>> job_state;
  job_state.emplace_back(MessageType::Heartbeat, heartbeat(true));
  {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateBarrierRequest(fbb, fbb.CreateString("start"), 0, 1, 1000));
    job_state.emplace_back(MessageType::Barrier, fbb.Release());
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<float> values(4, 9.0f);
    fbb.Finish(wire::CreatePushDenseParamRequest(fbb, 0, 0, fbb.CreateVector(values)));
    job_state.emplace_back(MessageType::PushDenseParam, fbb.Release());
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<uint64_t> keys = {1};
    std::vector<float> row(4, 9.0f);
    fbb.Finish(
        wire::CreateWriteRowsRequest(fbb, 0, fbb.CreateVector(keys), fbb.CreateVector(row), fbb.CreateVector(row)));
    job_state.emplace_back(MessageType::WriteRows, fbb.Release());
  }
  for (auto& [t, payload] : job_state) {
    INFO(net::MessageTypeName(type(t)));
    auto r = anonymous->CallSync(type(t), std::move(payload));
    CHECK(r.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(r.status().message(),
               Catch::Contains(net::MessageTypeName(type(t)) + " from") && Catch::Contains("FLEETPS_AUTH_SECRET_FILE"));
  }
  std::this_thread::sleep_for(1500ms);  // the pserver's trainer sweep runs every 500 ms
  REQUIRE(process.running());
  // The data path stays open on loopback (auth: auto): an anonymous Ping is answered.
  flatbuffers::FlatBufferBuilder ping;
  ping.Finish(wire::CreatePingRequest(ping));
  CHECK(anonymous->CallSync(type(MessageType::Ping), ping.Release()).ok());

  // A member may save, inside the root only.
  auto key = net::AuthKey::Load(secret);
  REQUIRE(key.ok());
  auto member = connect(*key);
  CHECK(member->CallSync(type(MessageType::Heartbeat), heartbeat(false)).ok());
  CHECK(member->CallSync(type(MessageType::Save), save("ckpt")).ok());
  CHECK(std::filesystem::exists(dir + "/root/ckpt/v1.tmp"));  // phase 1 of a save
  for (const std::string& bad : {dir + "/outside", std::string("../outside"), dir + "/root/ckpt/../../outside",
                                 std::string("/etc/fleetps-hostile")}) {
    INFO(bad);
    auto refused = member->CallSync(type(MessageType::Save), save(bad));
    CHECK_FALSE(refused.ok());
    CHECK_THAT(refused.status().message(), Catch::Contains("checkpoint root"));
    CHECK_FALSE(member->CallSync(type(MessageType::Load), load(bad)).ok());
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/outside"));
  CHECK(member->CallSync(type(MessageType::Stop), stop()).ok());
  CHECK(process.Wait(30s) == 0);
  anonymous->Close();
  member->Close();
}

}  // namespace
}  // namespace fleetps
