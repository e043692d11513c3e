// Restart without loss, with real pserver processes: train, save, kill -9, restart with
// --load, and check that every row (weights, optimizer state, statistics) is exactly the
// saved one; a kill during a save leaves the previous checkpoint loadable; a checkpoint
// saved by 2 servers loads into 3.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>
#include <random>
#include <thread>

#include "server/checkpoint/checkpoint_dir.h"
#include "server/checkpoint/row_file.h"
#include "test/support/process.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
constexpr uint32_t kEmb = 0, kDense = 1, kCtr = 2;
constexpr uint32_t kDim = 8;
constexpr uint64_t kDenseSize = 1000;

std::string Yaml(const std::vector<uint16_t>& ports, const std::string& data_dir, uint64_t budget) {
  std::string eps;
  for (uint16_t p : ports) eps += (eps.empty() ? "\"127.0.0.1:" : ", \"127.0.0.1:") + std::to_string(p) + "\"";
  // Network saves and loads go below the checkpoint root: the test's directory.
  return "server:\n  endpoints: [" + eps + "]\n  shard_threads: 2\n  data_dir: " + data_dir +
         "\n  checkpoint_root: " + std::filesystem::path(data_dir).parent_path().string() +
         "\n"
         "tables:\n"
         "  - {id: 0, name: emb, dim: 8, shards: 4, memory_budget_bytes: " +
         std::to_string(budget) +
         ",\n"
         "     optimizer: {name: adam, learning_rate: 0.01}, initializer: {name: uniform, seed: 11}}\n"
         "  - {id: 1, name: dense, kind: dense, size: 1000, optimizer: {name: adam, learning_rate: 0.01}}\n"
         "  - {id: 2, name: ctr, dim: 8, shards: 2, optimizer: {name: adagrad, learning_rate: 0.05},\n"
         "     accessor: {name: ctr, embedx_threshold: 3}, initializer: {name: uniform, seed: 12}}\n";
}

class Cluster {
 public:
  Cluster(const std::string& dir, size_t servers, uint64_t budget = 0)
      : dir_(dir), ports_(testing::FreePorts(static_cast<int>(servers))), servers_(servers) {
    testing::WriteFile(config(), Yaml(ports_, dir_ + "/data", budget));
  }
  std::string config() const { return dir_ + "/ps-" + std::to_string(ports_.size()) + ".yaml"; }

  void Start(const std::string& load_dir = "") {
    for (size_t i = 0; i < servers_.size(); ++i) {
      servers_[i] = std::make_unique<ChildProcess>();
      std::vector<std::string> argv = {testing::BinaryPath("server/pserver"),
                                       "--config",
                                       config(),
                                       "--index",
                                       std::to_string(i),
                                       "--log-level",
                                       "warn"};
      if (!load_dir.empty()) {
        argv.push_back("--load");
        argv.push_back(load_dir);
      }
      REQUIRE(servers_[i]->Start(argv, {}, dir_ + "/pserver" + std::to_string(i) + ".log"));
    }
    for (uint16_t p : ports_) REQUIRE(testing::WaitForPort(p, std::chrono::seconds(30)));
  }
  void Kill9() {
    for (auto& s : servers_) s->Signal(SIGKILL);
    for (auto& s : servers_) CHECK(s->Wait(std::chrono::seconds(10)) == 128 + SIGKILL);
  }
  ChildProcess& server(size_t i) { return *servers_[i]; }
  std::unique_ptr<trainer::PsClient> Client() const {
    trainer::PsClientOptions o;
    for (uint16_t p : ports_) o.servers.push_back({"127.0.0.1", p});
    o.io_threads = 1;
    auto c = trainer::PsClient::Connect(o);
    REQUIRE(c.ok());
    return std::move(c).value();
  }

 private:
  std::string dir_;
  std::vector<uint16_t> ports_;
  std::vector<std::unique_ptr<ChildProcess>> servers_;
};

std::vector<uint64_t> Keys(size_t n) {
  std::vector<uint64_t> keys(n);
  std::mt19937_64 rng(n);
  for (auto& k : keys) k = rng();
  return keys;
}

// Rounds of pushes with shows/clicks, from several batches, as training does.
void Train(trainer::PsClient& client, const std::vector<uint64_t>& keys, int rounds, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> g(-1, 1);
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint64_t> batch(keys.size() / 2);
    for (auto& k : batch) k = keys[rng() % keys.size()];
    std::vector<float> grads(batch.size() * kDim), shows(batch.size()), clicks(batch.size());
    for (auto& x : grads) x = g(rng);
    for (size_t i = 0; i < batch.size(); ++i) {
      shows[i] = static_cast<float>(1 + rng() % 3);
      clicks[i] = static_cast<float>(rng() % 2);
    }
    REQUIRE(client.PushSparse(kEmb, batch, grads).get().ok());
    trainer::PsClient::SparsePushOptions counters;
    counters.shows = shows;
    counters.clicks = clicks;
    REQUIRE(client.PushSparse(kCtr, batch, grads, counters).get().ok());
    std::vector<float> dense(kDenseSize);
    for (auto& x : dense) x = g(rng);
    REQUIRE(client.PushDense(kDense, dense).get().ok());
  }
}

// Asks the servers to stop; the exit codes are checked by the caller. The reply to Stop can
// be lost when the server closes its connections right after sending it (a race in
// common/net RpcServer::Stop, reported), so only a refusal fails the test here.
void StopServers(trainer::PsClient& client) {
  Status st = client.StopServers("test done");
  INFO(st.ToString());
  CHECK((st.ok() || st.IsUnavailable()));
}

struct Snapshot {
  std::vector<float> emb, ctr, dense;
  bool operator==(const Snapshot&) const = default;
};
Snapshot Pull(trainer::PsClient& client, const std::vector<uint64_t>& keys) {
  Snapshot s;
  s.emb.resize(keys.size() * kDim);
  s.ctr.resize(keys.size() * kDim);
  s.dense.resize(kDenseSize);
  REQUIRE(client.PullSparse(kEmb, keys, s.emb.data()).get().ok());
  REQUIRE(client.PullSparse(kCtr, keys, s.ctr.data()).get().ok());
  REQUIRE(client.PullDense(kDense, s.dense).get().ok());
  return s;
}

// Everything a checkpoint holds, by table: sparse key -> (flags, payload); dense offset ->
// weight and element state. Files are verified against the manifest first.
using Contents = std::map<uint32_t, std::map<uint64_t, std::vector<float>>>;
Contents ReadCheckpoint(const std::string& dir) {
  auto checkpoint = server::Checkpoint::Open(dir);
  REQUIRE(checkpoint.ok());
  Contents out;
  for (const auto* t : *checkpoint->manifest().tables()) {
    auto& rows = out[t->id()];
    for (const auto* f : *t->files()) {
      REQUIRE(checkpoint->VerifyFile(*f).ok());
      const auto kind = t->dense() ? disk::FileKind::DenseSlice : disk::FileKind::SparseRows;
      auto reader = server::BlockFileReader::Open(checkpoint->FilePath(*f), kind);
      REQUIRE(reader.ok());
      while (true) {
        if (t->dense()) {
          auto block = server::NextDenseBlock(**reader);
          REQUIRE(block.ok());
          if (*block == nullptr) break;
          const auto* b = *block;
          const uint32_t es = t->element_state_floats();
          for (size_t i = 0; i < b->weights()->size(); ++i) {
            auto& v = rows[b->offset() + i];
            v.push_back(b->weights()->Get(i));
            for (uint32_t e = 0; e < es; ++e) v.push_back(b->element_state()->Get(i * es + e));
          }
          if (b->shared_state() != nullptr) {
            auto& shared = rows[UINT64_MAX - f->server()];
            shared.assign(b->shared_state()->begin(), b->shared_state()->end());
          }
          continue;
        }
        auto block = server::NextSparseBlock(**reader);
        REQUIRE(block.ok());
        if (*block == nullptr) break;
        const auto* b = *block;
        // Rows as (flags, payload), payload lengths computed from the manifest's layout.
        size_t offset = 0;
        for (size_t i = 0; i < b->keys()->size(); ++i) {
          const uint8_t flags = b->flags()->Get(i);
          const uint32_t len = server::SavedPayloadFloats(*t, checkpoint->manifest().content(), flags);
          std::vector<float> v = {static_cast<float>(flags)};
          for (uint32_t j = 0; j < len; ++j) v.push_back(b->values()->Get(offset + j));
          offset += len;
          REQUIRE(rows.emplace(b->keys()->Get(i), std::move(v)).second);
        }
        REQUIRE(offset == b->values()->size());
      }
    }
  }
  return out;
}

TEST_CASE("kill -9 after a save, restart with --load: every row is exactly the saved one", "[e2e]") {
  const std::string dir = testing::MakeTempDir("restart");
  // A 2 MB budget per table and server: most emb rows live on RocksDB.
  Cluster cluster(dir, 2, 2u << 20);
  cluster.Start();
  const auto keys = Keys(60000);
  Snapshot saved;
  {
    auto client = cluster.Client();
    Train(*client, keys, 6, 1);
    auto stats = client->Stats();
    REQUIRE(stats.ok());
    CHECK((*stats)[0].disk_rows > (*stats)[0].rows / 2);
    saved = Pull(*client, keys);
    auto result = client->Save(dir + "/ckpt", trainer::kSaveCheckpoint);
    REQUIRE(result.ok());
    CHECK(result->rows == (*stats)[0].rows + (*stats)[2].rows);
    Train(*client, keys, 1, 2);  // not saved: must be gone after the restart
  }
  cluster.Kill9();

  cluster.Start(dir + "/ckpt");
  auto client = cluster.Client();
  CHECK(Pull(*client, keys) == saved);
  // Weights, optimizer state (Adam moments, beta powers, Adagrad sums), CTR statistics and
  // flags: save again and compare the two checkpoints row by row.
  REQUIRE(client->Save(dir + "/again", trainer::kSaveCheckpoint).ok());
  const Contents before = ReadCheckpoint(dir + "/ckpt");
  const Contents after = ReadCheckpoint(dir + "/again");
  REQUIRE(before.size() == 3);
  CHECK(before.at(kEmb).size() > 40000);
  CHECK(before == after);
  // Training goes on from the loaded state.
  Train(*client, keys, 1, 3);
  CHECK(Pull(*client, keys) != saved);
  StopServers(*client);
  for (int i = 0; i < 2; ++i) CHECK(cluster.server(i).Wait(std::chrono::seconds(20)) == 0);
}

TEST_CASE("kill -9 during a save: the previous checkpoint still loads", "[e2e]") {
  const std::string dir = testing::MakeTempDir("killsave");
  const std::string ckpt = dir + "/ckpt";
  Cluster cluster(dir, 1);
  cluster.Start();
  const auto keys = Keys(400000);  // enough rows that a save takes a while
  Snapshot first, second;
  std::string first_version;
  {
    auto client = cluster.Client();
    Train(*client, keys, 1, 4);
    first = Pull(*client, keys);
    auto result = client->Save(ckpt);
    REQUIRE(result.ok());
    first_version = result->version;
    Train(*client, keys, 1, 5);
    second = Pull(*client, keys);
    REQUIRE_FALSE(first == second);

    std::thread saver([&client, &ckpt] {
      auto r = client->Save(ckpt);  // dies with the server
      (void)r;
    });
    // Kill as soon as the new version's temporary directory appears.
    bool seen = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!seen && std::chrono::steady_clock::now() < deadline) {
      for (const auto& e : std::filesystem::directory_iterator(ckpt)) {
        if (e.path().extension() == ".tmp") seen = true;
      }
    }
    cluster.server(0).Signal(SIGKILL);
    saver.join();
    REQUIRE(seen);
  }
  CHECK(cluster.server(0).Wait(std::chrono::seconds(10)) == 128 + SIGKILL);
  const std::string current = testing::ReadFile(ckpt + "/CURRENT");
  CHECK(current == first_version + "\n");

  cluster.Start(ckpt);
  auto client = cluster.Client();
  CHECK(Pull(*client, keys) == first);
  StopServers(*client);
  CHECK(cluster.server(0).Wait(std::chrono::seconds(20)) == 0);
}

TEST_CASE("A checkpoint saved by 2 servers loads into 3", "[e2e]") {
  const std::string dir = testing::MakeTempDir("twothree");
  const auto keys = Keys(30000);
  Snapshot saved;
  uint64_t rows = 0;
  {
    Cluster two(dir, 2);
    two.Start();
    auto client = two.Client();
    Train(*client, keys, 3, 6);
    saved = Pull(*client, keys);
    auto result = client->Save(dir + "/ckpt");
    REQUIRE(result.ok());
    rows = result->rows;
    StopServers(*client);
    for (int i = 0; i < 2; ++i) CHECK(two.server(i).Wait(std::chrono::seconds(20)) == 0);
  }
  Cluster three(dir, 3);
  three.Start(dir + "/ckpt");
  auto client = three.Client();
  CHECK(Pull(*client, keys) == saved);
  auto stats = client->Stats();
  REQUIRE(stats.ok());
  CHECK((*stats)[0].rows + (*stats)[2].rows == rows);
  for (uint64_t per_server : (*stats)[0].rows_per_server) CHECK(per_server > 0);
  StopServers(*client);
  for (int i = 0; i < 3; ++i) CHECK(three.server(i).Wait(std::chrono::seconds(20)) == 0);

  // pserver_tool on the same checkpoint: manifest, dump, verify; a flipped byte is caught.
  auto tool = [&](const std::vector<std::string>& args, const std::string& out) {
    std::vector<std::string> argv = {testing::BinaryPath("tools/pserver_tool/pserver_tool")};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess p;
    REQUIRE(p.Start(argv, {}, out));
    return p.Wait(std::chrono::seconds(30));
  };
  const std::string ckpt = dir + "/ckpt";
  CHECK(tool({"manifest", ckpt}, dir + "/manifest.txt") == 0);
  const std::string manifest = testing::ReadFile(dir + "/manifest.txt");
  CHECK(manifest.find("servers     2") != std::string::npos);
  CHECK(manifest.find("table 0 'emb': sparse, dim 8, 4 shards per server") != std::string::npos);
  CHECK(tool({"verify", ckpt}, dir + "/verify.txt") == 0);
  CHECK(testing::ReadFile(dir + "/verify.txt").find("OK: 14 files") != std::string::npos);
  CHECK(tool({"dump", ckpt, "--table", "emb"}, dir + "/dump.txt") == 0);
  // Every dumped line is key<TAB>8 weights, and the weights are what the servers served.
  std::map<uint64_t, size_t> position;
  for (size_t i = 0; i < keys.size(); ++i) position[keys[i]] = i;
  std::istringstream dump(testing::ReadFile(dir + "/dump.txt"));
  std::string line;
  size_t lines = 0;
  while (std::getline(dump, line)) {
    std::istringstream fields(line);
    uint64_t key = 0;
    fields >> key;
    REQUIRE(position.count(key) == 1);
    for (uint32_t j = 0; j < kDim; ++j) {
      float w = 0;
      fields >> w;
      CHECK(w == saved.emb[position[key] * kDim + j]);  // %.9g round-trips a float exactly
    }
    ++lines;
  }
  CHECK(lines == (*stats)[0].rows);
  auto checkpoint = server::Checkpoint::Open(ckpt);
  REQUIRE(checkpoint.ok());
  const std::string victim = checkpoint->FilePath(*checkpoint->table(kCtr)->files()->Get(1));
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x55');
  }
  CHECK(tool({"verify", ckpt}, dir + "/verify-bad.txt") == 1);
  CHECK(testing::ReadFile(dir + "/verify-bad.txt").find(victim) != std::string::npos);
}

}  // namespace
}  // namespace fleetps
