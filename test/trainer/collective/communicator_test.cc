// The Gloo communicator with every rank a thread of this process, over loopback TCP and
// the RPC rendezvous: broadcast makes differently initialized ranks identical, allreduce
// leaves every rank bitwise the same sum (checked against a double-precision reference),
// and a rank that never comes fails the others within the timeout instead of hanging.
#include "trainer/collective/communicator.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "test/support/process.h"
#include "test/support/thread_checks.h"
#include "test/support/tls_files.h"
#include "trainer/collective/rendezvous.h"

namespace fleetps::trainer::collective {
namespace {

using namespace std::chrono_literals;

std::vector<net::Endpoint> Endpoints(int n) {
  std::vector<net::Endpoint> eps;
  for (uint16_t p : testing::FreePorts(n)) eps.push_back({"127.0.0.1", p});
  return eps;
}

// Runs body(comm, check) on `ranks` threads, each with its own communicator.
void OnRanks(int ranks, const std::function<void(Communicator&, testing::ThreadChecks&)>& body) {
  const auto eps = Endpoints(ranks);
  std::vector<std::thread> threads;
  testing::ThreadChecks check;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      CollectiveOptions o;
      o.rank = static_cast<uint32_t>(r);
      o.endpoints = eps;
      o.timeout = 20s;
      auto comm = MakeGlooCommunicator(o);
      if (check(comm.ok(), "rank " + std::to_string(r) + ": " + comm.status().ToString())) body(**comm, check);
    });
  }
  for (auto& t : threads) t.join();
  check.Require();
}

// check(st.ok()) naming the rank and the call.
void CheckOk(testing::ThreadChecks& check, const Communicator& comm, const Status& st, const std::string& call) {
  check(st.ok(), "rank " + std::to_string(comm.rank()) + ": " + call + ": " + st.ToString());
}

TEST_CASE("Broadcast makes every rank hold the root's values") {
  std::vector<std::vector<float>> params(3);
  OnRanks(3, [&](Communicator& comm, testing::ThreadChecks& check) {
    auto& p = params[comm.rank()];
    p.assign(1000, static_cast<float>(comm.rank() + 1));  // initialized differently
    CheckOk(check, comm, comm.Broadcast(p, 1), "Broadcast");
  });
  for (const auto& p : params) CHECK(p == std::vector<float>(1000, 2.0f));
}

TEST_CASE("Allreduce leaves every rank bitwise the same sum") {
  const size_t n = 300001;  // several ring segments, not a multiple of the rank count
  std::vector<std::vector<float>> data(3);
  std::vector<std::vector<double>> counts(3);
  for (int r = 0; r < 3; ++r) {
    std::mt19937 rng(r + 1);
    std::uniform_real_distribution<float> u(-1, 1);
    data[r].resize(n);
    for (float& v : data[r]) v = u(rng);
    counts[r] = {double(r), 1e15, 0.5};
  }
  std::vector<double> want(n, 0.0);
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 0; i < n; ++i) want[i] += data[r][i];
  }
  OnRanks(3, [&](Communicator& comm, testing::ThreadChecks& check) {
    CheckOk(check, comm, comm.AllreduceSum(data[comm.rank()]), "AllreduceSum (floats)");
    CheckOk(check, comm, comm.AllreduceSum(counts[comm.rank()]), "AllreduceSum (doubles)");
    check(comm.backend() == "gloo", "backend " + comm.backend());
    check(comm.size() == 3, "size " + std::to_string(comm.size()));
  });
  CHECK(data[0] == data[1]);  // bitwise: operator== on floats
  CHECK(data[0] == data[2]);
  double max_err = 0;
  for (size_t i = 0; i < n; ++i) max_err = std::max(max_err, std::abs(data[0][i] - want[i]));
  CHECK(max_err < 1e-5);
  for (const auto& c : counts) CHECK(c == std::vector<double>{3, 3e15, 1.5});
}

TEST_CASE("AllreduceMean divides by the world size; one rank is a no-op") {
  std::vector<std::vector<float>> data = {{2, 4}, {4, 8}};
  OnRanks(2, [&](Communicator& comm, testing::ThreadChecks& check) {
    CheckOk(check, comm, AllreduceMean(comm, data[comm.rank()]), "AllreduceMean");
  });
  CHECK(data[0] == std::vector<float>{3, 6});
  CHECK(data[1] == std::vector<float>{3, 6});
  std::vector<float> single = {1, 2};
  OnRanks(1, [&](Communicator& comm, testing::ThreadChecks& check) {
    CheckOk(check, comm, AllreduceMean(comm, single), "AllreduceMean");
    CheckOk(check, comm, comm.Barrier(), "Barrier");
  });
  CHECK(single == std::vector<float>{1, 2});
}

TEST_CASE("A rank that never comes fails the others within the timeout, naming what is missing") {
  const auto eps = Endpoints(3);
  std::vector<Status> results(2);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // rank 2 never starts
    threads.emplace_back([&, r] {
      CollectiveOptions o;
      o.rank = static_cast<uint32_t>(r);
      o.endpoints = eps;
      o.timeout = 1500ms;
      results[r] = MakeGlooCommunicator(o).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& st : results) {
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.message(), Catch::Contains("rank 2 (" + eps[2].ToString() + ") did not join within 1500 ms"));
  }
  CHECK(std::chrono::steady_clock::now() - start < 15s);
}

TEST_CASE("The rendezvous refuses oversized keys and values") {
  auto server = RendezvousServer::Start("127.0.0.1", 0, nullptr);
  REQUIRE(server.ok());
  auto client = RendezvousClient::Connect({"127.0.0.1", (*server)->port()}, 5s, nullptr);
  REQUIRE(client.ok());
  const std::vector<uint8_t> small = {1, 2, 3};
  REQUIRE((*client)->Set("k", small).ok());
  CHECK(*(*client)->Get("k", 1s) == small);
  CHECK((*client)->Get("missing", 100ms).status().IsTimedOut());
  CHECK((*client)->Set(std::string(2000, 'x'), small).IsInvalidArgument());
  CHECK((*client)->Set("big", std::vector<uint8_t>((1u << 20) + 1)).IsInvalidArgument());
}

// The store's total budget: a peer cannot fill rank 0's memory with many keys of allowed
// size; replacing a key gives its old bytes back.
TEST_CASE("The rendezvous holds at most its byte budget and names the option when full") {
  auto server = RendezvousServer::Start("127.0.0.1", 0, nullptr, nullptr, /*budget_bytes=*/4096);
  REQUIRE(server.ok());
  auto client = RendezvousClient::Connect({"127.0.0.1", (*server)->port()}, 5s, nullptr);
  REQUIRE(client.ok());
  const std::vector<uint8_t> kib(1024, 7);
  for (int i = 0; i < 3; ++i) REQUIRE((*client)->Set("k" + std::to_string(i), kib).ok());
  CHECK((*server)->stored_bytes() == 3 * (2 + 1024));
  const Status full = (*client)->Set("k3", std::vector<uint8_t>(1100));
  CHECK(full.IsInvalidArgument());
  CHECK_THAT(full.message(),
             Catch::Contains("past its budget of 4096") && Catch::Contains("fleetps.collective.store_budget_bytes"));
  CHECK((*client)->Get("k3", 50ms).status().IsTimedOut());       // not stored
  REQUIRE((*client)->Set("k0", std::vector<uint8_t>(10)).ok());  // gives 1014 bytes back
  CHECK((*server)->stored_bytes() == 2 * (2 + 1024) + 2 + 10);
  REQUIRE((*client)->Set("k3", std::vector<uint8_t>(1100)).ok());
  CHECK(*(*client)->Get("k0", 1s) == std::vector<uint8_t>(10));
}

// With the cluster's secret the store serves only peers that prove they hold it.
TEST_CASE("With a secret the rendezvous refuses a peer that does not authenticate") {
  auto key = std::make_shared<const net::AuthKey>("the ranks' shared secret");
  auto server = RendezvousServer::Start("127.0.0.1", 0, key);
  REQUIRE(server.ok());
  auto ranked = RendezvousClient::Connect({"127.0.0.1", (*server)->port()}, 5s, key);
  REQUIRE(ranked.ok());
  REQUIRE((*ranked)->Set("k", std::vector<uint8_t>{1}).ok());
  auto plain = RendezvousClient::Connect({"127.0.0.1", (*server)->port()}, 1s, nullptr);
  if (plain.ok()) {
    const Status st = (*plain)->Set("k", std::vector<uint8_t>(1000));
    CHECK(st.code() == StatusCode::kPermissionDenied);
  }
  auto wrong = RendezvousClient::Connect({"127.0.0.1", (*server)->port()}, 1s,
                                         std::make_shared<const net::AuthKey>("not the ranks' secret"));
  if (wrong.ok()) CHECK_FALSE((*wrong)->Set("k", std::vector<uint8_t>(1000)).ok());
  CHECK(*(*ranked)->Get("k", 1s) == std::vector<uint8_t>{1});
  CHECK((*server)->stored_bytes() == 2);
}

// Once every rank is connected nobody reads the store again: rank 0 closes its port, so
// nothing can reach it for the rest of the job.
TEST_CASE("Rank 0 closes the rendezvous once the group has formed") {
  for (int ranks : {2, 8}) {
    const auto eps = Endpoints(ranks);
    std::vector<std::unique_ptr<Communicator>> comms(ranks);
    std::vector<std::thread> threads;
    testing::ThreadChecks check;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        CollectiveOptions o;
        o.rank = static_cast<uint32_t>(r);
        o.endpoints = eps;
        o.timeout = 20s;
        auto comm = MakeGlooCommunicator(o);
        if (check(comm.ok(), "rank " + std::to_string(r) + ": " + comm.status().ToString())) {
          comms[r] = std::move(*comm);
        }
      });
    }
    for (auto& t : threads) t.join();
    check.Require();
    INFO(ranks << " ranks");
    CHECK_FALSE(RendezvousClient::Connect(eps[0], 300ms, nullptr).ok());  // refused: nothing listens
    // The group still works without it.
    std::vector<std::vector<float>> data(ranks, std::vector<float>(4, 1.0f));
    std::vector<std::thread> ops;
    for (int r = 0; r < ranks; ++r) {
      ops.emplace_back([&, r] { CheckOk(check, *comms[r], comms[r]->AllreduceSum(data[r]), "AllreduceSum"); });
    }
    for (auto& t : ops) t.join();
    check.Require();
    for (const auto& d : data) CHECK(d == std::vector<float>(4, static_cast<float>(ranks)));
  }
}

// A cluster with TLS files: the rendezvous runs over TLS (rank 0 serves with its
// certificate, the others verify it against the CA); a plain client cannot use it.
TEST_CASE("With the cluster's TLS files the rendezvous runs over TLS and the ranks still agree") {
  const std::string dir = testing::MakeTempDir("collective_tls");
  testing::TlsTestFiles files;
  REQUIRE(testing::MakeTlsFiles(dir, "ranks", "IP:127.0.0.1", &files));
  auto tls = net::TlsContext::Load({files.cert_file, files.key_file, files.ca_file});
  REQUIRE(tls.ok());

  auto server = RendezvousServer::Start("127.0.0.1", 0, nullptr, *tls);
  REQUIRE(server.ok());
  auto client = RendezvousClient::Connect({"127.0.0.1", (*server)->port()}, 5s, nullptr, *tls);
  REQUIRE(client.ok());
  const std::vector<uint8_t> id = {7, 8, 9};
  REQUIRE((*client)->Set("nccl-id", id).ok());
  CHECK(*(*client)->Get("nccl-id", 1s) == id);
  auto plain = RendezvousClient::Connect({"127.0.0.1", (*server)->port()}, 1s, nullptr);
  if (plain.ok()) CHECK_FALSE((*plain)->Get("nccl-id", 500ms).ok());  // never answered in plain text

  // Gloo ranks that meet through a TLS rendezvous.
  const auto eps = Endpoints(2);
  std::vector<std::vector<float>> params(2);
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CollectiveOptions o;
      o.rank = static_cast<uint32_t>(r);
      o.endpoints = eps;
      o.timeout = 20s;
      o.tls = *tls;
      auto comm = MakeGlooCommunicator(o);
      results[r] = comm.status();
      if (!comm.ok()) return;
      params[r].assign(100, static_cast<float>(r + 1));
      results[r] = (*comm)->Broadcast(params[r], 0);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << results[r].ToString());
    REQUIRE(results[r].ok());
    CHECK(params[r] == std::vector<float>(100, 1.0f));
  }
}

}  // namespace
}  // namespace fleetps::trainer::collective
