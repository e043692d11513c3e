// Shared-secret authentication: the proofs (against HMAC-SHA256 values computed
// independently with `openssl dgst -sha256 -hmac`), the secret-file checks, and the
// exchange as RpcServer answers it to a raw loopback peer: a right proof opens the
// connection, a wrong one closes it, and with auth_required nothing is served before it.
#include <sys/stat.h>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/net/auth.h"
#include "common/net/frame.h"
#include "common/net/rpc_client.h"
#include "common/net/rpc_server.h"
#include "schemas/ps_generated.h"

namespace fleetps::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using wire::MessageType;

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

TEST_CASE("AuthKey proofs are HMAC-SHA256 over the version, the role and both nonces") {
  const AuthKey jefe("Jefe");
  // printf 'fleetps-auth-v1/server/what do ya want for nothing?' | openssl dgst -sha256 -hmac Jefe
  CHECK(Hex(jefe.Proof("server", "what do ya want ", "for nothing?")) ==
        "569b6976e51019529595af87637dbd47d0a283a968c3d1fd640ca2e092940466");
  const std::string a = RandomNonce(), b = RandomNonce();
  CHECK(a.size() == kAuthNonceBytes);
  CHECK(a != b);
  const std::string proof = jefe.Proof("client", a, b);
  CHECK(jefe.Verify(proof, "client", a, b));
  CHECK_FALSE(jefe.Verify(proof, "server", a, b));  // a client proof is no server proof
  CHECK_FALSE(jefe.Verify(proof, "client", b, a));
  CHECK_FALSE(AuthKey("Jeff").Verify(proof, "client", a, b));
  CHECK_FALSE(jefe.Verify(proof.substr(0, 31), "client", a, b));
}

TEST_CASE("Secret files must exist, hold enough bytes and be private") {
  const std::string dir = std::filesystem::temp_directory_path() / ("fleetps-auth-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/secret";
  CHECK_THAT(AuthKey::Load(path).status().message(), Catch::Contains("does not exist"));
  std::ofstream(path) << "  0123456789abcdef0123\n";
  ::chmod(path.c_str(), 0644);
  CHECK_THAT(AuthKey::Load(path).status().message(), Catch::Contains("chmod 600"));
  ::chmod(path.c_str(), 0600);
  auto key = AuthKey::Load(path);
  REQUIRE(key.ok());
  CHECK((*key)->Proof("x", "a", "b") == AuthKey("0123456789abcdef0123").Proof("x", "a", "b"));  // trimmed
  std::ofstream(path) << "short\n";
  CHECK_THAT(AuthKey::Load(path).status().message(), Catch::Contains("at least 16"));
  std::filesystem::remove_all(dir);
}

struct Peer {
  asio::io_context io;
  tcp::socket socket{io};
  explicit Peer(uint16_t port) { socket.connect({asio::ip::make_address("127.0.0.1"), port}); }
  void Send(MessageType type, flatbuffers::FlatBufferBuilder& fbb) {
    uint8_t h[kFrameHeaderSize];
    EncodeFrameHeader(static_cast<uint16_t>(type), 1, fbb.GetSize(), h);
    asio::write(socket, asio::buffer(h));
    asio::write(socket, asio::buffer(fbb.GetBufferPointer(), fbb.GetSize()));
  }
  // The reply payload; `error` set for an ErrorReply; closed when the server hung up.
  struct Frame {
    std::vector<uint8_t> payload;
    Status error;
    bool closed = false;
  };
  Frame Read() {
    Frame f;
    uint8_t h[kFrameHeaderSize];
    boost::system::error_code ec;
    asio::read(socket, asio::buffer(h), ec);
    if (ec) {
      f.closed = true;
      return f;
    }
    wire::FrameHeader header;
    REQUIRE(DecodeFrameHeader(h, 1u << 20, "server", &header).ok());
    f.payload.resize(header.payload_length());
    asio::read(socket, asio::buffer(f.payload), ec);
    if (header.type() == static_cast<uint16_t>(MessageType::ErrorReply)) {
      f.error = ParseErrorReply(f.payload.data(), f.payload.size(), "server");
    }
    return f;
  }
  Frame Ping() {
    flatbuffers::FlatBufferBuilder fbb(32);
    fbb.Finish(wire::CreatePingRequest(fbb));
    Send(MessageType::Ping, fbb);
    return Read();
  }
  // Runs the exchange with `key`; returns the AuthProve answer. Checks the server's proof.
  Frame Authenticate(const AuthKey& key, const AuthKey& server_key) {
    const std::string client_nonce = RandomNonce();
    flatbuffers::FlatBufferBuilder hello(128);
    hello.Finish(wire::CreateAuthHelloRequest(
        hello, hello.CreateVector(reinterpret_cast<const uint8_t*>(client_nonce.data()), client_nonce.size())));
    Send(MessageType::AuthHello, hello);
    Frame f = Read();
    REQUIRE(f.error.ok());
    auto* reply = flatbuffers::GetRoot<wire::AuthHelloReply>(f.payload.data());
    const std::string server_nonce(reinterpret_cast<const char*>(reply->server_nonce()->data()),
                                   reply->server_nonce()->size());
    const std::string server_proof(reinterpret_cast<const char*>(reply->server_proof()->data()),
                                   reply->server_proof()->size());
    CHECK(server_key.Verify(server_proof, "server", client_nonce, server_nonce));
    const std::string proof = key.Proof("client", server_nonce, client_nonce);
    flatbuffers::FlatBufferBuilder prove(128);
    prove.Finish(wire::CreateAuthProveRequest(
        prove, prove.CreateVector(reinterpret_cast<const uint8_t*>(proof.data()), proof.size())));
    Send(MessageType::AuthProve, prove);
    return Read();
  }
};

TEST_CASE("RpcServer serves only authenticated peers when authentication is required") {
  IoThreads io(1);
  auto key = std::make_shared<const AuthKey>("the-cluster-secret-0123");
  RpcServerOptions o;
  o.host = "127.0.0.1";
  o.auth_key = key;
  o.auth_required = true;
  std::atomic<int> authenticated_requests{0};
  RpcServer server(io, o, [&](Request req, Responder resp) {
    authenticated_requests += req.authenticated;
    flatbuffers::FlatBufferBuilder fbb(32);
    fbb.Finish(wire::CreatePingReply(fbb));
    resp.Send(ReplyType(MessageType::Ping), fbb.Release());
  });
  REQUIRE(server.Start().ok());

  Peer anonymous(server.port());
  auto refused = anonymous.Ping();
  CHECK(refused.error.code() == StatusCode::kPermissionDenied);
  CHECK(anonymous.Read().closed);

  Peer impostor(server.port());
  auto wrong = impostor.Authenticate(AuthKey("not-the-cluster-secret"), *key);
  CHECK(wrong.error.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(wrong.error.message(), Catch::Contains("authentication failed"));
  CHECK(impostor.Read().closed);

  Peer member(server.port());
  auto ok = member.Authenticate(*key, *key);
  CHECK(ok.error.ok());
  CHECK(member.Ping().error.ok());
  CHECK(member.Ping().error.ok());
  CHECK(authenticated_requests == 2);
  server.Stop();
  io.Stop();
}

TEST_CASE("RpcClient runs the exchange on every connection and refuses servers without the secret") {
  IoThreads io(1);
  auto key = std::make_shared<const AuthKey>("the-cluster-secret-0123");
  RpcServerOptions o;
  o.host = "127.0.0.1";
  o.auth_key = key;
  o.auth_required = true;
  std::atomic<int> served{0};
  RpcServer server(io, o, [&](Request req, Responder resp) {
    served += req.authenticated;
    flatbuffers::FlatBufferBuilder fbb(32);
    fbb.Finish(wire::CreatePingReply(fbb));
    resp.Send(ReplyType(MessageType::Ping), fbb.Release());
  });
  REQUIRE(server.Start().ok());
  const auto ping = [] {
    flatbuffers::FlatBufferBuilder fbb(32);
    fbb.Finish(wire::CreatePingRequest(fbb));
    return fbb.Release();
  };
  const Endpoint ep{"127.0.0.1", server.port()};

  RpcClientOptions with_key;
  with_key.auth_key = key;
  with_key.connect_timeout = std::chrono::milliseconds(3000);
  RpcClient member(io, ep, with_key);
  REQUIRE(member.Connect().ok());
  for (int i = 0; i < 3; ++i) REQUIRE(member.CallSync(static_cast<uint16_t>(MessageType::Ping), ping()).ok());
  CHECK(served == 3);

  RpcClientOptions wrong = with_key;
  wrong.auth_key = std::make_shared<const AuthKey>("some-other-secret-4567");
  RpcClient impostor(io, ep, wrong);
  const Status refused = impostor.Connect();
  CHECK(refused.IsPermissionDenied());
  CHECK_THAT(refused.message(), Catch::Contains("could not prove"));  // the client checks the server first

  RpcClientOptions no_key;
  no_key.connect_timeout = std::chrono::milliseconds(3000);
  RpcClient anonymous(io, ep, no_key);
  REQUIRE(anonymous.Connect().ok());  // TCP only; the first request is refused
  auto r = anonymous.CallSync(static_cast<uint16_t>(MessageType::Ping), ping());
  CHECK(r.status().IsPermissionDenied());
  CHECK(served == 3);

  // A server without a secret cannot answer the exchange: the client does not trust it.
  RpcServerOptions open;
  open.host = "127.0.0.1";
  RpcServer plain(io, open, [](Request, Responder resp) { resp.SendError(Status::Internal("unreachable")); });
  REQUIRE(plain.Start().ok());
  RpcClient careful(io, Endpoint{"127.0.0.1", plain.port()}, with_key);
  CHECK_FALSE(careful.Connect().ok());
  member.Close();
  impostor.Close();
  anonymous.Close();
  careful.Close();
  plain.Stop();
  server.Stop();
  io.Stop();
}

}  // namespace
}  // namespace fleetps::net
