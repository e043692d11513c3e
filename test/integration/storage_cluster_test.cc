// Two real pserver processes on loopback driven through PsClient: GEO delta pushes, CTR
// statistics and shrink, and the storage commands (save, load) end to end over the wire.
#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <thread>

#include "test/support/process.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
constexpr uint32_t kEmb = 0, kDense = 1, kCtr = 2;
constexpr uint32_t kDim = 4;

struct Cluster {
  std::string dir = testing::MakeTempDir("storage_cluster");
  std::vector<uint16_t> ports = testing::FreePorts(2);
  ChildProcess servers[2];

  // `server_extra`: more keys of the server map, one per line, indented by two spaces.
  explicit Cluster(const std::string& server_extra = "") {
    testing::WriteFile(
        dir + "/ps.yaml",
        "server:\n  endpoints: [\"127.0.0.1:" + std::to_string(ports[0]) +
            "\", \"127.0.0.1:" + std::to_string(ports[1]) + "\"]\n  shard_threads: 2\n  data_dir: " + dir +
            "/data\n  checkpoint_root: " + dir + "\n" + server_extra +
            "tables:\n"
            "  - {id: 0, name: emb, dim: 4, shards: 4, memory_budget_bytes: 600000,\n"
            "     optimizer: {name: adagrad, learning_rate: 0.1}, initializer: {name: uniform, seed: 3}}\n"
            "  - {id: 1, name: dense, kind: dense, size: 10,\n"
            "     optimizer: {name: adam, learning_rate: 0.1}, initializer: {name: constant, value: 0.5}}\n"
            "  - {id: 2, name: ctr, dim: 4, shards: 2, optimizer: {name: sgd, learning_rate: 1},\n"
            "     accessor: {name: ctr, nonclk_coeff: 0.1, click_coeff: 1, embedx_threshold: 2,\n"
            "                show_click_decay_rate: 0.5, delete_threshold: 0.4}}\n");
    for (int i = 0; i < 2; ++i) {
      REQUIRE(servers[i].Start(
          {testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml", "--index", std::to_string(i)}, {},
          dir + "/pserver" + std::to_string(i) + ".log"));
    }
    for (uint16_t p : ports) REQUIRE(testing::WaitForPort(p, std::chrono::seconds(10)));
  }
  std::unique_ptr<trainer::PsClient> Client() const {
    trainer::PsClientOptions o;
    o.servers = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
    o.io_threads = 1;
    auto c = trainer::PsClient::Connect(o);
    REQUIRE(c.ok());
    return std::move(c).value();
  }
};

std::vector<float> PullAll(trainer::PsClient& c, uint32_t table, const std::vector<uint64_t>& keys) {
  std::vector<float> v(keys.size() * kDim);
  REQUIRE(c.PullSparse(table, keys, v.data()).get().ok());
  return v;
}

TEST_CASE("GEO delta pushes change rows exactly by the delta, sparse and dense") {
  Cluster cluster;
  auto client = cluster.Client();
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 300; ++k) keys.push_back(k * 7);
  const auto before = PullAll(*client, kEmb, keys);
  std::vector<uint64_t> pushed = keys;
  pushed.push_back(7);  // a duplicate: the client sums, the server adds the sum
  std::vector<float> delta(pushed.size() * kDim);
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = static_cast<float>(i % 13) * 0.125f - 0.5f;
  trainer::PsClient::SparsePushOptions opts;
  opts.delta = true;
  REQUIRE(client->PushSparse(kEmb, pushed, delta, opts).get().ok());
  const auto after = PullAll(*client, kEmb, keys);
  for (size_t k = 0; k < keys.size(); ++k) {
    for (uint32_t j = 0; j < kDim; ++j) {
      float d = delta[k * kDim + j];
      if (keys[k] == 7) d += delta[(pushed.size() - 1) * kDim + j];
      INFO("key " << keys[k] << " column " << j);
      REQUIRE(after[k * kDim + j] == before[k * kDim + j] + d);
    }
  }

  std::vector<float> dense(10), dense_delta(10);
  for (int i = 0; i < 10; ++i) dense_delta[i] = 0.25f * static_cast<float>(i);
  trainer::PsClient::DensePushOptions dopts;
  dopts.delta = true;
  REQUIRE(client->PushDense(kDense, dense_delta, dopts).get().ok());
  REQUIRE(client->PullDense(kDense, dense).get().ok());
  for (int i = 0; i < 10; ++i) CHECK(dense[i] == 0.5f + dense_delta[i]);
  // A delta cannot be a sync push.
  dopts.sync_trainers = 2;
  Status sync = client->PushDense(kDense, dense_delta, dopts).get();
  CHECK(sync.IsInvalidArgument());
  CHECK(sync.message().find("delta") != std::string::npos);
}

TEST_CASE("Save, change, load: the table is back at the saved state; shrink applies CTR rules") {
  Cluster cluster;
  auto client = cluster.Client();
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 40000; ++k) keys.push_back(k * 2654435761u);
  std::mt19937 rng(1);
  std::vector<float> grads(keys.size() * kDim);
  for (auto& g : grads) g = static_cast<float>(rng() % 100) * 0.01f - 0.5f;
  REQUIRE(client->PushSparse(kEmb, keys, grads).get().ok());
  std::vector<float> dense_grads(10, 0.1f);
  REQUIRE(client->PushDense(kDense, dense_grads).get().ok());
  // CTR: key 1 gets show 10/click 2 (score 2.8: extended), key 2 show 1 (score 0.1).
  std::vector<uint64_t> ctr_keys = {1, 2};
  std::vector<float> ctr_grads(2 * kDim, 0.5f), shows = {10, 1}, clicks = {2, 0};
  trainer::PsClient::SparsePushOptions ctr_opts;
  ctr_opts.shows = shows;
  ctr_opts.clicks = clicks;
  REQUIRE(client->PushSparse(kCtr, ctr_keys, ctr_grads, ctr_opts).get().ok());
  const auto ctr_values = PullAll(*client, kCtr, ctr_keys);
  CHECK(ctr_values[5] == 0.0f);  // key 2: embedx not created
  CHECK(ctr_values[1] != 0.0f);  // key 1: extended (uniform initial value)

  auto stats = client->Stats();
  REQUIRE(stats.ok());
  CHECK((*stats)[0].rows == keys.size());
  CHECK((*stats)[0].disk_rows > keys.size() / 2);  // the budget holds about 1500 rows per shard

  const auto saved = PullAll(*client, kEmb, keys);
  std::vector<float> saved_dense(10);
  REQUIRE(client->PullDense(kDense, saved_dense).get().ok());
  const std::string ckpt = cluster.dir + "/ckpt";
  auto result = client->Save(ckpt, trainer::kSaveCheckpoint);
  REQUIRE(result.ok());
  CHECK(result->rows == keys.size() + 2);
  CHECK(std::filesystem::exists(ckpt + "/CURRENT"));

  // Change everything, then load.
  REQUIRE(client->PushSparse(kEmb, keys, grads).get().ok());
  REQUIRE(client->PushDense(kDense, dense_grads).get().ok());
  REQUIRE(client->PushSparse(kEmb, std::vector<uint64_t>{999999}, std::vector<float>(kDim, 1.0f)).get().ok());
  CHECK(PullAll(*client, kEmb, keys) != saved);
  auto loaded = client->Load(ckpt);
  REQUIRE(loaded.ok());
  CHECK(loaded->version == result->version);
  CHECK(loaded->rows == keys.size() + 2);
  CHECK(PullAll(*client, kEmb, keys) == saved);
  std::vector<float> dense(10);
  REQUIRE(client->PullDense(kDense, dense).get().ok());
  CHECK(dense == saved_dense);
  CHECK(PullAll(*client, kCtr, ctr_keys) == ctr_values);
  stats = client->Stats();
  REQUIRE(stats.ok());
  CHECK((*stats)[0].rows == keys.size());  // key 999999 was not in the checkpoint

  // Shrink: decay 0.5 -> key 1: 5, 1: 0.4 + 1 = 1.4 kept; key 2: 0.5, 0: 0.05 < 0.4 deleted.
  auto shrunk = client->Shrink(kCtr);
  REQUIRE(shrunk.ok());
  CHECK(shrunk->deleted == 1);
  CHECK(shrunk->rows == 1);
  // Load errors travel back with the reason.
  auto missing = client->Load(cluster.dir + "/nowhere");
  CHECK(missing.status().IsNotFound());
  CHECK(client->Save(ckpt, 7).status().IsInvalidArgument());

  // Network saves and loads stay below the checkpoint root: relative names resolve in it;
  // absolute paths elsewhere, '..' (even one that leads back inside) and symbolic links
  // leading out are refused, and nothing is written there.
  auto relative = client->Save("by-name", trainer::kSaveCheckpoint);
  REQUIRE(relative.ok());
  CHECK(std::filesystem::exists(cluster.dir + "/by-name/CURRENT"));
  REQUIRE(client->Load("by-name").ok());
  const std::string outside = testing::MakeTempDir("outside");
  std::filesystem::create_directory_symlink(outside, cluster.dir + "/escape");
  for (const std::string& bad :
       {outside + "/ckpt", std::string("../ckpt"), std::string("by-name/../../x"), std::string("escape/ckpt"),
        std::string("/etc/fleetps-ckpt"), cluster.dir + "/by-name/../inside"}) {
    INFO(bad);
    auto refused = client->Save(bad, trainer::kSaveCheckpoint);
    CHECK_FALSE(refused.ok());
    CHECK((refused.status().code() == StatusCode::kPermissionDenied ||
           refused.status().code() == StatusCode::kInvalidArgument));
    CHECK_THAT(refused.status().message(), Catch::Contains("checkpoint root"));
    CHECK_FALSE(client->Load(bad).ok());
  }
  CHECK(std::filesystem::is_empty(outside));
  CHECK_FALSE(std::filesystem::exists(cluster.dir + "/inside"));
}

TEST_CASE("Server 0 saves every table periodically when save_interval_s is set") {
  const std::string save_dir = testing::MakeTempDir("periodic");
  Cluster cluster("  save_dir: " + save_dir + "\n  save_interval_s: 1\n  save_mode: 0\n");
  auto client = cluster.Client();
  std::vector<uint64_t> keys = {1, 2, 3, 4, 5};
  REQUIRE(client->PushSparse(kEmb, keys, std::vector<float>(keys.size() * kDim, 0.5f)).get().ok());
  const auto pushed = PullAll(*client, kEmb, keys);
  // The first save starts a second after start-up; wait for one that has the push.
  std::string current;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool loaded_pushed = false;
  while (!loaded_pushed && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (!std::filesystem::exists(save_dir + "/CURRENT")) continue;
    current = testing::ReadFile(save_dir + "/CURRENT");
    // Loading it back must give the pushed values (the servers keep running).
    auto loaded = client->Load(save_dir);
    REQUIRE(loaded.ok());
    loaded_pushed = PullAll(*client, kEmb, keys) == pushed && loaded->rows >= keys.size();
  }
  CHECK(loaded_pushed);
  CHECK(current.rfind("auto-", 0) == 0);
  const std::string log = testing::ReadFile(cluster.dir + "/pserver0.log");
  CHECK(log.find("periodic save to " + save_dir + " done") != std::string::npos);
}

}  // namespace
}  // namespace fleetps
