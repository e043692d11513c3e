// TLS (common/net/tls.h) between RpcServer and RpcClient on loopback, with certificates
// made by the openssl tool: calls (and the shared-secret exchange) work inside TLS; a
// server certificate from another CA, or naming another address, is refused; plain and
// TLS peers do not talk to each other, and the TLS side says why; bad files are named.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/net/frame.h"
#include "common/net/rpc_client.h"
#include "common/net/rpc_server.h"
#include "schemas/ps_generated.h"
#include "test/support/process.h"
#include "test/support/tls_files.h"

namespace fleetps::net {
namespace {

using wire::MessageType;
using namespace std::chrono_literals;

flatbuffers::DetachedBuffer Ping(uint32_t id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreatePingRequest(fbb, id));
  return fbb.Release();
}

// Answers Ping with PingReply.server_index = the request's trainer_id.
struct PingServer {
  IoThreads io{1};
  RpcServer server;
  PingServer(std::shared_ptr<TlsContext> tls, std::shared_ptr<const AuthKey> key = nullptr)
      : server(io, Options(std::move(tls), std::move(key)), [](Request req, Responder resp) {
          flatbuffers::FlatBufferBuilder fbb(64);
          fbb.Finish(wire::CreatePingReply(fbb, flatbuffers::GetRoot<wire::PingRequest>(req.data())->trainer_id()));
          resp.Send(ReplyType(MessageType::Ping), fbb.Release());
        }) {}
  static RpcServerOptions Options(std::shared_ptr<TlsContext> tls, std::shared_ptr<const AuthKey> key) {
    RpcServerOptions o{"127.0.0.1", 0};
    o.tls = std::move(tls);
    o.auth_key = key;
    o.auth_required = key != nullptr;
    o.read_timeout = 2s;
    return o;
  }
  ~PingServer() {
    server.Stop();
    io.Stop();
  }
};

RpcClientOptions ClientOptions(std::shared_ptr<TlsContext> tls) {
  RpcClientOptions o;
  o.tls = std::move(tls);
  o.connect_timeout = 1500ms;
  o.request_timeout = 1500ms;
  return o;
}

StatusOr<uint32_t> CallPing(RpcClient& client, uint32_t id) {
  ASSIGN_OR_RETURN(auto reply, client.CallSync(static_cast<uint16_t>(MessageType::Ping), Ping(id)));
  return flatbuffers::GetRoot<wire::PingReply>(reply.data())->server_index();
}

std::shared_ptr<TlsContext> Load(const TlsFiles& files) {
  auto tls = TlsContext::Load(files);
  INFO(tls.status().ToString());
  REQUIRE(tls.ok());
  return *tls;
}

struct Certificates {
  std::string dir = fleetps::testing::MakeTempDir("tls_test");
  fleetps::testing::TlsTestFiles good, other_ca, wrong_name;
  Certificates() {
    REQUIRE(fleetps::testing::MakeTlsFiles(dir, "good", "IP:127.0.0.1", &good));
    REQUIRE(fleetps::testing::MakeTlsFiles(dir, "other", "IP:127.0.0.1", &other_ca));
    REQUIRE(fleetps::testing::MakeTlsFiles(dir, "wrongname", "IP:10.9.8.7,DNS:elsewhere.example", &wrong_name));
  }
  TlsFiles Server(const fleetps::testing::TlsTestFiles& f) const { return {f.cert_file, f.key_file, ""}; }
  TlsFiles Client(const fleetps::testing::TlsTestFiles& f) const { return {"", "", f.ca_file}; }
};

TEST_CASE("Calls and the shared-secret exchange run inside TLS") {
  Certificates certs;
  auto key = std::make_shared<const AuthKey>("a tls test secret of some length");
  PingServer ps(Load(certs.Server(certs.good)), key);
  REQUIRE(ps.server.Start().ok());
  IoThreads io(1);
  auto options = ClientOptions(Load(certs.Client(certs.good)));
  options.auth_key = key;
  RpcClient client(io, Endpoint{"127.0.0.1", ps.server.port()}, options);
  REQUIRE(client.Connect().ok());
  for (uint32_t i = 1; i <= 50; ++i) {
    auto answer = CallPing(client, i);
    INFO(answer.status().ToString());
    REQUIRE(answer.ok());
    CHECK(*answer == i);
  }
  client.Close();
}

TEST_CASE("A server certificate from another CA or for another host is refused") {
  Certificates certs;
  IoThreads io(1);
  SECTION("another CA") {
    PingServer ps(Load(certs.Server(certs.other_ca)));
    REQUIRE(ps.server.Start().ok());
    RpcClient client(io, Endpoint{"127.0.0.1", ps.server.port()}, ClientOptions(Load(certs.Client(certs.good))));
    const Status st = client.Connect();
    CHECK(st.IsUnavailable());
    CHECK_THAT(st.message(), Catch::Contains("TLS handshake failed") && Catch::Contains("certificate verify failed"));
  }
  SECTION("a certificate for another address, signed by the right CA") {
    PingServer ps(Load(certs.Server(certs.wrong_name)));
    REQUIRE(ps.server.Start().ok());
    RpcClient client(io, Endpoint{"127.0.0.1", ps.server.port()}, ClientOptions(Load(certs.Client(certs.wrong_name))));
    const Status st = client.Connect();
    CHECK_THAT(st.message(), Catch::Contains("TLS handshake failed") && Catch::Contains("names 127.0.0.1"));
  }
}

TEST_CASE("Plain and TLS peers do not talk to each other") {
  Certificates certs;
  IoThreads io(1);
  SECTION("a TLS client of a plain server fails its handshake") {
    PingServer ps(nullptr);
    REQUIRE(ps.server.Start().ok());
    RpcClient client(io, Endpoint{"127.0.0.1", ps.server.port()}, ClientOptions(Load(certs.Client(certs.good))));
    const Status st = client.Connect();
    CHECK(st.IsUnavailable());
    CHECK_THAT(st.message(), Catch::Contains("TLS handshake failed"));
  }
  SECTION("a plain client of a TLS server is told that it requires TLS; the server stays up for TLS clients") {
    PingServer ps(Load(certs.Server(certs.good)));
    REQUIRE(ps.server.Start().ok());
    RpcClient plain(io, Endpoint{"127.0.0.1", ps.server.port()}, ClientOptions(nullptr));
    REQUIRE(plain.Connect().ok());  // TCP only: the client does not speak first without auth
    const Status refused = CallPing(plain, 7).status();
    CHECK(refused.IsUnavailable());
    CHECK_THAT(refused.message(), Catch::Contains("Ping to server 127.0.0.1") && Catch::Contains("requires TLS") &&
                                      Catch::Contains("FLEETPS_TLS_CA_FILE"));
    plain.Close();
    RpcClient tls(io, Endpoint{"127.0.0.1", ps.server.port()}, ClientOptions(Load(certs.Client(certs.good))));
    REQUIRE(tls.Connect().ok());
    auto answer = CallPing(tls, 8);
    REQUIRE(answer.ok());
    CHECK(*answer == 8);
  }
  SECTION("a plain client with the secret fails to connect, told that the server requires TLS") {
    auto key = std::make_shared<const AuthKey>("a tls test secret of some length");
    PingServer ps(Load(certs.Server(certs.good)), key);
    REQUIRE(ps.server.Start().ok());
    auto options = ClientOptions(nullptr);
    options.auth_key = key;
    RpcClient plain(io, Endpoint{"127.0.0.1", ps.server.port()}, options);
    const Status st = plain.Connect();  // its AuthHello is the frame the server answers
    CHECK(st.IsUnavailable());
    CHECK_THAT(st.message(), Catch::Contains("requires TLS"));
  }
}

TEST_CASE("Missing or mismatched or incomplete TLS files are named") {
  Certificates certs;
  CHECK_THAT(TlsContext::Load({certs.dir + "/nope.pem", certs.good.key_file, ""}).status().message(),
             Catch::Contains("TLS cert_file '" + certs.dir + "/nope.pem': no such file"));
  CHECK_THAT(TlsContext::Load({certs.good.cert_file, certs.other_ca.key_file, ""}).status().message(),
             Catch::Contains("does not match the certificate"));
  CHECK_THAT(TlsContext::Load({certs.good.cert_file, "", ""}).status().message(),
             Catch::Contains("cert_file and key_file go together"));
  CHECK_THAT(TlsContext::Load({"", "", certs.good.key_file}).status().message(),
             Catch::Contains("TLS ca_file") && Catch::Contains("no PEM CA certificate"));
  // A client context without a CA cannot verify anybody; a server one without a certificate
  // cannot serve.
  IoThreads io(1);
  RpcClient client(io, Endpoint{"127.0.0.1", 1}, ClientOptions(Load(certs.Server(certs.good))));
  CHECK_THAT(client.Connect().message(), Catch::Contains("no CA certificate (set server.tls.ca_file"));
  PingServer ps(Load(certs.Client(certs.good)));
  CHECK_THAT(ps.server.Start().message(), Catch::Contains("no certificate (set server.tls.cert_file"));
}

}  // namespace
}  // namespace fleetps::net
