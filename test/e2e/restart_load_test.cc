// A load test across restarts: 16 concurrent clients push known increments to overlapping
// keys (sparse and dense) through 2 real pservers; between rounds the job saves a
// checkpoint, both pservers are killed with -9 and restarted with --load. At the end
// every row must equal exactly the value that the acknowledged pushes give (SGD with
// learning rate 1 from zeros: minus the sum of the gradients; the increments are small
// integers, so float sums are exact).
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "test/support/process.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
using namespace std::chrono_literals;

constexpr uint32_t kDim = 4;
constexpr uint64_t kKeys = 2000;
constexpr uint64_t kDense = 64;
constexpr int kClients = 16;
constexpr int kRounds = 3;
constexpr int kPushesPerRound = 40;
constexpr size_t kKeysPerPush = 50;

struct Cluster {
  std::string dir = testing::MakeTempDir("restart_load");
  std::vector<uint16_t> ports = testing::FreePorts(2);
  std::unique_ptr<ChildProcess> servers[2];

  Cluster() {
    testing::WriteFile(dir + "/ps.yaml",
                       "server:\n  endpoints: [\"127.0.0.1:" + std::to_string(ports[0]) + "\", \"127.0.0.1:" +
                           std::to_string(ports[1]) + "\"]\n  shard_threads: 2\n  checkpoint_root: " + dir +
                           "\n"
                           "tables:\n"
                           "  - {id: 0, name: emb, dim: 4, shards: 4,\n"
                           "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n"
                           "  - {id: 1, name: dense, kind: dense, size: 64,\n"
                           "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n");
  }
  void Start(const std::string& load_dir) {
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> argv = {testing::BinaryPath("server/pserver"),
                                       "--config",
                                       dir + "/ps.yaml",
                                       "--index",
                                       std::to_string(i),
                                       "--log-level",
                                       "warn"};
      if (!load_dir.empty()) {
        argv.push_back("--load");
        argv.push_back(load_dir);
      }
      servers[i] = std::make_unique<ChildProcess>();
      REQUIRE(servers[i]->Start(argv, {}, dir + "/pserver" + std::to_string(i) + ".log"));
    }
    for (uint16_t p : ports) REQUIRE(testing::WaitForPort(p, 30s));
  }
  void Kill() {
    for (auto& s : servers) {
      s->Signal(SIGKILL);
      REQUIRE(s->Wait(10s) == 128 + SIGKILL);
    }
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

TEST_CASE("16 clients push through pservers killed and restarted from checkpoints: every row is exact", "[e2e]") {
  Cluster cluster;
  // expected[k * kDim + d]: the sum of every acknowledged gradient; dense likewise.
  std::vector<double> expected(kKeys * kDim, 0.0), expected_dense(kDense, 0.0);
  std::mutex mu;  // guards expected, expected_dense
  std::string load_dir;
  for (int round = 0; round < kRounds; ++round) {
    cluster.Start(load_dir);
    std::atomic<int> failures{0};
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        auto client = cluster.Client();
        std::mt19937_64 rng(static_cast<uint64_t>(round * 1000 + c));
        for (int p = 0; p < kPushesPerRound; ++p) {
          // Overlapping keys: every client draws from the same 2000; duplicates within one
          // push are summed by the client.
          std::vector<uint64_t> keys(kKeysPerPush);
          std::vector<float> grads(kKeysPerPush * kDim);
          for (size_t i = 0; i < keys.size(); ++i) {
            keys[i] = rng() % kKeys;
            for (uint32_t d = 0; d < kDim; ++d) grads[i * kDim + d] = static_cast<float>(1 + (rng() % 7));
          }
          std::vector<float> dense(kDense);
          for (auto& v : dense) v = static_cast<float>(rng() % 5);
          Status sparse = client->PushSparse(0, keys, grads).get();
          Status dense_st = client->PushDense(1, dense).get();
          std::lock_guard<std::mutex> lock(mu);
          if (sparse.ok()) {
            for (size_t i = 0; i < keys.size(); ++i) {
              for (uint32_t d = 0; d < kDim; ++d) expected[keys[i] * kDim + d] += grads[i * kDim + d];
            }
          } else {
            ++failures;
          }
          if (dense_st.ok()) {
            for (uint64_t i = 0; i < kDense; ++i) expected_dense[i] += dense[i];
          } else {
            ++failures;
          }
        }
      });
    }
    for (auto& t : clients) t.join();
    REQUIRE(failures == 0);  // nothing was killed while pushing: every push is acknowledged
    // Checkpoint, then kill -9 both servers; the next round starts from the checkpoint.
    auto client = cluster.Client();
    auto saved = client->Save("ckpt", trainer::kSaveCheckpoint);
    REQUIRE(saved.ok());
    client.reset();
    cluster.Kill();
    load_dir = cluster.dir + "/ckpt";
  }
  cluster.Start(load_dir);
  auto client = cluster.Client();
  std::vector<uint64_t> keys(kKeys);
  for (uint64_t k = 0; k < kKeys; ++k) keys[k] = k;
  std::vector<float> rows(kKeys * kDim);
  REQUIRE(client->PullSparse(0, keys, rows.data()).get().ok());
  size_t wrong = 0;
  for (size_t i = 0; i < rows.size(); ++i) wrong += rows[i] != static_cast<float>(-expected[i]);
  CHECK(wrong == 0);
  std::vector<float> dense(kDense);
  REQUIRE(client->PullDense(1, dense).get().ok());
  for (uint64_t i = 0; i < kDense; ++i) CHECK(dense[i] == static_cast<float>(-expected_dense[i]));
  client.reset();
  cluster.Kill();
}

}  // namespace
}  // namespace fleetps
