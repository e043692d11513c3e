// InMemoryDataset global shuffle over two real pservers (in-process Apps on loopback
// ports), three trainers shuffling concurrently through their own PsClients. The
// mailbox bound is smaller than one trainer's data, so senders hit Busy and must wait for
// receivers: every record must still arrive exactly once.
#include <catch2/catch.hpp>
#include <algorithm>
#include <tuple>
#include <csignal>
#include <numeric>
#include <thread>

#include "server/app/app.h"
#include "test/support/process.h"
#include "test/trainer/data/data_test_util.h"
#include "trainer/runtime/global_shuffle.h"

namespace fleetps::trainer {
namespace {

constexpr uint32_t kTrainers = 3;
constexpr int kRowsPerFile = 3000;

config::ServerOptions ServerOptions(const std::vector<uint16_t>& ports, uint32_t index, uint64_t mailbox_bytes) {
  config::ServerOptions o;
  for (uint16_t port : ports) o.endpoints.push_back({"127.0.0.1", port});
  o.index = index;
  o.bind_host = "127.0.0.1";
  o.io_threads = 1;
  o.shard_threads = 1;
  o.shuffle_buffer_bytes = mailbox_bytes;
  TableOptions dense;
  dense.id = 0;
  dense.name = "dense";
  dense.kind = TableKind::kDense;
  dense.dim = 4;
  o.tables = {dense};
  return o;
}

// One pserver on a free loopback port, and trainers' clients of it.
struct OneServer {
  std::vector<uint16_t> ports = testing::FreePorts(1);
  server::App app{ServerOptions(ports, 0, 1 << 20)};
  OneServer() { REQUIRE(app.Start().ok()); }
  std::unique_ptr<PsClient> Connect() {
    PsClientOptions co;
    co.servers = {{"127.0.0.1", ports[0]}};
    auto client = PsClient::Connect(co);
    REQUIRE(client.ok());
    return std::move(*client);
  }
};

// The slot-"1" id of every record, in pass order (unique per record: the row number).
std::vector<uint64_t> RowIds(data::InMemoryDataset& dataset) {
  std::vector<uint64_t> ids;
  REQUIRE(dataset.StartPass().ok());
  data::Batch batch;
  while (true) {
    auto more = dataset.NextBatch(&batch);
    REQUIRE(more.ok());
    if (!*more) break;
    ids.insert(ids.end(), batch.slots[0].ids.begin(), batch.slots[0].ids.end());
  }
  return ids;
}

}  // namespace

TEST_CASE("global shuffle through the pservers' mailboxes delivers every record once") {
  data::testing::TempDir dir;
  const auto files = data::testing::WriteNumberedRankDnnFiles(dir, "part", kTrainers, kRowsPerFile);
  const auto ports = testing::FreePorts(2);
  // ~1.1 MB of records per trainer; 256 KiB per server forces Busy retries.
  std::vector<std::unique_ptr<server::App>> servers;
  for (uint32_t i = 0; i < 2; ++i) {
    servers.push_back(std::make_unique<server::App>(ServerOptions(ports, i, 256 << 10)));
    REQUIRE(servers.back()->Start().ok());
  }

  auto run_round = [&](uint64_t seed) {
    std::vector<std::unique_ptr<data::InMemoryDataset>> datasets;
    std::vector<std::unique_ptr<PsClient>> clients;
    for (uint32_t t = 0; t < kTrainers; ++t) {
      datasets.push_back(std::make_unique<data::InMemoryDataset>(data::testing::RankDnnOptions(),
                                                                 std::vector<std::string>{files[t]}, 100, t));
      REQUIRE(datasets.back()->LoadIntoMemory().ok());
      PsClientOptions co;
      for (uint16_t port : ports) co.servers.push_back({"127.0.0.1", port});
      co.io_threads = 1;
      auto client = PsClient::Connect(co);
      REQUIRE(client.ok());
      clients.push_back(std::move(*client));
    }
    std::vector<StatusOr<GlobalShuffleReport>> rounds(kTrainers, Status::Internal("not run"));
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < kTrainers; ++t) {
      threads.emplace_back([&, t] {
        GlobalShuffleOptions o;
        o.trainer_id = t;
        o.trainers_num = kTrainers;
        o.seed = seed;
        o.timeout = std::chrono::seconds(30);
        rounds[t] = GlobalShuffle(*clients[t], *datasets[t], o);
      });
    }
    for (auto& th : threads) th.join();
    std::vector<std::vector<uint64_t>> ids;
    uint64_t busy_retries = 0;
    for (uint32_t t = 0; t < kTrainers; ++t) {
      INFO("trainer " << t << ": " << rounds[t].status().ToString());
      REQUIRE(rounds[t].ok());
      CHECK(rounds[t]->round == rounds[0]->round);  // one round number on every trainer
      CHECK(rounds[t]->records_before == kRowsPerFile);
      CHECK(rounds[t]->records_after == datasets[t]->size());
      busy_retries += rounds[t]->busy_retries;
      ids.push_back(RowIds(*datasets[t]));
    }
    return std::make_tuple(rounds[0]->round, ids, busy_retries);
  };

  const auto [round, ids, busy_first] = run_round(5);
  std::vector<uint64_t> all;
  for (uint32_t t = 0; t < kTrainers; ++t) {
    CHECK(ids[t].size() > kRowsPerFile * 9 / 10);  // destinations are uniform
    CHECK(ids[t].size() < kRowsPerFile * 11 / 10);
    // Records came from every trainer's file (row r is in file r / kRowsPerFile).
    for (uint32_t from = 0; from < kTrainers; ++from) {
      CHECK(std::any_of(ids[t].begin(), ids[t].end(), [&](uint64_t r) { return r / kRowsPerFile == from; }));
    }
    CHECK_FALSE(std::is_sorted(ids[t].begin(), ids[t].end()));  // shuffled within the trainer too
    all.insert(all.end(), ids[t].begin(), ids[t].end());
  }
  std::sort(all.begin(), all.end());
  std::vector<uint64_t> expected(kTrainers * kRowsPerFile);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(all == expected);  // every record exactly once

  // A second round gets a new number and, with the same seed, the same destinations.
  const auto [round2, ids2, busy_second] = run_round(5);
  CHECK(round2 == round + 1);
  // The bound was hit and waited out. (Whether one round hits it depends on the timing of
  // senders and receivers: a round whose receivers always fetched first has no Busy.)
  CHECK(busy_first + busy_second > 0);
  for (uint32_t t = 0; t < kTrainers; ++t) {
    auto a = ids[t], b = ids2[t];
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    CHECK(a == b);
  }
  for (auto& s : servers) s->Shutdown();
}

TEST_CASE("a trainer that never joins makes the others fail with a clear timeout") {
  OneServer server;
  auto client = server.Connect();
  data::InMemoryDataset dataset(data::testing::RankDnnOptions(), {data::testing::kRankDnnSample}, 10, 0);
  REQUIRE(dataset.LoadIntoMemory().ok());
  GlobalShuffleOptions o;
  o.trainers_num = 2;  // trainer 1 never comes
  o.timeout = std::chrono::milliseconds(300);
  auto round = GlobalShuffle(*client, dataset, o);
  REQUIRE_FALSE(round.ok());
  CHECK(round.status().code() == StatusCode::kTimedOut);
  CHECK_THAT(round.status().message(), Catch::Contains("global-shuffle"));
}

// A stop request (SIGTERM to the trainer) ends the shuffle where it waits: at its barrier for
// a trainer that never comes, and for the mail of one that joined the round but sends nothing.
// (The abandoned barrier keeps trainer 0's arrival, so each case has a server of its own.)
TEST_CASE("a stop request ends a global shuffle's waits") {
  data::InMemoryDataset dataset(data::testing::RankDnnOptions(), {data::testing::kRankDnnSample}, 10, 0);
  REQUIRE(dataset.LoadIntoMemory().ok());
  const auto stopped_shuffle = [&](bool trainer1_joins) {
    OneServer server;
    auto client = server.Connect();
    auto silent = server.Connect();
    std::thread joiner;
    if (trainer1_joins) {
      joiner = std::thread([&] { CHECK(silent->Barrier("global-shuffle", 1, 2, std::chrono::minutes(1)).ok()); });
    }
    StopRequest stop;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      stop.Request("stopped by SIGTERM", SIGTERM);
    });
    GlobalShuffleOptions o;
    o.trainers_num = 2;
    o.timeout = std::chrono::minutes(1);
    o.stop = &stop;
    const auto start = std::chrono::steady_clock::now();
    auto round = GlobalShuffle(*client, dataset, o);
    stopper.join();
    if (joiner.joinable()) joiner.join();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    REQUIRE_FALSE(round.ok());
    CHECK(round.status().code() == StatusCode::kAborted);
    return round.status().message();
  };
  CHECK(stopped_shuffle(false) == "stopped by SIGTERM while waiting at barrier 'global-shuffle'");
  CHECK_THAT(stopped_shuffle(true), Catch::StartsWith("stopped by SIGTERM during global shuffle round ") &&
                                        Catch::Contains("the records in this trainer's memory are lost"));
}

}  // namespace fleetps::trainer
