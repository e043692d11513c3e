// A real pserver with server.metrics_port: /metrics in the Prometheus text format whose
// counters move with the traffic a PsClient sends, /healthz, /readyz, and a 404 that says
// which paths exist.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <regex>
#include <span>

#include "test/support/http.h"
#include "test/support/process.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using namespace std::chrono_literals;
using testing::HttpGet;

// The value of the series `name{labels}` as printed (labels in the exposition's order).
double Value(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// The sparse `emb` (dim 4, 2 shards) and dense `dense` (10 floats) tables, SGD with rate 1.
const char* kTables =
    "  - {id: 0, name: emb, kind: sparse, dim: 4, shards: 2,\n"
    "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n"
    "  - {id: 1, name: dense, kind: dense, size: 10,\n"
    "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n";

// A pserver process in `dir` serving /metrics: `server_keys` are extra lines under
// `server:`, `tables` the lines under `tables:`.
struct MetricsServer {
  std::string dir;
  std::vector<uint16_t> ports = testing::FreePorts(2);  // RPC, /metrics
  testing::ChildProcess process;

  MetricsServer(std::string directory, const std::string& server_keys, const std::string& tables)
      : dir(std::move(directory)) {
    testing::WriteFile(dir + "/ps.yaml", "server:\n  endpoints: [\"127.0.0.1:" + std::to_string(ports[0]) +
                                             "\"]\n  io_threads: 1\n  shard_threads: 1\n  metrics_port: " +
                                             std::to_string(ports[1]) + "\n" + server_keys + "tables:\n" + tables);
    REQUIRE(
        process.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml"}, {}, dir + "/pserver.log"));
    REQUIRE(testing::WaitForPort(ports[0], 30s));
  }
  uint16_t http() const { return ports[1]; }
  std::string Log() const { return testing::ReadFile(dir + "/pserver.log"); }
  std::unique_ptr<trainer::PsClient> Connect() const {
    trainer::PsClientOptions o;
    o.servers = {{"127.0.0.1", ports[0]}};
    o.io_threads = 1;
    auto client = trainer::PsClient::Connect(o);
    REQUIRE(client.ok());
    return std::move(*client);
  }
  // Stops the server through `client` and expects a clean exit.
  void Stop(std::unique_ptr<trainer::PsClient> client) {
    REQUIRE(client->StopServers("test done").ok());
    client.reset();
    CHECK(process.Wait(30s) == 0);
  }
};

TEST_CASE("pserver /metrics counts requests, keys and rows; /healthz and /readyz answer", "[integration]") {
  MetricsServer server(testing::MakeTempDir("metrics"), "", kTables);
  INFO("pserver log:\n" << server.Log());
  const uint16_t http = server.http();
  const auto& ports = server.ports;
  CHECK(HttpGet(http, "/healthz") == std::make_pair(200, std::string("ok\n")));
  CHECK(HttpGet(http, "/readyz") == std::make_pair(200, std::string("ready\n")));
  auto [code, missing] = HttpGet(http, "/nope");
  CHECK(code == 404);
  CHECK_THAT(missing, Catch::Contains("/metrics"));

  auto [c0, before] = HttpGet(http, "/metrics");
  REQUIRE(c0 == 200);
  CHECK_THAT(before, Catch::Contains("# TYPE fleetps_table_rows gauge") &&
                         Catch::Contains("fleetps_server_info{endpoint=\"127.0.0.1:" + std::to_string(ports[0])));
  CHECK(Value(before, "fleetps_table_rows{id=\"0\",table=\"emb\",tier=\"memory\"}") == 0);
  CHECK(Value(before, "fleetps_requests_total{type=\"PushSparse\"}") == -1);  // none yet

  auto client = server.Connect();
  std::vector<uint64_t> keys(100);
  for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i * 7919 + 1;
  std::vector<float> grads(keys.size() * 4, 0.5f), values(keys.size() * 4);
  for (int round = 0; round < 3; ++round) REQUIRE(client->PushSparse(0, keys, grads).get().ok());
  REQUIRE(client->PullSparse(0, keys, values.data()).get().ok());
  CHECK(values[0] == -1.5f);

  auto [c1, after] = HttpGet(http, "/metrics");
  REQUIRE(c1 == 200);
  CHECK(Value(after, "fleetps_requests_total{type=\"PushSparse\"}") == 3);
  CHECK(Value(after, "fleetps_requests_total{type=\"PullSparse\"}") == 1);
  CHECK(Value(after, "fleetps_request_errors_total{type=\"PushSparse\"}") == 0);
  CHECK(Value(after, "fleetps_request_duration_seconds_count{type=\"PushSparse\"}") == 3);
  CHECK(Value(after, "fleetps_request_bytes_total{direction=\"in\",type=\"PushSparse\"}") > 3 * 100 * (8 + 16));
  CHECK(Value(after, "fleetps_request_bytes_total{direction=\"out\",type=\"PullSparse\"}") >= 100 * 16);
  CHECK(Value(after, "fleetps_table_rows{id=\"0\",table=\"emb\",tier=\"memory\"}") == 100);
  CHECK(Value(after, "fleetps_table_rows{id=\"0\",table=\"emb\",tier=\"rocksdb\"}") == 0);
  CHECK(Value(after, "fleetps_table_memory_bytes{id=\"0\",table=\"emb\"}") > 100 * 16);
  CHECK(Value(after, "fleetps_table_keys_pushed_total{id=\"0\",table=\"emb\"}") == 300);
  CHECK(Value(after, "fleetps_table_keys_pulled_total{id=\"0\",table=\"emb\"}") == 100);
  CHECK(Value(after, "fleetps_connections") >= 1);
  // The standard process series: the pserver's own CPU, memory and descriptors.
  CHECK(Value(after, "process_cpu_seconds_total") >= 0);  // present (a fresh pserver may not have used a tick)
  CHECK(Value(after, "process_resident_memory_bytes") > 1024 * 1024);
  CHECK(Value(after, "process_open_fds") >= 3 + Value(after, "fleetps_connections"));  // + listeners, logs
  CHECK(Value(after, "process_max_fds") >= Value(after, "process_open_fds"));
  // A second scrape adds nothing new to the counters.
  auto [c2, again] = HttpGet(http, "/metrics");
  CHECK(Value(again, "fleetps_table_keys_pushed_total{id=\"0\",table=\"emb\"}") == 300);
  server.Stop(std::move(client));
}

TEST_CASE("pserver /metrics: RocksDB-tier rows and bytes are 0 until rows spill, then rows x record size",
          "[integration]") {
  const std::string dir = testing::MakeTempDir("metrics_tier");
  // One shard whose budget holds about 3000 rows in RAM: 6000 keys spill about half.
  MetricsServer server(dir, "  data_dir: " + dir + "/data\n",
                       "  - {id: 0, name: cold, kind: sparse, dim: 4, shards: 1, memory_budget_bytes: 200000,\n"
                       "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n");
  INFO("pserver log:\n" << server.Log());
  const std::string rows_disk = "fleetps_table_rows{id=\"0\",table=\"cold\",tier=\"rocksdb\"}";
  const std::string rows_ram = "fleetps_table_rows{id=\"0\",table=\"cold\",tier=\"memory\"}";
  const std::string bytes_disk = "fleetps_table_rocksdb_bytes{id=\"0\",table=\"cold\"}";

  auto [c0, before] = HttpGet(server.http(), "/metrics");
  REQUIRE(c0 == 200);
  CHECK_THAT(before, Catch::Contains("# TYPE fleetps_table_rocksdb_bytes gauge"));
  CHECK(Value(before, rows_disk) == 0);
  CHECK(Value(before, bytes_disk) == 0);

  auto client = server.Connect();
  std::vector<uint64_t> keys(6000);
  for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
  std::vector<float> grads(keys.size() * 4, 0.5f);
  for (size_t at = 0; at < keys.size(); at += 500) {  // batches: eviction runs between calls
    const std::span<const uint64_t> k(keys.data() + at, 500);
    const std::span<const float> g(grads.data() + at * 4, 500 * 4);
    REQUIRE(client->PushSparse(0, k, g).get().ok());
  }

  auto [c1, after] = HttpGet(server.http(), "/metrics");
  REQUIRE(c1 == 200);
  const double disk = Value(after, rows_disk), bytes = Value(after, bytes_disk);
  CHECK(disk + Value(after, rows_ram) == 6000);
  CHECK(disk > 2000);
  // Each row as written: a 12-byte key and a SpilledRow of the row's floats (at least the 4
  // weights), the same size for every row.
  CHECK(bytes >= disk * (12 + 4 * 4));
  CHECK(bytes <= disk * (12 + 4 * 4 + 128));
  CHECK(std::fmod(bytes, disk) == 0);
  // The same figure over the TableStats RPC (fleetps-ctl status).
  auto stats = client->Stats();
  REQUIRE(stats.ok());
  REQUIRE(stats->size() == 1);
  CHECK((*stats)[0].disk_rows == static_cast<uint64_t>(disk));
  CHECK((*stats)[0].disk_bytes == static_cast<uint64_t>(bytes));

  // Reading every row back brings some into RAM: the tier's bytes follow its rows.
  std::vector<float> values(keys.size() * 4);
  REQUIRE(client->PullSparse(0, keys, values.data()).get().ok());
  CHECK(values[0] == -0.5f);
  auto [c2, again] = HttpGet(server.http(), "/metrics");
  const double disk2 = Value(again, rows_disk);
  CHECK(Value(again, bytes_disk) == disk2 * (bytes / disk));

  server.Stop(std::move(client));
}

TEST_CASE("pserver /metrics: the latest save and load, and gradients skipped as non-finite", "[integration]") {
  const std::string dir = testing::MakeTempDir("metrics_ckpt");
  MetricsServer server(dir, "  nonfinite_gradients: skip\n  checkpoint_root: " + dir + "\n", kTables);
  INFO("pserver log:\n" << server.Log());
  auto [c0, before] = HttpGet(server.http(), "/metrics");
  REQUIRE(c0 == 200);
  CHECK(Value(before, "fleetps_checkpoint_last_save_seconds") == 0);
  CHECK(Value(before, "fleetps_checkpoint_last_save_bytes") == 0);
  CHECK(Value(before, "fleetps_nonfinite_values_skipped_total") == 0);

  auto client = server.Connect();
  // skip: the key with a NaN is dropped, the others applied; a dense push with an
  // infinity is dropped whole (10 floats counted, 1 of them bad: the push's floats).
  std::vector<uint64_t> keys(50);
  for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
  std::vector<float> grads(keys.size() * 4, 0.5f);
  grads[7 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();  // key 8
  REQUIRE(client->PushSparse(0, keys, grads).get().ok());
  std::vector<float> values(keys.size() * 4);
  REQUIRE(client->PullSparse(0, keys, values.data()).get().ok());
  for (size_t k = 0; k < keys.size(); ++k) {
    INFO("key " << keys[k]);
    CHECK(values[k * 4 + 2] == (keys[k] == 8 ? 0.0f : -0.5f));
  }
  std::vector<float> dense(10, 1.0f);
  dense[3] = std::numeric_limits<float>::infinity();
  REQUIRE(client->PushDense(1, dense).get().ok());
  std::vector<float> pulled(10);
  REQUIRE(client->PullDense(1, pulled).get().ok());
  CHECK(pulled == std::vector<float>(10, 0.0f));

  auto saved = client->Save("ckpt", trainer::kSaveCheckpoint);
  REQUIRE(saved.ok());
  auto loaded = client->Load("ckpt");
  REQUIRE(loaded.ok());
  auto [c1, after] = HttpGet(server.http(), "/metrics");
  REQUIRE(c1 == 200);
  CHECK(Value(after, "fleetps_nonfinite_values_skipped_total") == 2);  // 1 key + 1 float
  CHECK(Value(after, "fleetps_checkpoint_saves_total") == 1);
  CHECK(Value(after, "fleetps_checkpoint_last_save_seconds") > 0);
  CHECK(Value(after, "fleetps_checkpoint_last_save_rows") == 49);
  CHECK(Value(after, "fleetps_checkpoint_last_save_bytes") == Value(after, "fleetps_checkpoint_saved_bytes_total"));
  CHECK(Value(after, "fleetps_checkpoint_last_save_bytes") > 49 * 4 * 4);
  CHECK(Value(after, "fleetps_checkpoint_loads_total") == 1);
  CHECK(Value(after, "fleetps_checkpoint_last_load_seconds") > 0);
  CHECK(Value(after, "fleetps_checkpoint_last_load_rows") == 49);

  server.Stop(std::move(client));
}

TEST_CASE("A metrics port already taken fails the start with a message naming it", "[integration]") {
  const std::string dir = testing::MakeTempDir("metrics_taken");
  const auto ports = testing::FreePorts(1);
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const uint16_t taken = testing::FreePorts(1)[0];
  addr.sin_port = htons(taken);
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(holder, 1) == 0);
  testing::WriteFile(dir + "/ps.yaml", "server:\n  endpoints: [\"127.0.0.1:" + std::to_string(ports[0]) +
                                           "\"]\ntables:\n  - {id: 0, name: emb, dim: 4}\n");
  testing::ChildProcess server;
  REQUIRE(server.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml"},
                       {{"FLEETPS_METRICS_PORT", std::to_string(taken)}}, dir + "/pserver.log"));
  CHECK(server.Wait(30s) == 2);
  CHECK_THAT(testing::ReadFile(dir + "/pserver.log"),
             Catch::Contains("cannot listen for HTTP (metrics, health) on 127.0.0.1:" + std::to_string(taken)) &&
                 Catch::Contains("FLEETPS_METRICS_PORT"));
  ::close(holder);
}

}  // namespace
}  // namespace fleetps
