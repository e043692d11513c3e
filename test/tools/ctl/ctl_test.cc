// fleetps-ctl against two real pservers: status per server and table, save / load /
// shrink / stop, and clear errors for an unreachable server and bad input.
#include "tools/ctl/ctl.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <regex>
#include <sstream>

#include "test/support/process.h"
#include "test/support/tls_files.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using namespace std::chrono_literals;

struct Result {
  int code;
  std::string out, err;
};

Result Ctl(std::vector<std::string> args) {
  args.insert(args.begin(), "fleetps-ctl");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = ctl::RunCtl(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

TEST_CASE("fleetps-ctl status, save, load, shrink and stop on two pservers", "[integration]") {
  const std::string dir = testing::MakeTempDir("ctl");
  const auto ports = testing::FreePorts(2);
  const std::string list = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  testing::WriteFile(dir + "/ps.yaml",
                     "server:\n  endpoints: [\"127.0.0.1:" + std::to_string(ports[0]) +
                         "\", \"127.0.0.1:" + std::to_string(ports[1]) +
                         "\"]\n  io_threads: 1\n  shard_threads: 1\n  checkpoint_root: " + dir +
                         "\ntables:\n"
                         "  - {id: 0, name: emb, kind: sparse, dim: 4, shards: 2,\n"
                         "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n"
                         "  - {id: 1, name: dense, kind: dense, size: 10,\n"
                         "     optimizer: {name: sgd, learning_rate: 1.0}}\n");
  testing::ChildProcess servers[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE(servers[i].Start(
        {testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml", "--index", std::to_string(i)}, {},
        dir + "/pserver" + std::to_string(i) + ".log"));
  }
  for (uint16_t p : ports) REQUIRE(testing::WaitForPort(p, 30s));
  {
    trainer::PsClientOptions o;
    o.servers = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
    auto client = trainer::PsClient::Connect(o);
    REQUIRE(client.ok());
    std::vector<uint64_t> keys(200);
    for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
    std::vector<float> grads(keys.size() * 4, 1.0f);
    REQUIRE((*client)->PushSparse(0, keys, grads).get().ok());
  }

  Result r = Ctl({"--servers", list, "status", "--interval", "0"});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("pserver 0  127.0.0.1:" + std::to_string(ports[0])) &&
                        Catch::Contains("pserver 1  127.0.0.1:" + std::to_string(ports[1])) &&
                        Catch::Contains("rocksdb rows") && Catch::Contains("emb: 200 rows"));
  r = Ctl({"--servers", list, "status", "--interval", "0.2"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("push keys/s"));
  // Requests per server: between the two samples each server received one request (the
  // second TableStats itself) in a little over 0.2 s.
  for (int s = 0; s < 2; ++s) {
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m,
                              std::regex("pserver " + std::to_string(s) +
                                         "  127\\.0\\.0\\.1:[0-9]+  "
                                         "requests/s ([0-9]+) \\(([0-9]+) since start\\)")));
    CHECK(std::stoi(m[1]) >= 1);
    CHECK(std::stoi(m[1]) <= 5);
    CHECK(std::stoi(m[2]) >= 3);  // at least the two samples and the first status call's
  }

  r = Ctl({"--servers", list, "save", "ckpt", "checkpoint"});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("saved ckpt") && Catch::Contains("200 sparse rows"));
  r = Ctl({"--servers", list, "load", "ckpt"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("loaded ckpt") && Catch::Contains("200 sparse rows"));
  r = Ctl({"--servers", list, "shrink"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("shrink: deleted 0 rows"));
  // A path outside the checkpoint root is the server's refusal: exit 1, the reason shown.
  r = Ctl({"--servers", list, "save", "../elsewhere"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("save failed") && Catch::Contains(".."));
  r = Ctl({"--servers", list, "save", "ckpt", "weekly"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("save mode 'weekly'"));

  r = Ctl({"--servers", list, "stop", "--reason", "maintenance"});
  CHECK(r.code == 0);
  for (auto& s : servers) CHECK(s.Wait(30s) == 0);
  CHECK_THAT(testing::ReadFile(dir + "/pserver0.log"), Catch::Contains("maintenance"));
}

TEST_CASE("fleetps-ctl status shows the RocksDB tier's rows and bytes per table", "[integration]") {
  const std::string dir = testing::MakeTempDir("ctl_tier");
  const auto ports = testing::FreePorts(1);
  const std::string list = "127.0.0.1:" + std::to_string(ports[0]);
  // The budget holds about 3000 rows of `cold` in RAM; `emb` has no budget.
  testing::WriteFile(dir + "/ps.yaml", "server:\n  endpoints: [\"" + list +
                                           "\"]\n  io_threads: 1\n  shard_threads: 1\n  data_dir: " + dir +
                                           "/data\ntables:\n"
                                           "  - {id: 0, name: emb, kind: sparse, dim: 4, shards: 1}\n"
                                           "  - {id: 1, name: cold, kind: sparse, dim: 4, shards: 1,\n"
                                           "     memory_budget_bytes: 200000}\n");
  testing::ChildProcess server;
  REQUIRE(
      server.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml"}, {}, dir + "/pserver.log"));
  REQUIRE(testing::WaitForPort(ports[0], 30s));
  {
    trainer::PsClientOptions o;
    o.servers = {{"127.0.0.1", ports[0]}};
    auto client = trainer::PsClient::Connect(o);
    REQUIRE(client.ok());
    std::vector<uint64_t> keys(500);
    std::vector<float> grads(keys.size() * 4, 1.0f);
    for (uint64_t round = 0; round < 12; ++round) {  // 6000 rows; eviction runs between calls
      for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = round * keys.size() + i + 1;
      REQUIRE((*client)->PushSparse(1, keys, grads).get().ok());
      if (round == 0) REQUIRE((*client)->PushSparse(0, keys, grads).get().ok());
    }
    auto stats = (*client)->StatsByServer();
    REQUIRE(stats.ok());
    REQUIRE((*stats)[0].tables.size() == 2);
    const trainer::ServerTableStats& cold = (*stats)[0].tables[1];
    CHECK(cold.disk_rows > 2000);
    CHECK(cold.disk_bytes >= cold.disk_rows * (12 + 16));
    CHECK((*stats)[0].tables[0].disk_bytes == 0);
    CHECK((*stats)[0].requests >= 13);  // 13 pushes and this TableStats, at least

    Result r = Ctl({"--servers", list, "status", "--interval", "0"});
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("rocksdb bytes"));
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex(R"(emb +0 +sparse +500 +\S+ \S+ +0 +0 B )")));
    REQUIRE(std::regex_search(r.out, m, std::regex(R"(cold +1 +sparse +6000 +\S+ \S+ +(\d+) +([0-9.]+) KiB )")));
    CHECK(std::stoull(m[1].str()) == cold.disk_rows);
    CHECK(std::stod(m[2].str()) == Approx(cold.disk_bytes / 1024.0).margin(0.05));
    REQUIRE((*client)->StopServers("test done").ok());
  }
  CHECK(server.Wait(30s) == 0);
}

TEST_CASE("fleetps-ctl: an unreachable server and bad input get errors that say what to fix", "[integration]") {
  const uint16_t closed = testing::FreePorts(1)[0];
  Result r = Ctl({"--servers", "127.0.0.1:" + std::to_string(closed), "--timeout", "0.5", "status"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("cannot reach the pservers 127.0.0.1:" + std::to_string(closed)) &&
                        Catch::Contains("is each one running"));
  r = Ctl({"--servers", "127.0.0.1", "status"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--servers"));
  ::unsetenv("PADDLE_PSERVERS_IP_PORT_LIST");
  r = Ctl({"status"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("no pservers: pass --servers"));
  r = Ctl({"--servers", "127.0.0.1:1", "restart"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("unknown command 'restart'") && Catch::Contains("status, save"));
}

// A cluster with TLS and a shared secret: fleetps-ctl finds both where the trainers do
// (--config's server section, or FLEETPS_AUTH_SECRET_FILE / FLEETPS_TLS_*_FILE).
TEST_CASE("fleetps-ctl reaches a TLS cluster with a shared secret through --config", "[integration]") {
  const std::string dir = testing::MakeTempDir("ctl_tls");
  const auto ports = testing::FreePorts(1);
  const std::string list = "127.0.0.1:" + std::to_string(ports[0]);
  testing::TlsTestFiles tls;
  REQUIRE(testing::MakeTlsFiles(dir, "cluster", "IP:127.0.0.1", &tls));
  testing::WriteFile(dir + "/secret", "ctl test secret 0123456789abcdef\n");
  ::chmod((dir + "/secret").c_str(), 0600);
  testing::WriteFile(dir + "/ps.yaml", "server:\n  endpoints: [\"" + list +
                                           "\"]\n  io_threads: 1\n"
                                           "  shard_threads: 1\n  auth: required\n  auth_secret_file: " +
                                           dir + "/secret\n  tls: {cert_file: " + tls.cert_file +
                                           ", key_file: " + tls.key_file + ", ca_file: " + tls.ca_file +
                                           "}\n"
                                           "tables:\n  - {id: 0, name: emb, kind: sparse, dim: 4, shards: 1}\n");
  testing::ChildProcess server;
  REQUIRE(
      server.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml"}, {}, dir + "/pserver.log"));
  REQUIRE(testing::WaitForPort(ports[0], 30s));
  INFO(testing::ReadFile(dir + "/pserver.log"));

  // Without them the server cannot be spoken to: exit 2, saying it could not reach it.
  Result r = Ctl({"--servers", list, "--timeout", "1", "status", "--interval", "0"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("cannot reach the pservers"));
  r = Ctl({"--servers", list, "--config", dir + "/ps.yaml", "status", "--interval", "0"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("emb: 0 rows"));
  r = Ctl({"--servers", list, "--config", dir + "/missing.yaml", "status"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--config") && Catch::Contains("missing.yaml"));
  // Stop is an admin operation: it needs the secret, which --config supplies.
  r = Ctl({"--servers", list, "--config", dir + "/ps.yaml", "stop"});
  CHECK(r.code == 0);
  CHECK(server.Wait(30s) == 0);
}

}  // namespace
}  // namespace fleetps
