// Two real pserver processes on loopback, four concurrent PsClients pushing known
// gradients with SGD lr=1, and a misbehaving peer sending garbage, truncated frames,
// unknown tables and wrong dimensions at the same time. Afterwards every row must
// equal exactly the negated sum of the acknowledged gradients: no update lost or
// applied twice, and the bad peer disturbed nobody.
#include <signal.h>

#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <deque>
#include <random>
#include <thread>

#include "common/net/frame.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_client.h"
#include "common/sharding.h"
#include "schemas/ps_generated.h"
#include "test/support/process.h"
#include "trainer/client/ps_client.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
constexpr uint32_t kDim = 4;
constexpr uint64_t kKeys = 500;
constexpr uint64_t kDense = 10;

std::string ClusterYaml(const std::vector<uint16_t>& ports) {
  return "server:\n  endpoints: [\"127.0.0.1:" + std::to_string(ports[0]) +
         "\", \"127.0.0.1:" + std::to_string(ports[1]) +
         "\"]\n  io_threads: 2\n  shard_threads: 2\n"
         "tables:\n"
         "  - {id: 0, name: emb, kind: sparse, dim: 4, shards: 4,\n"
         "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n"
         "  - {id: 1, name: dense, kind: dense, size: 10,\n"
         "     optimizer: {name: sgd, learning_rate: 1.0}, initializer: {name: zeros}}\n";
}

struct Cluster {
  std::string dir = testing::MakeTempDir("ps_cluster");
  std::vector<uint16_t> ports = testing::FreePorts(2);
  ChildProcess servers[2];

  Cluster() {
    testing::WriteFile(dir + "/ps.yaml", ClusterYaml(ports));
    for (int i = 0; i < 2; ++i) {
      REQUIRE(servers[i].Start(
          {testing::BinaryPath("server/pserver"), "--config", dir + "/ps.yaml", "--index", std::to_string(i)}, {},
          dir + "/pserver" + std::to_string(i) + ".log"));
    }
    for (uint16_t p : ports) REQUIRE(testing::WaitForPort(p, std::chrono::seconds(10)));
  }
  trainer::PsClientOptions ClientOptions() const {
    trainer::PsClientOptions o;
    o.servers = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
    o.io_threads = 1;
    return o;
  }
};

flatbuffers::DetachedBuffer PushRequest(uint32_t table, const std::vector<uint64_t>& keys, size_t grads) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<float> g(grads, 1.0f);
  fbb.Finish(wire::CreatePushSparseRequest(fbb, table, fbb.CreateVector(keys), fbb.CreateVector(g)));
  return fbb.Release();
}

flatbuffers::DetachedBuffer ShuffleRequest(uint32_t to, const std::vector<uint8_t>& block) {
  flatbuffers::FlatBufferBuilder fbb;
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> block_off;
  if (!block.empty()) block_off = fbb.CreateVector(block);
  fbb.Finish(wire::CreateShuffleSendRequest(fbb, 1, 0, to, block_off, true));
  return fbb.Release();
}

// Sends every kind of bad input until `stop`; counts the error replies it got.
// Catch2 assertions are not thread-safe: this thread only counts; the test checks.
void Misbehave(const Cluster& cluster, std::atomic<bool>& stop, std::atomic<int>& errors_seen,
               std::atomic<int>& wrong_answers) {
  namespace asio = boost::asio;
  std::mt19937 rng(99);
  net::IoThreads io(1);
  net::RpcClient raw(io, net::Endpoint{"127.0.0.1", cluster.ports[0]}, net::RpcClientOptions{});
  if (!raw.Connect().ok()) {
    ++wrong_answers;
    return;
  }
  // A key owned by server 1, sent to server 0.
  uint64_t foreign = 0;
  while (ServerOfKey(foreign, 2) != 1) ++foreign;
  while (!stop) {
    {  // random garbage on a fresh connection
      asio::io_context ctx;
      asio::ip::tcp::socket s(ctx);
      s.connect({asio::ip::make_address("127.0.0.1"), cluster.ports[rng() % 2]});
      std::vector<uint8_t> junk(1 + rng() % 200);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      boost::system::error_code ec;
      asio::write(s, asio::buffer(junk), ec);
    }
    {  // a truncated frame, then hang up
      asio::io_context ctx;
      asio::ip::tcp::socket s(ctx);
      s.connect({asio::ip::make_address("127.0.0.1"), cluster.ports[rng() % 2]});
      uint8_t h[net::kFrameHeaderSize];
      net::EncodeFrameHeader(static_cast<uint16_t>(wire::MessageType::PushSparse), 1, 1000, h);
      boost::system::error_code ec;
      asio::write(s, asio::buffer(h, sizeof(h)), ec);
      asio::write(s, asio::buffer(h, 7), ec);
    }
    // Semantic errors on a well-framed connection: each must be answered with an error.
    const auto type = static_cast<uint16_t>(wire::MessageType::PushSparse);
    auto r1 = raw.CallSync(type, PushRequest(42, {1, 2}, 2 * kDim));  // unknown table
    auto r2 = raw.CallSync(type, PushRequest(0, {foreign}, kDim));    // wrong server
    std::vector<uint64_t> own;
    for (uint64_t k = 0; own.size() < 2; ++k) {
      if (ServerOfKey(k, 2) == 0) own.push_back(k);
    }
    auto r3 = raw.CallSync(type, PushRequest(0, own, 3));         // wrong dimension
    auto r4 = raw.CallSync(type, PushRequest(1, own, 2 * kDim));  // dense table as sparse
    auto r5 = raw.CallSync(type, PushRequest(0, {}, 0));          // empty batch
    // Shuffle mail whose block is not a RecordBlock, and mail for a trainer of server 1.
    const auto shuffle = static_cast<uint16_t>(wire::MessageType::ShuffleSend);
    auto r6 = raw.CallSync(shuffle, ShuffleRequest(0, {1, 2, 3, 4, 5, 6, 7, 8, 9}));
    auto r7 = raw.CallSync(shuffle, ShuffleRequest(1, {}));
    const bool all_refused = r1.status().IsNotFound() && r2.status().IsInvalidArgument() &&
                             r3.status().IsInvalidArgument() && r4.status().IsNotFound() &&
                             r5.status().IsInvalidArgument() && r6.status().IsInvalidArgument() &&
                             r7.status().IsInvalidArgument();
    if (!all_refused || r3.status().message().find("table 'emb'") == std::string::npos ||
        r6.status().message().find("malformed ShuffleSend") == std::string::npos ||
        r7.status().message().find("go to pserver 1") == std::string::npos) {
      ++wrong_answers;
    }
    errors_seen += 7;
  }
}

TEST_CASE("Concurrent pushes to 2 pservers are applied exactly once while a bad peer misbehaves") {
  Cluster cluster;
  constexpr int kClients = 4;
  // acked[c][key] = pushes of `key` by client c acknowledged by the servers.
  std::vector<std::vector<uint64_t>> acked(kClients, std::vector<uint64_t>(kKeys, 0));
  std::vector<uint64_t> dense_acked(kClients, 0);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};

  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = trainer::PsClient::Connect(cluster.ClientOptions());
      if (!client.ok()) {
        ++failures;
        return;
      }
      std::mt19937_64 rng(c);
      struct InFlight {
        std::future<Status> done;
        std::vector<uint64_t> keys;
        std::vector<float> grads;
        bool dense = false;
      };
      std::deque<InFlight> flight;
      auto retire = [&](InFlight& f) {
        if (!f.done.get().ok()) {
          ++failures;
          return;
        }
        if (f.dense) {
          ++dense_acked[c];
        } else {
          for (uint64_t k : f.keys) ++acked[c][k];
        }
      };
      while (!stop) {
        InFlight f;
        if (rng() % 8 == 0) {
          f.dense = true;
          f.grads.assign(kDense, static_cast<float>(c + 1));
          f.done = (*client)->PushDense(1, f.grads);
        } else {
          const size_t n = 1 + rng() % 64;
          for (size_t i = 0; i < n; ++i) f.keys.push_back(rng() % kKeys);  // duplicates included
          // Gradient of client c, column j: (c + 1) * (j + 1); integers keep sums exact.
          for (size_t i = 0; i < n; ++i) {
            for (uint32_t j = 0; j < kDim; ++j) f.grads.push_back(static_cast<float>((c + 1) * (j + 1)));
          }
          f.done = (*client)->PushSparse(0, f.keys, f.grads);
        }
        flight.push_back(std::move(f));
        if (flight.size() >= 8) {
          retire(flight.front());
          flight.pop_front();
        }
      }
      for (auto& f : flight) retire(f);
    });
  }
  std::atomic<int> errors_seen{0}, wrong_answers{0};
  std::thread bad([&] { Misbehave(cluster, stop, errors_seen, wrong_answers); });

  std::this_thread::sleep_for(std::chrono::seconds(3));
  stop = true;
  for (auto& t : clients) t.join();
  bad.join();
  CHECK(failures == 0);
  CHECK(errors_seen > 0);
  CHECK(wrong_answers == 0);

  auto client = trainer::PsClient::Connect(cluster.ClientOptions());
  REQUIRE(client.ok());
  std::vector<uint64_t> keys(kKeys);
  for (uint64_t k = 0; k < kKeys; ++k) keys[k] = k;
  std::vector<float> values(kKeys * kDim, -1.0f);
  REQUIRE((*client)->PullSparse(0, keys, values.data()).get().ok());
  uint64_t total_pushes = 0;
  for (uint64_t k = 0; k < kKeys; ++k) {
    double expected_unit = 0;  // sum over clients of acked * (c + 1)
    for (int c = 0; c < kClients; ++c) {
      expected_unit += static_cast<double>(acked[c][k]) * (c + 1);
      total_pushes += acked[c][k];
    }
    for (uint32_t j = 0; j < kDim; ++j) {
      INFO("key " << k << " column " << j);
      REQUIRE(values[k * kDim + j] == static_cast<float>(-expected_unit * (j + 1)));
    }
  }
  CHECK(total_pushes > 1000);  // the test really pushed
  std::vector<float> dense(kDense);
  REQUIRE((*client)->PullDense(1, dense).get().ok());
  double dense_expected = 0;
  for (int c = 0; c < kClients; ++c) dense_expected += static_cast<double>(dense_acked[c]) * (c + 1);
  for (float v : dense) REQUIRE(v == static_cast<float>(-dense_expected));

  // Stats agree with what was pushed: every pushed key has a row, on its own server.
  auto stats = (*client)->Stats();
  REQUIRE(stats.ok());
  uint64_t pushed_keys = 0;
  for (uint64_t k = 0; k < kKeys; ++k) {
    uint64_t n = 0;
    for (int c = 0; c < kClients; ++c) n += acked[c][k];
    pushed_keys += n > 0;
  }
  CHECK((*stats)[0].name == "emb");
  CHECK((*stats)[0].rows == pushed_keys);

  // Both servers stop cleanly on request and exit 0.
  REQUIRE((*client)->StopServers("test done").ok());
  client->reset();
  for (auto& s : cluster.servers) CHECK(s.Wait(std::chrono::seconds(20)) == 0);
}

TEST_CASE("SIGTERM drains and exits 0; a trainer then sees the server as unavailable") {
  Cluster cluster;
  auto options = cluster.ClientOptions();
  options.rpc.request_timeout = std::chrono::milliseconds(2000);  // the pull below waits this long
  auto client = trainer::PsClient::Connect(options);
  REQUIRE(client.ok());
  std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> grads(keys.size() * kDim, 1.0f);
  REQUIRE((*client)->PushSparse(0, keys, grads).get().ok());
  cluster.servers[0].Signal(SIGTERM);
  cluster.servers[1].Signal(SIGINT);
  CHECK(cluster.servers[0].Wait(std::chrono::seconds(20)) == 0);
  CHECK(cluster.servers[1].Wait(std::chrono::seconds(20)) == 0);
  std::vector<float> values(keys.size() * kDim);
  Status st = (*client)->PullSparse(0, keys, values.data()).get();
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("127.0.0.1:") != std::string::npos);
  const std::string log = testing::ReadFile(cluster.dir + "/pserver0.log");
  CHECK(log.find("listening on") != std::string::npos);
  CHECK(log.find("SIGTERM") != std::string::npos);
}

// The end of a job: pservers exit by themselves once every trainer has ended, so one may be
// gone before trainer 0's Stop reaches it. That counts as stopped at the end of a job, but not
// for an operator's plain Stop; the servers still up are stopped either way.
TEST_CASE("StopServers at the end of a job counts a server that is already gone as stopped") {
  Cluster cluster;
  auto options = cluster.ClientOptions();
  auto client = trainer::PsClient::Connect(options);
  REQUIRE(client.ok());
  cluster.servers[0].Signal(SIGTERM);
  REQUIRE(cluster.servers[0].Wait(std::chrono::seconds(20)) == 0);

  const auto started = std::chrono::steady_clock::now();
  Status at_end = (*client)->StopServers("training finished",
                                         {.timeout = std::chrono::milliseconds(1500), .gone_is_stopped = true});
  CHECK(at_end.ok());
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));  // bounded, not a hang
  CHECK(cluster.servers[1].Wait(std::chrono::seconds(20)) == 0);                 // the server still up got its Stop
  CHECK(testing::ReadFile(cluster.dir + "/pserver1.log").find("stop requested") != std::string::npos);

  // An operator's Stop reports the server it could not reach.
  Status strict = (*client)->StopServers("operator stop", {.timeout = std::chrono::milliseconds(1500)});
  CHECK(strict.IsUnavailable());
  CHECK(strict.message().find("127.0.0.1:" + std::to_string(cluster.ports[0])) != std::string::npos);
}

}  // namespace
}  // namespace fleetps
