// CollectiveSync with every rank a thread of this process (Gloo over loopback): 2 ranks of
// batch B follow 1 rank of batch 2B; ranks hold bitwise-equal replicas; uneven shards end
// without deadlock with and without drop_last; learning-rate scaling and warm-up match
// hand-computed SGD steps; different initial draws end up as rank 0's.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "common/config/trainer_config.h"
#include "test/support/process.h"
#include "test/support/thread_checks.h"
#include "test/trainer/runtime/local_pserver.h"
#include "trainer/collective/communicator.h"
#include "trainer/model/dense_net.h"
#include "trainer/runtime/collective_sync.h"

namespace fleetps::trainer {
namespace {

using namespace std::chrono_literals;

// A job of an mlp over 6 inputs (one hidden layer of 5, softmax2), SGD lr 0.1, and an
// in-process pserver holding its dense table (CollectiveSync::Flush writes there).
struct CollectiveJob {
  config::TrainerOptions options;
  std::optional<testing::LocalPserver> pserver;
  model::DenseNet net;

  explicit CollectiveJob(config::LrScaling scaling = config::LrScaling::kNone, uint32_t warmup = 0,
                         bool drop_last = false, size_t in_dim = 6, uint32_t hidden = 5)
      : net(in_dim, {hidden}, OutputKind::kSoftmax2) {
    options.model.type = ModelType::kMlp;
    options.dense_table.id = 1;
    options.dense_table.name = "dense";
    options.dense_table.kind = TableKind::kDense;
    options.dense_table.dim = net.num_params();
    options.dense_table.shards = 1;
    options.dense_table.optimizer.kind = OptimizerKind::kSgd;
    options.dense_table.optimizer.learning_rate = 0.1f;
    options.sync_mode = config::SyncMode::kCollective;
    options.collective.lr_scaling = scaling;
    options.collective.warmup_steps = warmup;
    options.collective.drop_last = drop_last;
    pserver.emplace(std::vector<TableOptions>{options.dense_table});
  }
  PsClient& client() { return *pserver->client; }
};

// Runs body(rank, sync, check) on `ranks` threads, each with its communicator and CollectiveSync
// started from initial parameters drawn with seed 7 + rank.
void OnRanks(CollectiveJob& job, int ranks,
             const std::function<void(uint32_t, CollectiveSync&, testing::ThreadChecks&)>& body) {
  std::vector<net::Endpoint> eps;
  for (uint16_t p : testing::FreePorts(ranks)) eps.push_back({"127.0.0.1", p});
  std::vector<std::thread> threads;
  testing::ThreadChecks check;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto options = job.options;
      options.trainer_id = r;
      options.trainers_num = ranks;
      collective::CollectiveOptions co;
      co.rank = r;
      co.endpoints = eps;
      co.timeout = 20s;
      auto comm = collective::MakeGlooCommunicator(co);
      const std::string rank = "rank " + std::to_string(r) + ": ";
      if (!check(comm.ok(), rank + comm.status().ToString())) return;
      auto sync = CollectiveSync::Create(options, job.client(), **comm);
      if (!check(sync.ok(), rank + sync.status().ToString())) return;
      std::vector<float> init(job.net.num_params());
      job.net.InitParams(init, 7 + r);
      const Status st = (*sync)->SetInitialParams(init);
      if (!check(st.ok(), rank + st.ToString())) return;
      body(r, **sync, check);
    });
  }
  for (auto& t : threads) t.join();
  check.Require();
}

// EndStep(0, out_of_data); records a failed call as a failure. Whether every rank is done.
bool EndStep(CollectiveSync& sync, bool out_of_data, testing::ThreadChecks& check) {
  auto done = sync.EndStep(0, out_of_data);
  return !check(done.ok(), "EndStep: " + done.status().ToString()) || *done;
}

struct Batches {
  size_t width;
  std::vector<std::vector<float>> x, y;  // per step: [rows x width], [rows]
  Batches(int steps, size_t rows, uint32_t seed, size_t w = 6) : width(w) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int s = 0; s < steps; ++s) {
      x.emplace_back(rows * width);
      y.emplace_back(rows);
      for (float& v : x.back()) v = u(rng);
      for (size_t i = 0; i < rows; ++i) {
        y.back()[i] = static_cast<float>(x.back()[i * width] + x.back()[i * width + 1] > 0);
      }
    }
  }
};

// One training step on rows [begin, end) of a batch; returns the loss. With `hook`, each
// layer's gradients go to the sync from the backward pass, as the Trainer does.
float Step(const model::DenseNet& net, CollectiveSync& sync, testing::ThreadChecks& check, const Batches& b, int step,
           size_t begin, size_t end, bool hook = false) {
  std::vector<float> params, grads(net.num_params());
  const Status pulled = sync.DenseParams(0, &params);
  if (!check(pulled.ok(), "DenseParams: " + pulled.ToString())) return 0.0f;
  model::DenseNet::Workspace ws;
  const size_t rows = end - begin, w = b.width;
  std::span<const float> x(b.x[step].data() + begin * w, rows * w), y(b.y[step].data() + begin, rows);
  model::DenseNet::GradsReady ready;
  if (hook) ready = [&](size_t lo, size_t hi) { sync.GradsReady(grads, lo, hi); };
  const float loss = net.ForwardBackward(params, x, y, rows, grads, {}, &ws, ready);
  const Status pushed = sync.Push(0, StepGrads{{}, {}, {}, {}, grads});
  check(pushed.ok(), "Push: " + pushed.ToString());
  return loss;
}

TEST_CASE("2 ranks of batch B follow 1 rank of batch 2B, and the ranks stay bitwise equal") {
  CollectiveJob job;
  const int steps = 20;
  const size_t B = 16;
  Batches batches(steps, 2 * B, 3);
  std::vector<float> single, single_losses(steps);
  OnRanks(job, 1, [&](uint32_t, CollectiveSync& sync, testing::ThreadChecks& check) {
    for (int s = 0; s < steps; ++s) {
      single_losses[s] = Step(job.net, sync, check, batches, s, 0, 2 * B);
      check(!EndStep(sync, false, check), "step " + std::to_string(s) + " ended the epoch");
    }
    single = sync.params();
  });
  std::vector<std::vector<float>> replicas(2);
  std::vector<std::vector<float>> losses(2, std::vector<float>(steps));
  std::vector<std::string> checksums(2);
  OnRanks(job, 2, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks& check) {
    for (int s = 0; s < steps; ++s) {
      losses[r][s] = Step(job.net, sync, check, batches, s, r * B, (r + 1) * B);
      check(!EndStep(sync, false, check), "step " + std::to_string(s) + " ended the epoch");
    }
    replicas[r] = sync.params();
    checksums[r] = sync.Checksum();
  });
  CHECK(replicas[0] == replicas[1]);  // bitwise
  CHECK(checksums[0] == checksums[1]);
  double max_diff = 0;
  for (size_t i = 0; i < single.size(); ++i)
    max_diff = std::max(max_diff, std::abs(double(single[i]) - replicas[0][i]));
  CHECK(max_diff < 1e-5);
  for (int s = 0; s < steps; ++s) CHECK((losses[0][s] + losses[1][s]) / 2 == Approx(single_losses[s]).epsilon(1e-4));
  CHECK(single_losses.back() < single_losses.front());  // it learned
}

TEST_CASE("Buckets sent from the backward pass (several of them) give the same replicas as one send") {
  // 512 inputs x 600 hidden: 309k floats, two 1 MB buckets; the hook hands the output
  // layer, then the hidden layer over to the communication thread.
  CollectiveJob job(config::LrScaling::kNone, 0, false, 512, 600);
  job.options.collective.fuse_grad_size_mb = 1;
  Batches batches(3, 8, 5, 512);
  std::vector<std::vector<float>> hooked(2), plain(2);
  for (bool hook : {true, false}) {
    OnRanks(job, 2, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks& check) {
      for (int s = 0; s < 3; ++s) {
        Step(job.net, sync, check, batches, s, r * 4, (r + 1) * 4, hook);
        check(!EndStep(sync, false, check), "step " + std::to_string(s) + " ended the epoch");
      }
      (hook ? hooked : plain)[r] = sync.params();
    });
  }
  CHECK(hooked[0] == hooked[1]);
  CHECK(hooked[0] == plain[0]);  // the same sums, bucket by bucket
}

TEST_CASE("Uneven shards finish together, with and without drop_last") {
  const bool drop_last = GENERATE(false, true);
  CollectiveJob job(config::LrScaling::kNone, 0, drop_last);
  Batches batches(5, 8, 4);
  const int have[2] = {5, 3};  // rank 1 runs out first
  std::vector<uint64_t> steps(2);
  std::vector<std::vector<float>> replicas(2);
  OnRanks(job, 2, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks& check) {
    for (int s = 0;; ++s) {
      const bool has = s < have[r];
      if (has) Step(job.net, sync, check, batches, s, 0, 8);
      if (EndStep(sync, !has, check)) break;
      if (!check(s < 10, "rank " + std::to_string(r) + ": still stepping after 10 steps")) break;
    }
    steps[r] = sync.steps();
    replicas[r] = sync.params();
  });
  CHECK(steps[0] == (drop_last ? 3u : 5u));
  CHECK(steps[1] == steps[0]);
  CHECK(replicas[0] == replicas[1]);
}

TEST_CASE("Linear learning-rate scaling and warm-up give the hand-computed SGD steps") {
  CollectiveJob job(config::LrScaling::kLinear, 2);
  std::vector<std::vector<float>> replicas(2);
  std::vector<float> start;
  OnRanks(job, 2, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks& check) {
    if (r == 0) start = sync.params();
    std::vector<float> g(job.net.num_params(), r == 0 ? 1.0f : 3.0f);  // mean 2
    for (int s = 0; s < 3; ++s) {
      const Status pushed = sync.Push(0, StepGrads{{}, {}, {}, {}, g});
      check(pushed.ok(), "Push: " + pushed.ToString());
      check(!EndStep(sync, false, check), "step " + std::to_string(s) + " ended the epoch");
    }
    replicas[r] = sync.params();
  });
  // lr = 0.1 x 2 ranks, warmed up over 2 steps: 0.1, 0.2, 0.2; each step w -= lr x 2.
  for (size_t i = 0; i < start.size(); ++i) {
    CHECK(replicas[0][i] == Approx(start[i] - (0.1f + 0.2f + 0.2f) * 2.0f).margin(1e-5));
  }
  CHECK(replicas[0] == replicas[1]);
}

TEST_CASE("Square-root learning-rate scaling gives the hand-computed SGD steps") {
  CollectiveJob job(config::LrScaling::kSqrt);
  std::vector<std::vector<float>> replicas(4);
  std::vector<float> start;
  OnRanks(job, 4, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks& check) {
    if (r == 0) start = sync.params();
    std::vector<float> g(job.net.num_params(), static_cast<float>(r));  // 0, 1, 2, 3: mean 1.5
    for (int s = 0; s < 2; ++s) {
      const Status pushed = sync.Push(0, StepGrads{{}, {}, {}, {}, g});
      check(pushed.ok(), "Push: " + pushed.ToString());
      check(!EndStep(sync, false, check), "step " + std::to_string(s) + " ended the epoch");
    }
    replicas[r] = sync.params();
  });
  // lr = 0.1 x sqrt(4) = 0.2; each step w -= 0.2 x 1.5.
  for (size_t i = 0; i < start.size(); ++i) CHECK(replicas[0][i] == Approx(start[i] - 2 * 0.3f).margin(1e-5));
  for (const auto& replica : replicas) CHECK(replica == replicas[0]);
}

TEST_CASE("Ranks drawing different initial parameters all start from rank 0's") {
  CollectiveJob job;
  std::vector<std::vector<float>> replicas(3);
  OnRanks(job, 3, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks&) { replicas[r] = sync.params(); });
  std::vector<float> rank0(job.net.num_params());
  job.net.InitParams(rank0, 7);
  for (const auto& p : replicas) CHECK(p == rank0);
}

TEST_CASE("The hybrid's ranks start from the pservers' dense table when it holds a loaded model") {
  CollectiveJob job;
  job.options.pservers = {{"127.0.0.1", 1}};  // a hybrid job (its client is the in-process pserver)
  std::vector<float> loaded(job.net.num_params());
  for (size_t i = 0; i < loaded.size(); ++i) loaded[i] = 0.01f * static_cast<float>(i) - 0.2f;
  REQUIRE(job.client().PushDenseParam(1, loaded).get().ok());  // as pserver --load leaves it
  std::vector<std::vector<float>> replicas(2);
  OnRanks(job, 2, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks&) { replicas[r] = sync.params(); });
  for (const auto& p : replicas) CHECK(p == loaded);
  // On a table that holds none, rank 0's draw is set there and is every replica.
  CollectiveJob fresh;
  fresh.options.pservers = {{"127.0.0.1", 1}};
  OnRanks(fresh, 2, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks&) { replicas[r] = sync.params(); });
  std::vector<float> rank0(fresh.net.num_params()), table(fresh.net.num_params());
  fresh.net.InitParams(rank0, 7);
  REQUIRE(fresh.client().PullDense(1, table).get().ok());
  for (const auto& p : replicas) CHECK(p == rank0);
  CHECK(table == rank0);
}

TEST_CASE(
    "A restarted hybrid job resumes the dense optimizer state Flush left on the pservers: bitwise the "
    "uninterrupted run") {
  auto adam_job = [] {
    auto job = std::make_unique<CollectiveJob>();
    job->options.pservers = {{"127.0.0.1", 1}};  // a hybrid job
    job->options.dense_table.optimizer.kind = OptimizerKind::kAdam;
    job->options.dense_table.optimizer.learning_rate = 0.01f;
    job->pserver.emplace(std::vector<TableOptions>{job->options.dense_table});
    return job;
  };
  const Batches b(6, 8, 41);
  // Steps [from, to) on 2 ranks, 4 rows each, then Flush.
  auto train = [&](CollectiveJob& job, int from, int to) {
    OnRanks(job, 2, [&](uint32_t r, CollectiveSync& sync, testing::ThreadChecks& check) {
      for (int step = from; step < to; ++step) {
        Step(job.net, sync, check, b, step, r * 4, r * 4 + 4);
        EndStep(sync, false, check);
      }
      const Status flushed = sync.Flush();
      check(flushed.ok(), "Flush: " + flushed.ToString());
    });
  };
  auto straight = adam_job(), restarted = adam_job();
  train(*straight, 0, 6);
  train(*restarted, 0, 3);
  train(*restarted, 3, 6);  // new ranks: the replica and its Adam state from the pservers
  const size_t n = straight->net.num_params();
  std::vector<float> want(n), got(n);
  PsClient::DenseState want_state{std::vector<float>(2 * n), std::vector<float>(2)}, got_state = want_state;
  REQUIRE(straight->client().PullDense(1, want, &want_state).get().ok());
  REQUIRE(restarted->client().PullDense(1, got, &got_state).get().ok());
  CHECK(got == want);
  CHECK(got_state.element == want_state.element);
  CHECK(got_state.shared == want_state.shared);
  CHECK(want_state.shared[0] == Approx(std::pow(0.9, 7)).epsilon(1e-5));  // beta1, x beta1 per step
}

}  // namespace
}  // namespace fleetps::trainer
