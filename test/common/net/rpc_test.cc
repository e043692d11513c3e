// RpcServer/RpcClient over real loopback sockets: pipelining, out-of-order replies,
// timeouts, and a garbage-sending peer that must not disturb well-behaved clients.
#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/executor.h"
#include "common/net/frame.h"
#include "common/net/rpc_client.h"
#include "common/net/rpc_server.h"
#include "schemas/ps_generated.h"

namespace fleetps::net {
namespace {

using wire::MessageType;
namespace asio = boost::asio;

flatbuffers::DetachedBuffer Ping(int id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreatePingRequest(fbb, id));
  return fbb.Release();
}

// Echoes PingRequest.trainer_id as PingReply.server_index after a random delay on a
// worker pool, so replies leave in a different order than requests came.
struct EchoServer {
  IoThreads io{2};
  ExecutorPool workers{2};
  std::atomic<int> handled{0};
  RpcServer server;

  explicit EchoServer(uint32_t max_payload = 1 << 20)
      : server(io, RpcServerOptions{"127.0.0.1", 0, max_payload, 1ull << 30}, [this](Request req, Responder resp) {
          flatbuffers::Verifier v(req.data(), req.payload_size);
          if (req.type != static_cast<uint16_t>(MessageType::Ping) || !v.VerifyBuffer<wire::PingRequest>(nullptr)) {
            resp.SendError(Status::InvalidArgument("bad request"));
            return;
          }
          const int id = flatbuffers::GetRoot<wire::PingRequest>(req.data())->trainer_id();
          workers.Post(static_cast<size_t>(id), [this, id, resp] {
            if (id % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
            flatbuffers::FlatBufferBuilder fbb(64);
            fbb.Finish(wire::CreatePingReply(fbb, static_cast<uint32_t>(id)));
            ++handled;
            resp.Send(ReplyType(MessageType::Ping), fbb.Release());
          });
        }) {
    REQUIRE(server.Start().ok());
  }
  ~EchoServer() {
    server.Stop();
    workers.Stop();
    io.Stop();
  }
};

TEST_CASE("Pipelined calls are matched by request id in any order") {
  EchoServer echo;
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", echo.server.port()}, RpcClientOptions{});
  REQUIRE(client.Connect().ok());
  constexpr int kCalls = 2000;
  std::vector<std::promise<int>> results(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    client.Call(static_cast<uint16_t>(MessageType::Ping), Ping(i), [&results, i](StatusOr<Reply> r) {
      if (!r.ok()) return results[i].set_value(-1);
      results[i].set_value(static_cast<int>(flatbuffers::GetRoot<wire::PingReply>(r->data())->server_index()));
    });
  }
  for (int i = 0; i < kCalls; ++i) REQUIRE(results[i].get_future().get() == i);
  CHECK(echo.handled == kCalls);
  client.Close();
}

TEST_CASE("Payloads are read into the memory payload_allocator gives, which the request releases") {
  std::mutex mu;
  std::set<const uint8_t*> given;  // guarded by mu
  std::atomic<int> asked{0}, freed{0}, served_from_given{0};
  RpcServerOptions options{"127.0.0.1", 0};
  options.payload_allocator = [&](uint32_t bytes) -> std::shared_ptr<uint8_t[]> {
    if (++asked % 2 == 0) return nullptr;  // every second request falls back to ordinary memory
    std::shared_ptr<uint8_t[]> p(new uint8_t[bytes], [&](uint8_t* q) {
      {
        std::lock_guard<std::mutex> lock(mu);
        given.erase(q);  // its address may serve an ordinary payload next
      }
      ++freed;
      delete[] q;
    });
    std::lock_guard<std::mutex> lock(mu);
    given.insert(p.get());
    return p;
  };
  IoThreads io(1);
  RpcServer server(io, options, [&](Request req, Responder resp) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (given.count(req.data()) > 0) ++served_from_given;
    }
    flatbuffers::Verifier v(req.data(), req.payload_size);
    if (!v.VerifyBuffer<wire::PingRequest>(nullptr)) return resp.SendError(Status::InvalidArgument("bad request"));
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreatePingReply(fbb, flatbuffers::GetRoot<wire::PingRequest>(req.data())->trainer_id()));
    resp.Send(ReplyType(MessageType::Ping), fbb.Release());
  });
  REQUIRE(server.Start().ok());
  {
    IoThreads client_io(1);
    RpcClient client(client_io, Endpoint{"127.0.0.1", server.port()}, RpcClientOptions{});
    REQUIRE(client.Connect().ok());
    for (int i = 0; i < 10; ++i) {
      auto r = client.CallSync(static_cast<uint16_t>(MessageType::Ping), Ping(100 + i));
      REQUIRE(r.ok());
      CHECK(flatbuffers::GetRoot<wire::PingReply>(r->data())->server_index() == static_cast<uint32_t>(100 + i));
    }
    client.Close();
  }
  server.Stop();
  io.Stop();
  CHECK(asked == 10);
  CHECK(served_from_given == 5);
  CHECK(freed == 5);
}

TEST_CASE("Errors from the handler arrive as Status with the server named") {
  EchoServer echo;
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", echo.server.port()}, RpcClientOptions{});
  REQUIRE(client.Connect().ok());
  auto r = client.CallSync(static_cast<uint16_t>(MessageType::PullSparse), Ping(1));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsInvalidArgument());
  CHECK(r.status().message().find("127.0.0.1:" + std::to_string(echo.server.port())) != std::string::npos);
}

TEST_CASE("Connect to a closed port fails with Unavailable naming the endpoint") {
  IoThreads io(1);
  RpcClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(200);
  o.initial_backoff = std::chrono::milliseconds(20);
  RpcClient client(io, Endpoint{"127.0.0.1", 1}, o);
  Status st = client.Connect();
  CHECK(st.IsUnavailable());
  CHECK(st.message().find("127.0.0.1:1") != std::string::npos);
  auto r = client.CallSync(static_cast<uint16_t>(MessageType::Ping), Ping(1));
  CHECK(r.status().IsUnavailable());
}

// Blocking raw socket helpers for misbehaving peers.
struct RawPeer {
  asio::io_context io;
  asio::ip::tcp::socket socket{io};
  explicit RawPeer(uint16_t port) { socket.connect({asio::ip::make_address("127.0.0.1"), port}); }
  void Write(const void* data, size_t n) { asio::write(socket, asio::buffer(data, n)); }
  // Reads one frame; returns its header and payload.
  std::pair<wire::FrameHeader, std::vector<uint8_t>> ReadFrame() {
    uint8_t h[kFrameHeaderSize];
    asio::read(socket, asio::buffer(h));
    wire::FrameHeader header;
    REQUIRE(DecodeFrameHeader(h, 1 << 20, "server", &header).ok());
    std::vector<uint8_t> payload(header.payload_length());
    asio::read(socket, asio::buffer(payload));
    return {header, payload};
  }
  bool ClosedByPeer() {
    uint8_t b;
    boost::system::error_code ec;
    socket.read_some(asio::buffer(&b, 1), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset;
  }
};

TEST_CASE("A frame arriving one byte at a time is served") {
  EchoServer echo;
  RawPeer peer(echo.server.port());
  auto payload = Ping(42);
  std::vector<uint8_t> frame(kFrameHeaderSize + payload.size());
  EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), 9, static_cast<uint32_t>(payload.size()), frame.data());
  std::memcpy(frame.data() + kFrameHeaderSize, payload.data(), payload.size());
  for (uint8_t b : frame) peer.Write(&b, 1);
  auto [header, body] = peer.ReadFrame();
  CHECK(header.request_id() == 9);
  CHECK(header.type() == ReplyType(MessageType::Ping));
  CHECK(flatbuffers::GetRoot<wire::PingReply>(body.data())->server_index() == 42);
}

TEST_CASE("Garbage, bad versions, oversize and truncated frames close only that connection") {
  EchoServer echo(/*max_payload=*/4096);
  IoThreads io(1);
  RpcClient good(io, Endpoint{"127.0.0.1", echo.server.port()}, RpcClientOptions{});
  REQUIRE(good.Connect().ok());

  std::atomic<bool> stop{false};
  std::atomic<int> good_ok{0}, good_bad{0};
  std::thread traffic([&] {
    int i = 0;
    while (!stop) {
      auto r = good.CallSync(static_cast<uint16_t>(MessageType::Ping), Ping(i));
      if (r.ok() && flatbuffers::GetRoot<wire::PingReply>(r->data())->server_index() == static_cast<uint32_t>(i)) {
        ++good_ok;
      } else {
        ++good_bad;
      }
      ++i;
    }
  });

  {  // random garbage: answered with an ErrorReply, then closed
    RawPeer peer(echo.server.port());
    std::mt19937 rng(3);
    std::vector<uint8_t> junk(100);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    peer.Write(junk.data(), junk.size());
    auto [header, body] = peer.ReadFrame();
    CHECK(header.type() == static_cast<uint16_t>(MessageType::ErrorReply));
    Status st = ParseErrorReply(body.data(), body.size(), "server");
    CHECK(st.message().find("magic") != std::string::npos);
    CHECK(peer.ClosedByPeer());
  }
  {  // wrong version
    RawPeer peer(echo.server.port());
    uint8_t h[kFrameHeaderSize];
    EncodeFrameHeader(1, 5, 0, h);
    h[4] = 7;
    peer.Write(h, sizeof(h));
    auto [header, body] = peer.ReadFrame();
    CHECK(ParseErrorReply(body.data(), body.size(), "s").message().find("version 7") != std::string::npos);
    CHECK(peer.ClosedByPeer());
  }
  {  // oversize announcement
    RawPeer peer(echo.server.port());
    uint8_t h[kFrameHeaderSize];
    EncodeFrameHeader(1, 5, 1 << 30, h);
    peer.Write(h, sizeof(h));
    auto [header, body] = peer.ReadFrame();
    CHECK(ParseErrorReply(body.data(), body.size(), "s").message().find("limit") != std::string::npos);
  }
  {  // a verified-garbage payload inside a valid frame: error reply, connection stays
    RawPeer peer(echo.server.port());
    uint8_t frame[kFrameHeaderSize + 16] = {};
    EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), 77, 16, frame);
    std::memset(frame + kFrameHeaderSize, 0xff, 16);
    peer.Write(frame, sizeof(frame));
    auto [header, body] = peer.ReadFrame();
    CHECK(header.request_id() == 77);
    CHECK(header.type() == static_cast<uint16_t>(MessageType::ErrorReply));
    // Still usable: a valid request on the same connection is answered.
    auto payload = Ping(5);
    std::vector<uint8_t> ok(kFrameHeaderSize + payload.size());
    EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), 78, static_cast<uint32_t>(payload.size()), ok.data());
    std::memcpy(ok.data() + kFrameHeaderSize, payload.data(), payload.size());
    peer.Write(ok.data(), ok.size());
    auto [h2, b2] = peer.ReadFrame();
    CHECK(h2.request_id() == 78);
    CHECK(flatbuffers::GetRoot<wire::PingReply>(b2.data())->server_index() == 5);
  }
  {  // truncated frame then disconnect
    RawPeer peer(echo.server.port());
    uint8_t h[kFrameHeaderSize];
    EncodeFrameHeader(static_cast<uint16_t>(MessageType::Ping), 5, 100, h);
    peer.Write(h, sizeof(h));
    peer.Write(h, 10);
    peer.socket.close();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop = true;
  traffic.join();
  CHECK(good_ok > 0);
  CHECK(good_bad == 0);
}

TEST_CASE("Requests time out when the server never answers") {
  IoThreads sio(1);
  std::vector<Responder> parked;
  std::mutex mu;
  RpcServer server(sio, RpcServerOptions{"127.0.0.1", 0}, [&](Request, Responder r) {
    std::lock_guard<std::mutex> lock(mu);
    parked.push_back(r);  // never answered until the test ends
  });
  REQUIRE(server.Start().ok());
  IoThreads io(1);
  RpcClientOptions o;
  o.request_timeout = std::chrono::milliseconds(100);
  RpcClient client(io, Endpoint{"127.0.0.1", server.port()}, o);
  REQUIRE(client.Connect().ok());
  auto r = client.CallSync(static_cast<uint16_t>(MessageType::Ping), Ping(1));
  CHECK(r.status().IsTimedOut());
  CHECK(client.pending() == 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    parked.clear();  // dropping the responders answers with Internal
  }
  CHECK(server.Drain(std::chrono::milliseconds(1000)));
  client.Close();
  server.Stop();
}

}  // namespace
}  // namespace fleetps::net
