// AllreduceDenseSync with every heter-trainer a thread of this process (Gloo over loopback)
// and an in-process pserver: a round averages every micro-batch of every rank into one
// hand-computed SGD step; replicas stay bitwise equal and Flush writes them to the
// pserver; idle ranks keep the rounds going; a rank that leaves early still lets the
// others train; a rank that abandons the rounds and dies fails the others' rounds with an
// error, not a hang.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <latch>
#include <optional>
#include <thread>

#include "common/config/trainer_config.h"
#include "test/support/process.h"
#include "test/support/thread_checks.h"
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

using Checks = testing::ThreadChecks;

std::vector<float> Params(AllreduceDenseSync& sync, Checks& check) {
  std::vector<float> p;
  const Status st = sync.DenseParams(0, &p);
  check(st.ok(), "DenseParams: " + st.ToString());
  return p;
}

Status PushAll(AllreduceDenseSync& sync, float value) {
  return sync.Push(0, StepGrads{{}, {}, {}, {}, std::vector<float>(kDim, value)});
}

bool Near(const std::vector<float>& got, const std::vector<float>& want, float margin) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > margin) return false;
  }
  return true;
}

std::vector<float> Minus(std::vector<float> v, float d) {
  for (float& x : v) x -= d;
  return v;
}

// Runs body(rank, sync, check) on `ranks` threads, each with its communicator and an
// AllreduceDenseSync of round interval `interval`.
void OnRanks(Job& job, int ranks, std::chrono::milliseconds interval,
             const std::function<void(uint32_t, AllreduceDenseSync&, Checks&)>& body) {
  std::vector<net::Endpoint> eps;
  for (uint16_t p : testing::FreePorts(ranks)) eps.push_back({"127.0.0.1", p});
  std::vector<std::thread> threads;
  Checks check;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      collective::CollectiveOptions co;
      co.rank = r;
      co.endpoints = eps;
      co.timeout = 20s;
      auto comm = collective::MakeGlooCommunicator(co);
      if (!check(comm.ok(), "rank " + std::to_string(r) + ": " + comm.status().ToString())) return;
      auto sync = AllreduceDenseSync::Create(job.options, job.client(), **comm, interval);
      if (!check(sync.ok(), "rank " + std::to_string(r) + ": " + sync.status().ToString())) return;
      body(r, **sync, check);
    });
  }
  for (auto& t : threads) t.join();
  check.Require();
}

TEST_CASE("A round averages every micro-batch of every heter-trainer into one step; Flush writes the replica") {
  Job job;
  std::vector<std::vector<float>> replicas(2);
  std::latch created(2), pushed(2);
  // An hour between rounds: only the first demand for parameters and the flushes start
  // one, so all three pushes meet in one.
  OnRanks(job, 2, 3600s, [&](uint32_t r, AllreduceDenseSync& sync, Checks& check) {
    // Trainer 0 writes the initial parameters after the heter-trainers have started: the
    // replicas start from them at the first demand.
    if (r == 0) check(job.client().PushDenseParam(1, Initial(1)).get().ok(), "initial push");
    created.arrive_and_wait();
    check(Params(sync, check) == Initial(1), "replicas start from the pservers' parameters");
    if (r == 0) {
      check(PushAll(sync, 1.0f).ok(), "push");
      check(PushAll(sync, 1.0f).ok(), "push");
    } else {
      check(PushAll(sync, 4.0f).ok(), "push");
    }
    pushed.arrive_and_wait();
    const Status flushed = sync.Flush();
    check(flushed.ok(), "flush: " + flushed.ToString());
    replicas[r] = Params(sync, check);
    check(sync.steps() == 1, "one step");
    const Status left = sync.Leave();
    check(left.ok(), "leave: " + left.ToString());
  });
  // Mean of (1, 1, 4) = 2; SGD lr 0.1: w -= 0.2.
  CHECK(Near(replicas[0], Minus(Initial(1), 0.2f), 1e-6f));
  CHECK(replicas[0] == replicas[1]);
  CHECK(job.PserverDense() == replicas[0]);
}

TEST_CASE("Rounds run on their interval while a heter-trainer is idle, and its replica follows the busy one") {
  Job job;
  OnRanks(job, 2, 5ms, [&](uint32_t r, AllreduceDenseSync& sync, Checks& check) {
    check(Params(sync, check) == Initial(0), "start");  // as a lane does before its first micro-batch
    const auto wait_for_steps = [&](uint64_t steps) {
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (sync.steps() < steps && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
      check(sync.steps() == steps, "rank " + std::to_string(r) + " reaches step " + std::to_string(steps));
    };
    if (r == 0) {
      for (uint64_t i = 0; i < 3; ++i) {
        check(PushAll(sync, 1.0f).ok(), "push");
        wait_for_steps(i + 1);  // each push in a round of its own: one step each
      }
    }
    // No flush: the interval's rounds carry the gradients to rank 1 as well.
    wait_for_steps(3);
    check(Near(Params(sync, check), Minus(Initial(0), 0.3f), 1e-5f), "three steps of 0.1");
    check(sync.Leave().ok(), "leave");
  });
  CHECK(job.PserverDense()[1] == Approx(1.0f - 0.3f).margin(1e-5));  // the leave wrote it
}

TEST_CASE("A heter-trainer that leaves early keeps the rounds going until the others have left") {
  Job job;
  std::vector<std::string> checksums(2);
  OnRanks(job, 2, 5ms, [&](uint32_t r, AllreduceDenseSync& sync, Checks& check) {
    if (r == 0) {
      check(sync.Leave().ok(), "leave");  // returns once rank 1 has left too
      check(PushAll(sync, 1.0f).IsUnavailable(), "no push after leaving");
    } else {
      std::this_thread::sleep_for(100ms);
      check(PushAll(sync, 2.0f).IsInvalidArgument(), "no gradient before the start");
      check(Params(sync, check) == Initial(0), "start");
      check(PushAll(sync, 2.0f).ok(), "push");
      check(sync.Flush().ok(), "flush");
      check(Near(Params(sync, check), Minus(Initial(0), 0.2f), 1e-6f), "one step of 0.2");
      check(sync.Leave().ok(), "leave");
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
  Checks check;
  std::thread survivor([&] {
    collective::CollectiveOptions co;
    co.rank = 0;
    co.endpoints = eps;
    co.timeout = 2s;
    auto comm = collective::MakeGlooCommunicator(co);
    if (!check(comm.ok(), comm.status().ToString())) return;
    auto sync = AllreduceDenseSync::Create(job.options, job.client(), **comm, 5ms);
    if (!check(sync.ok(), sync.status().ToString())) return;
    std::this_thread::sleep_for(300ms);  // rank 1 is gone by now
    flushed = (*sync)->Flush();
    pushed = PushAll(**sync, 1.0f);
    left = (*sync)->Leave();
  });
  {
    // Rank 1 meets rank 0 and starts its rounds, then gives up at once (as a heter-trainer
    // whose start fails later does) and disappears.
    collective::CollectiveOptions co;
    co.rank = 1;
    co.endpoints = eps;
    co.timeout = 2s;
    auto comm = collective::MakeGlooCommunicator(co);
    REQUIRE(comm.ok());
    auto sync = AllreduceDenseSync::Create(job.options, job.client(), **comm, 5ms);
    REQUIRE(sync.ok());
    (*sync)->Abandon();
    CHECK((*sync)->Leave().code() == StatusCode::kAborted);
  }
  survivor.join();
  check.Require();
  INFO(flushed.ToString());
  CHECK_FALSE(flushed.ok());
  CHECK_THAT(flushed.ToString(), Catch::Contains("heter dense allreduce"));
  CHECK_FALSE(pushed.ok());
  CHECK_FALSE(left.ok());
}

}  // namespace
}  // namespace fleetps::trainer
