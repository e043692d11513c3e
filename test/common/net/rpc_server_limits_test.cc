// RpcServer bounds against peers that misbehave on purpose: handlers that throw, request
// bytes over the in-flight budget, a peer that never reads its replies, idle and
// half-sent frames, too many connections, requests after StopAccepting. Every peer is a
// raw loopback socket, so nothing in the client library hides what the server does.
#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "common/net/frame.h"
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
  TestServer srv(o, [&](Request req, Responder resp) {
    resp.Send(ReplyType(MessageType::Ping), PingReply(4u << 20));
  });
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
    CHECK(held.size() == 1);  // never reached the handler
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

}  // namespace
}  // namespace fleetps::net
