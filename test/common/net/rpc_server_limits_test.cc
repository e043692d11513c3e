// RpcServer bounds against peers that misbehave on purpose: handlers that throw, request
// bytes over the in-flight budget, a peer that never reads its replies, idle and
// half-sent frames, too many connections, requests after StopAccepting. Every peer is a
// raw loopback socket, so nothing in the client library hides what the server does.
#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "common/net/frame.h"
#include "common/net/rpc_client.h"
#include "common/net/rpc_server.h"
#include "schemas/ps_generated.h"

namespace fleetps::net {
namespace {

using wire::MessageType;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// A blocking loopback peer speaking raw frames.
struct FramePeer {
  asio::io_context io;
  tcp::socket socket{io};

  explicit FramePeer(uint16_t port) { socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port)); }

  void Send(uint16_t type, uint64_t id, const std::vector<uint8_t>& payload) {
    uint8_t header[kFrameHeaderSize];
    EncodeFrameHeader(type, id, static_cast<uint32_t>(payload.size()), header);
    asio::write(socket, asio::buffer(header));
    if (!payload.empty()) asio::write(socket, asio::buffer(payload));
  }
  void SendPing(uint64_t id, size_t padding = 0) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreatePingRequest(fbb, static_cast<int>(id)));
    std::vector<uint8_t> payload(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    payload.resize(payload.size() + padding, 0);  // trailing bytes: still a valid buffer
    Send(static_cast<uint16_t>(MessageType::Ping), id, payload);
  }

  struct Frame {
    uint16_t type = 0;
    uint64_t id = 0;
    std::vector<uint8_t> payload;
    Status error;  // decoded when type is ErrorReply
  };
  // Reads one frame; an error status when the server closed the connection.
  StatusOr<Frame> Read() {
    uint8_t header[kFrameHeaderSize];
    boost::system::error_code ec;
    asio::read(socket, asio::buffer(header), ec);
    if (ec) return Status::Unavailable("closed: " + ec.message());
    wire::FrameHeader h;
    RETURN_IF_ERROR(DecodeFrameHeader(header, 1u << 30, "server", &h));
    Frame f;
    f.type = h.type();
    f.id = h.request_id();
    f.payload.resize(h.payload_length());
    asio::read(socket, asio::buffer(f.payload), ec);
    if (ec) return Status::Unavailable("closed mid-frame: " + ec.message());
    if (f.type == static_cast<uint16_t>(MessageType::ErrorReply)) {
      f.error = ParseErrorReply(f.payload.data(), f.payload.size(), "server");
    }
    return f;
  }
  // Read() that gives up after `timeout` (the server may never answer).
  StatusOr<Frame> ReadWithin(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      boost::system::error_code ec;
      if (socket.available(ec) >= kFrameHeaderSize) return Read();
      if (ec) return Status::Unavailable("closed: " + ec.message());
      std::this_thread::sleep_for(5ms);
    }
    return Status::TimedOut("no answer within " + std::to_string(timeout.count()) + " ms");
  }
  // True when the server closes the connection within `timeout`.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    socket.non_blocking(true);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    uint8_t byte;
    while (std::chrono::steady_clock::now() < deadline) {
      boost::system::error_code ec;
      socket.read_some(asio::buffer(&byte, 1), ec);
      if (ec == asio::error::would_block) {
        std::this_thread::sleep_for(5ms);
        continue;
      }
      if (ec) return true;  // eof / reset
    }
    return false;
  }
};

// A server whose handler is a test-supplied function; the replies it sends are Ping
// replies of `reply_bytes` padding.
struct TestServer {
  IoThreads io{2};
  RpcServer server;

  TestServer(RpcServerOptions options, RequestHandler handler) : server(io, std::move(options), std::move(handler)) {
    REQUIRE(server.Start().ok());
  }
  ~TestServer() {
    server.Stop();
    io.Stop();
  }
  uint16_t port() const { return server.port(); }
};

RpcServerOptions Limits() {
  RpcServerOptions o;
  o.host = "127.0.0.1";
  o.max_payload = 8u << 20;
  return o;
}

flatbuffers::DetachedBuffer PingReply(size_t padding) {
  flatbuffers::FlatBufferBuilder fbb(padding + 64);
  std::vector<uint8_t> pad(padding, 7);
  auto version = fbb.CreateString(reinterpret_cast<const char*>(pad.data()), pad.size());
  fbb.Finish(wire::CreatePingReply(fbb, 0, 1, 0, version));
  return fbb.Release();
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

TEST_CASE("A handler that throws gets an Internal reply and the connection keeps serving") {
  TestServer srv(Limits(), [](Request req, Responder resp) {
    if (req.request_id == 1) throw std::runtime_error("boom in handler");
    resp.Send(ReplyType(MessageType::Ping), PingReply(0));
  });
  FramePeer peer(srv.port());
  peer.SendPing(1);
  auto first = peer.Read();
  REQUIRE(first.ok());
  CHECK(first->error.code() == StatusCode::kInternal);
  CHECK_THAT(first->error.message(), Catch::Contains("boom in handler"));
  peer.SendPing(2);
  auto second = peer.Read();
  REQUIRE(second.ok());
  CHECK(second->type == ReplyType(MessageType::Ping));
  CHECK(second->id == 2);
}

TEST_CASE("Requests over the in-flight budget are answered Busy without being held") {
  RpcServerOptions o = Limits();
  o.max_inflight_bytes = 1u << 20;
  std::mutex mu;
  std::vector<Responder> held;
  TestServer srv(o, [&](Request req, Responder resp) {
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(resp));  // answered later by the test
  });
  FramePeer a(srv.port());
  a.SendPing(1, 700 * 1024);  // admitted and held: 700 KiB in flight
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return held.size() == 1;
  }));
  FramePeer b(srv.port());
  for (uint64_t id = 10; id < 20; ++id) b.SendPing(id, 700 * 1024);  // each would pass the budget
  for (uint64_t id = 10; id < 20; ++id) {
    auto f = b.Read();
    REQUIRE(f.ok());
    CHECK(f->id == id);
    CHECK(f->error.code() == StatusCode::kBusy);
  }
  CHECK(srv.server.in_flight_bytes() <= o.max_inflight_bytes);
  {
    std::lock_guard<std::mutex> lock(mu);
    REQUIRE(held.size() == 1);  // the refused payloads never reached the handler
    held[0].Send(ReplyType(MessageType::Ping), PingReply(0));
  }
  auto answered = a.Read();
  REQUIRE(answered.ok());
  CHECK(answered->id == 1);
  // Budget back: the same large request is admitted now.
  REQUIRE(WaitFor([&] { return srv.server.in_flight_bytes() == 0; }));
  b.SendPing(30, 700 * 1024);
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return held.size() == 2;
  }));
  std::lock_guard<std::mutex> lock(mu);
  held[1].Send(ReplyType(MessageType::Ping), PingReply(0));
  held.clear();  // responders hold their connection: release it before the server goes
}

TEST_CASE("Released request bytes do not count: long waits cannot lock others out") {
  RpcServerOptions o = Limits();
  o.max_inflight_bytes = 1u << 20;
  std::mutex mu;
  std::vector<Responder> held;
  TestServer srv(o, [&](Request req, Responder resp) {
    resp.ReleaseRequestBytes();  // like a barrier: copied what it needs, waits long
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(resp));
  });
  FramePeer peer(srv.port());
  for (uint64_t id = 1; id <= 8; ++id) peer.SendPing(id, 400 * 1024);  // 3.2 MiB in total
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return held.size() == 8;
  }));
  CHECK(srv.server.in_flight() == 8);
  CHECK(WaitFor([&] { return srv.server.in_flight_bytes() == 0; }));
  std::lock_guard<std::mutex> lock(mu);
  for (auto& r : held) r.Send(ReplyType(MessageType::Ping), PingReply(0));
  held.clear();
}

TEST_CASE("A peer that never reads its replies stops being read; others are served") {
  RpcServerOptions o = Limits();
  o.max_write_queue_bytes = 2u << 20;
  o.read_timeout = 0ms;  // keep the stalled connection open for the measurement
  std::atomic<int> handled{0};
  TestServer srv(o, [&](Request req, Responder resp) {
    ++handled;
    resp.Send(ReplyType(MessageType::Ping), PingReply(512 * 1024));  // 512 KiB per tiny request
  });
  FramePeer hog(srv.port());
  // Shrink the hog's receive buffer so the kernel cannot absorb the replies for it.
  hog.socket.set_option(asio::socket_base::receive_buffer_size(4096));
  constexpr int kRequests = 400;  // 200 MiB of replies if all were produced
  std::thread sender([&] {
    boost::system::error_code ec;
    for (int i = 0; i < kRequests && !ec; ++i) {
      uint8_t header[kFrameHeaderSize];
      flatbuffers::FlatBufferBuilder fbb(64);
      fbb.Finish(wire::CreatePingRequest(fbb, i));
      EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), i, fbb.GetSize(), header);
      asio::write(hog.socket, asio::buffer(header), ec);
      if (!ec) asio::write(hog.socket, asio::buffer(fbb.GetBufferPointer(), fbb.GetSize()), ec);
    }
  });
  std::this_thread::sleep_for(1500ms);
  const int served_to_hog = handled.load();
  CHECK(served_to_hog < kRequests);
  // Unwritten replies: the per-connection bound, plus one reply and the socket buffers.
  CHECK(srv.server.in_flight_bytes() <= o.max_write_queue_bytes + (1u << 20));
  // Another peer is still served.
  FramePeer polite(srv.port());
  polite.SendPing(7);
  auto f = polite.Read();
  REQUIRE(f.ok());
  CHECK(f->id == 7);
  hog.socket.close();
  sender.join();
  CHECK(WaitFor([&] { return srv.server.in_flight_bytes() == 0; }));
}

TEST_CASE("A reply the peer does not take within read_timeout closes the connection") {
  RpcServerOptions o = Limits();
  o.read_timeout = 300ms;
  TestServer srv(o, [&](Request req, Responder resp) { resp.Send(ReplyType(MessageType::Ping), PingReply(4u << 20)); });
  FramePeer hog(srv.port());
  hog.socket.set_option(asio::socket_base::receive_buffer_size(4096));
  hog.SendPing(1);
  CHECK(WaitFor([&] { return srv.server.connections() == 0; }, 5000ms));
  CHECK(WaitFor([&] { return srv.server.in_flight_bytes() == 0; }));
}

TEST_CASE("Idle connections and half-sent frames are closed; a waiting request is not idle") {
  RpcServerOptions o = Limits();
  o.idle_timeout = 300ms;
  o.read_timeout = 300ms;
  std::mutex mu;
  std::vector<Responder> held;
  TestServer srv(o, [&](Request req, Responder resp) {
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(resp));
  });
  FramePeer idle(srv.port());
  CHECK(idle.ClosedWithin(3000ms));

  FramePeer half(srv.port());
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), 1, 1000, header);
  asio::write(half.socket, asio::buffer(header));
  asio::write(half.socket, asio::buffer(header, 10));  // 10 of the 1000 payload bytes
  CHECK(half.ClosedWithin(3000ms));

  FramePeer waiting(srv.port());
  waiting.SendPing(5);
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return held.size() == 1;
  }));
  std::this_thread::sleep_for(900ms);  // three idle timeouts while its request waits
  {
    std::lock_guard<std::mutex> lock(mu);
    held[0].Send(ReplyType(MessageType::Ping), PingReply(0));
  }
  auto f = waiting.Read();
  REQUIRE(f.ok());
  CHECK(f->id == 5);
  CHECK(waiting.ClosedWithin(3000ms));  // idle again afterwards
  std::lock_guard<std::mutex> lock(mu);
  held.clear();
}

TEST_CASE("Connections beyond max_connections are refused with Unavailable") {
  RpcServerOptions o = Limits();
  o.max_connections = 2;
  TestServer srv(o, [](Request req, Responder resp) { resp.Send(ReplyType(MessageType::Ping), PingReply(0)); });
  FramePeer a(srv.port()), b(srv.port());
  a.SendPing(1);
  b.SendPing(2);
  REQUIRE(a.Read().ok());
  REQUIRE(b.Read().ok());
  FramePeer c(srv.port());
  auto refused = c.Read();
  REQUIRE(refused.ok());
  CHECK(refused->error.code() == StatusCode::kUnavailable);
  CHECK_THAT(refused->error.message(), Catch::Contains("max_connections"));
  CHECK(c.ClosedWithin(2000ms));
  // The admitted connections keep working; after one leaves, a new one is accepted.
  a.SendPing(3);
  REQUIRE(a.Read().ok());
  b.socket.close();
  REQUIRE(WaitFor([&] { return srv.server.connections() == 1; }));
  FramePeer d(srv.port());
  d.SendPing(4);
  auto f = d.Read();
  REQUIRE(f.ok());
  CHECK(f->error.ok());
}

TEST_CASE("After StopAccepting, open connections get Unavailable for new requests") {
  std::mutex mu;
  std::vector<Responder> held;
  TestServer srv(Limits(), [&](Request req, Responder resp) {
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(resp));
  });
  FramePeer peer(srv.port());
  peer.SendPing(1);
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return held.size() == 1;
  }));
  srv.server.StopAccepting();
  peer.SendPing(2, 1000);
  auto refused = peer.Read();
  REQUIRE(refused.ok());
  CHECK(refused->id == 2);
  CHECK(refused->error.code() == StatusCode::kUnavailable);
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(held.size() == 1);                                   // never reached the handler
    held[0].Send(ReplyType(MessageType::Ping), PingReply(0));  // in-flight work finishes
  }
  auto f = peer.Read();
  REQUIRE(f.ok());
  CHECK(f->id == 1);
  CHECK(f->error.ok());
  CHECK(srv.server.Drain(1000ms));
  std::lock_guard<std::mutex> lock(mu);
  held.clear();
}

// Point 3 of "Hardening, round 2": where peers must authenticate, what an unauthenticated
// peer may make the server hold is bounded by the handshake, not by max_payload.
RpcServerOptions AuthRequired(std::shared_ptr<const AuthKey> key) {
  RpcServerOptions o = Limits();
  o.auth_key = std::move(key);
  o.auth_required = true;
  o.max_inflight_bytes = 16u << 20;  // two announced 8 MiB frames would fill it
  return o;
}

void AnswerPing(Request, Responder resp) { resp.Send(ReplyType(MessageType::Ping), PingReply(0)); }

TEST_CASE("Before authenticating, only handshake frames are accepted: others are refused from their header") {
  auto key = std::make_shared<const AuthKey>("limits test secret, long enough");
  TestServer srv(AuthRequired(key), AnswerPing);
  std::vector<std::unique_ptr<FramePeer>> peers;
  for (int i = 0; i < 4; ++i) {  // 4 x 8 MiB announced, payloads never sent
    peers.push_back(std::make_unique<FramePeer>(srv.port()));
    uint8_t header[kFrameHeaderSize];
    EncodeFrameHeader(static_cast<uint16_t>(MessageType::PushSparse), 9, 8u << 20, header);
    asio::write(peers.back()->socket, asio::buffer(header));
  }
  for (auto& p : peers) {
    auto f = p->ReadWithin(3000ms);
    INFO(f.status().ToString());
    REQUIRE(f.ok());  // answered at once, not after a payload that never comes
    CHECK(f->id == 9);
    CHECK(f->error.code() == StatusCode::kPermissionDenied);
    CHECK_THAT(f->error.message(),
               Catch::Contains("PushSparse before authenticating") && Catch::Contains("FLEETPS_AUTH_SECRET_FILE"));
    CHECK(p->ClosedWithin(2000ms));
  }
  CHECK(WaitFor([&] { return srv.server.in_flight_bytes() == 0; }));
  // A handshake frame that announces more than a handshake holds is refused the same way.
  FramePeer big(srv.port());
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader(static_cast<uint16_t>(MessageType::AuthHello), 3, kMaxHandshakePayload + 1, header);
  asio::write(big.socket, asio::buffer(header));
  auto f = big.ReadWithin(3000ms);
  REQUIRE(f.ok());
  CHECK(f->error.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(f->error.message(), Catch::Contains("handshake frames hold at most 1024"));
  CHECK(big.ClosedWithin(2000ms));
  // A client with the secret is served.
  IoThreads io(1);
  RpcClientOptions co;
  co.auth_key = key;
  co.request_timeout = 3000ms;
  RpcClient client(io, Endpoint{"127.0.0.1", srv.port()}, co);
  REQUIRE(client.Connect().ok());
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreatePingRequest(fbb));
  CHECK(client.CallSync(static_cast<uint16_t>(MessageType::Ping), fbb.Release()).ok());
  client.Close();
}

TEST_CASE("A peer that must authenticate and does not within auth_timeout is closed; one that did stays") {
  auto key = std::make_shared<const AuthKey>("limits test secret, long enough");
  RpcServerOptions o = AuthRequired(key);
  o.auth_timeout = 300ms;  // idle_timeout stays 600 s
  TestServer srv(o, AnswerPing);
  FramePeer silent(srv.port());
  CHECK(silent.ClosedWithin(3000ms));
  FramePeer hello_only(srv.port());  // starts the exchange, never proves
  flatbuffers::FlatBufferBuilder fbb(128);
  const std::string nonce = RandomNonce();
  fbb.Finish(wire::CreateAuthHelloRequest(
      fbb, fbb.CreateVector(reinterpret_cast<const uint8_t*>(nonce.data()), nonce.size())));
  hello_only.Send(static_cast<uint16_t>(MessageType::AuthHello), 1,
                  std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()));
  auto hello = hello_only.ReadWithin(3000ms);
  REQUIRE(hello.ok());
  CHECK(hello->type == ReplyType(MessageType::AuthHello));
  CHECK(hello_only.ClosedWithin(3000ms));
  // An authenticated connection outlives auth_timeout.
  IoThreads io(1);
  RpcClientOptions co;
  co.auth_key = key;
  RpcClient client(io, Endpoint{"127.0.0.1", srv.port()}, co);
  REQUIRE(client.Connect().ok());
  std::this_thread::sleep_for(600ms);
  flatbuffers::FlatBufferBuilder ping(64);
  ping.Finish(wire::CreatePingRequest(ping));
  CHECK(client.CallSync(static_cast<uint16_t>(MessageType::Ping), ping.Release()).ok());
  CHECK(client.counters().reconnects == 0);
  client.Close();
}

TEST_CASE("With a secret but auth not required, unauthenticated peers keep the data path; handshakes stay small") {
  RpcServerOptions o = Limits();
  o.auth_key = std::make_shared<const AuthKey>("limits test secret, long enough");
  std::atomic<bool> configured{false}, authenticated{true};
  TestServer srv(o, [&](Request req, Responder resp) {
    configured = req.auth_configured;
    authenticated = req.authenticated;
    resp.Send(ReplyType(MessageType::Ping), PingReply(0));
  });
  FramePeer peer(srv.port());
  peer.SendPing(4, 100000);  // a data-path frame far above the handshake bound
  auto f = peer.ReadWithin(3000ms);
  REQUIRE(f.ok());
  CHECK(f->id == 4);
  CHECK(f->error.ok());
  CHECK(configured);  // the handler can tell that this peer could have authenticated
  CHECK_FALSE(authenticated);
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader(static_cast<uint16_t>(MessageType::AuthProve), 5, 4u << 20, header);
  asio::write(peer.socket, asio::buffer(header));
  auto refused = peer.ReadWithin(3000ms);
  REQUIRE(refused.ok());
  CHECK(refused->error.code() == StatusCode::kInvalidArgument);
  CHECK(peer.ClosedWithin(2000ms));
}

TEST_CASE("Anonymous frames filling the in-flight budget do not keep a client from authenticating") {
  RpcServerOptions o = Limits();
  o.auth_key = std::make_shared<const AuthKey>("limits test secret, long enough");
  o.max_inflight_bytes = 1u << 20;
  TestServer srv(o, AnswerPing);
  FramePeer hog(srv.port());  // announces the whole budget and never sends it
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), 1, 1u << 20, header);
  asio::write(hog.socket, asio::buffer(header));
  REQUIRE(WaitFor([&] { return srv.server.in_flight_bytes() >= (1u << 20); }));
  IoThreads io(1);
  RpcClientOptions co;
  co.auth_key = o.auth_key;
  co.connect_timeout = 3000ms;
  RpcClient client(io, Endpoint{"127.0.0.1", srv.port()}, co);
  const Status st = client.Connect();
  INFO(st.ToString());
  CHECK(st.ok());  // its AuthHello and AuthProve are not answered Busy
  client.Close();
}

TEST_CASE("A frame header that stops half-way is bounded by read_timeout, not idle_timeout") {
  RpcServerOptions o = Limits();
  o.read_timeout = 300ms;  // idle_timeout stays 600 s
  TestServer srv(o, AnswerPing);
  FramePeer half(srv.port());
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), 1, 16, header);
  asio::write(half.socket, asio::buffer(header, 10));
  CHECK(half.ClosedWithin(3000ms));
  // A header that arrives in pieces within read_timeout is served.
  FramePeer slow(srv.port());
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreatePingRequest(fbb));
  EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), 2, fbb.GetSize(), header);
  asio::write(slow.socket, asio::buffer(header, 5));
  std::this_thread::sleep_for(50ms);
  asio::write(slow.socket, asio::buffer(header + 5, kFrameHeaderSize - 5));
  asio::write(slow.socket, asio::buffer(fbb.GetBufferPointer(), fbb.GetSize()));
  auto f = slow.ReadWithin(3000ms);
  REQUIRE(f.ok());
  CHECK(f->id == 2);
  CHECK(f->error.ok());
}

TEST_CASE("on_connection_closed is called once per connection, with the id its requests carried") {
  RpcServerOptions o = Limits();
  std::mutex mu;
  std::vector<uint64_t> closed, seen;
  o.on_connection_closed = [&](uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    closed.push_back(id);
  };
  TestServer srv(o, [&](Request req, Responder resp) {
    {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(req.connection_id);
    }
    resp.Send(ReplyType(MessageType::Ping), PingReply(0));
  });
  {
    FramePeer a(srv.port()), b(srv.port());
    a.SendPing(1);
    b.SendPing(2);
    REQUIRE(a.Read().ok());
    REQUIRE(b.Read().ok());
  }
  REQUIRE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return closed.size() == 2;
  }));
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] != seen[1]);
  std::sort(seen.begin(), seen.end());
  std::sort(closed.begin(), closed.end());
  CHECK(seen == closed);
}

}  // namespace
}  // namespace fleetps::net
