// AllreduceDenseSync with every heter-trainer a thread of this process (Gloo over loopback)
// and an in-process pserver: a round averages every micro-batch of every rank into one
// hand-computed SGD step; replicas stay bitwise equal and Flush writes them to the
// pserver; idle ranks keep the rounds going; a rank that leaves early still lets the
// others train; a rank that dies fails the others' rounds with an error, not a hang.
#include <catch2/catch.hpp>

#include <functional>
#include <latch>
#include <optional>
#include <thread>

#include "common/config/trainer_config.h"
#include "test/support/process.h"
#include "test/trainer/runtime/local_pserver.h"
#include "trainer/collective/communicator.h"
#include "trainer/runtime/allreduce_dense_sync.h"

namespace fleetps::trainer {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kDim = 8;

// Dense parameters: i + 0.25 * variant.
std::vector<float> Initial(uint32_t variant) {
  std::vector<float> p(kDim);
  for (uint32_t i = 0; i < kDim; ++i) p[i] = static_cast<float>(i) + 0.25f * static_cast<float>(variant);
  return p;
}

// A dense table of kDim floats (SGD, lr 0.1) on an in-process pserver.
struct Job {
  config::TrainerOptions options;
  std::optional<testing::LocalPserver> pserver;

  Job() {
    options.dense_table.id = 1;
    options.dense_table.name = "dense";
    options.dense_table.kind = TableKind::kDense;
    options.dense_table.dim = kDim;
    options.dense_table.shards = 1;
    options.dense_table.optimizer.kind = OptimizerKind::kSgd;
    options.dense_table.optimizer.learning_rate = 0.1f;
    pserver.emplace(std::vector<TableOptions>{options.dense_table});
    REQUIRE(client().PushDenseParam(1, Initial(0)).get().ok());  // as trainer 0 does at its start
  }
  PsClient& client() { return *pserver->client; }
  std::vector<float> PserverDense() {
    std::vector<float> values(kDim);
    REQUIRE(client().PullDense(1, values).get().ok());
    return values;
  }
};

std::vector<float> Params(AllreduceDenseSync& sync) {
  std::vector<float> p;
  REQUIRE(sync.DenseParams(0, &p).ok());
  return p;
}

Status PushAll(AllreduceDenseSync& sync, float value) {
  return sync.Push(0, StepGrads{{}, {}, {}, {}, std::vector<float>(kDim, value)});
}

// Runs body(rank, sync) on `ranks` threads, each with its communicator (timeout
// `timeout`) and an AllreduceDenseSync of round interval `interval`.
void OnRanks(Job& job, int ranks, std::chrono::milliseconds interval,
             const std::function<void(uint32_t, AllreduceDenseSync&)>& body,
             std::chrono::milliseconds timeout = 20s) {
  std::vector<net::Endpoint> eps;
  for (uint16_t p : testing::FreePorts(ranks)) eps.push_back({"127.0.0.1", p});
  std::vector<std::thread> threads;
  std::vector<std::string> errors(ranks);
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      collective::CollectiveOptions co;
      co.rank = r;
      co.endpoints = eps;
      co.timeout = timeout;
      auto comm = collective::MakeGlooCommunicator(co);
      if (!comm.ok()) return void(errors[r] = comm.status().ToString());
      auto sync = AllreduceDenseSync::Create(job.options, job.client(), **comm, interval);
      if (!sync.ok()) return void(errors[r] = sync.status().ToString());
      body(r, **sync);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
}

TEST_CASE("A round averages every micro-batch of every heter-trainer into one step; Flush writes the replica") {
  Job job;
  std::vector<std::vector<float>> replicas(2);
  std::vector<Status> flushed(2), left(2);
  std::latch created(2), pushed(2);
  // An hour between rounds: only the first demand for parameters and the flushes start
  // one, so all three pushes meet in one.
  OnRanks(job, 2, 3600s, [&](uint32_t r, AllreduceDenseSync& sync) {
    // Trainer 0 writes the initial parameters after the heter-trainers have started: the
    // replicas start from them at the first demand.
    if (r == 0) REQUIRE(job.client().PushDenseParam(1, Initial(1)).get().ok());
    created.arrive_and_wait();
    CHECK(Params(sync) == Initial(1));
    if (r == 0) {
      REQUIRE(PushAll(sync, 1.0f).ok());
      REQUIRE(PushAll(sync, 1.0f).ok());
    } else {
      REQUIRE(PushAll(sync, 4.0f).ok());
    }
    pushed.arrive_and_wait();
    flushed[r] = sync.Flush();
    replicas[r] = Params(sync);
    CHECK(sync.steps() == 1);
    left[r] = sync.Leave();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(flushed[r].ok());
    CHECK(left[r].ok());
  }
  // Mean of (1, 1, 4) = 2; SGD lr 0.1: w -= 0.2.
  const std::vector<float> start = Initial(1);
  for (uint32_t i = 0; i < kDim; ++i) CHECK(replicas[0][i] == Approx(start[i] - 0.2f).margin(1e-6));
  CHECK(replicas[0] == replicas[1]);
  CHECK(job.PserverDense() == replicas[0]);
}

TEST_CASE("Rounds run on their interval while a heter-trainer is idle, and its replica follows the busy one") {
  Job job;
  OnRanks(job, 2, 5ms, [&](uint32_t r, AllreduceDenseSync& sync) {
    CHECK(Params(sync) == Initial(0));  // as a lane does before its first micro-batch
    const auto wait_for_steps = [&](uint64_t steps) {
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (sync.steps() < steps && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
      REQUIRE(sync.steps() == steps);
    };
    if (r == 0) {
      for (uint64_t i = 0; i < 3; ++i) {
        REQUIRE(PushAll(sync, 1.0f).ok());
        wait_for_steps(i + 1);  // each push in a round of its own: one step each
      }
    }
    // No flush: the interval's rounds carry the gradients to rank 1 as well.
    wait_for_steps(3);
    const std::vector<float> start = Initial(0), now = Params(sync);
    for (uint32_t i = 0; i < kDim; ++i) CHECK(now[i] == Approx(start[i] - 0.3f).margin(1e-5));
    CHECK(sync.Leave().ok());
  });
  CHECK(job.PserverDense()[1] == Approx(1.0f - 0.3f).margin(1e-5));  // the leave wrote it
}

TEST_CASE("A heter-trainer that leaves early keeps the rounds going until the others have left") {
  Job job;
  std::vector<std::string> checksums(2);
  OnRanks(job, 2, 5ms, [&](uint32_t r, AllreduceDenseSync& sync) {
    if (r == 0) {
      CHECK(sync.Leave().ok());  // returns once rank 1 has left too
      CHECK(PushAll(sync, 1.0f).IsUnavailable());
    } else {
      std::this_thread::sleep_for(100ms);
      CHECK(PushAll(sync, 2.0f).IsInvalidArgument());  // no gradient before the start
      CHECK(Params(sync) == Initial(0));
      REQUIRE(PushAll(sync, 2.0f).ok());
      CHECK(sync.Flush().ok());
      CHECK(Params(sync)[0] == Approx(0.0f - 0.2f).margin(1e-6));
      CHECK(sync.Leave().ok());
    }
    checksums[r] = sync.Checksum();
  });
  CHECK(checksums[0] == checksums[1]);
  CHECK(job.PserverDense()[0] == Approx(-0.2f).margin(1e-6));
}

TEST_CASE("A heter-trainer that dies fails the others' rounds; Push and Flush then return the error") {
  Job job;
  std::vector<net::Endpoint> eps;
  for (uint16_t p : testing::FreePorts(2)) eps.push_back({"127.0.0.1", p});
  Status flushed, pushed, left;
  std::thread survivor([&] {
    collective::CollectiveOptions co;
    co.rank = 0;
    co.endpoints = eps;
    co.timeout = 2s;
    auto comm = collective::MakeGlooCommunicator(co);
    REQUIRE(comm.ok());
    auto sync = AllreduceDenseSync::Create(job.options, job.client(), **comm, 5ms);
    REQUIRE(sync.ok());
    std::this_thread::sleep_for(300ms);  // rank 1 is gone by now
    flushed = (*sync)->Flush();
    pushed = PushAll(**sync, 1.0f);
    left = (*sync)->Leave();
  });
  {
    // Rank 1 meets rank 0, then disappears without a round.
    collective::CollectiveOptions co;
    co.rank = 1;
    co.endpoints = eps;
    co.timeout = 2s;
    auto comm = collective::MakeGlooCommunicator(co);
    REQUIRE(comm.ok());
  }
  survivor.join();
  INFO(flushed.ToString());
  CHECK_FALSE(flushed.ok());
  CHECK_THAT(flushed.ToString(), Catch::Contains("heter dense allreduce"));
  CHECK_FALSE(pushed.ok());
  CHECK_FALSE(left.ok());
}

}  // namespace
}  // namespace fleetps::trainer
