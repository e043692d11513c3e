// GPU-PS pass mode with the Trainer and the dense replica, in one process over real RPC: the
// replica's slices, prefetch helpers, stop requests, restarts and aborts (the pass table's
// write-back itself: gpups_sync_test.cc).
#include "test/heter_trainer/gpups/gpups_test_util.h"

namespace fleetps::heter {
namespace {

using namespace gpups_testing;  // NOLINT: the fixtures of this test

// Worker threads stepping a dense system: worker w, while it has data (data[w] steps), reads
// the step's parameters (params(w, &p)) and pushes a gradient that depends on them and on its
// own random draw (push(w, grads)); then it joins the remaining steps without data; each
// step ends with end(w, out_of_data). Requires every worker's status OK.
template <typename ParamsFn, typename PushFn, typename EndFn>
void RunDenseSteps(uint32_t workers, const std::vector<int>& data, ParamsFn params, PushFn push, EndFn end) {
  std::vector<std::thread> threads;
  std::vector<Status> results(workers);
  for (uint32_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(1000 + w);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<float> p, grads;
      for (int s = 0;; ++s) {
        const bool has = s < data[w];
        if (has) {
          results[w] = params(w, &p);
          if (!results[w].ok()) return;
          grads.resize(p.size());
          for (size_t i = 0; i < p.size(); ++i) grads[i] = u(rng) * (1.0f + static_cast<float>(s % 3)) + 0.5f * p[i];
          results[w] = push(w, grads);
          if (!results[w].ok()) return;
        }
        StatusOr<bool> done = end(w, !has);
        if (!done.ok()) results[w] = done.status();
        if (!done.ok() || *done) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& st : results) REQUIRE(st.ok());
}

TEST_CASE("The process's one dense replica, each worker stepping a slice, gives bitwise one replica per rank") {
  const auto [rule, drop_last] =
      GENERATE(std::pair<const char*, bool>{"Adam", false}, std::pair<const char*, bool>{"Adagrad", false},
               std::pair<const char*, bool>{"Adam", true});
  // With more apply threads than workers, helpers step parts of the workers' slices: one
  // worker's slice (the whole replica) in two parts, or three workers' in two parts each.
  const auto [kWorkers, apply_threads] =
      GENERATE(std::pair<uint32_t, size_t>{3, 1}, std::pair<uint32_t, size_t>{1, 2}, std::pair<uint32_t, size_t>{3, 4});
  INFO(rule << (drop_last ? ", drop_last" : "") << ", " << kWorkers << " worker(s), " << apply_threads
            << " apply threads");
  config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  job.dense_table.dim = 200003;  // three slices of 66672, 66672 and 66659 floats
  job.dense_table.optimizer.kind = std::string(rule) == "Adam" ? OptimizerKind::kAdam : OptimizerKind::kAdagrad;
  job.dense_table.optimizer.learning_rate = 0.01f;
  job.collective.lr_scaling = config::LrScaling::kLinear;
  job.collective.warmup_steps = 3;
  job.collective.drop_last = drop_last;
  job.collective.timeout_ms = 30000;
  Cluster cluster(job);
  auto client = cluster.Client();
  // Steps with data per worker: the mean is over fewer ranks at the end.
  const std::vector<int> data = kWorkers == 3 ? std::vector<int>{9, 7, 4} : std::vector<int>{9};
  std::vector<float> initial(job.dense_table.dim);
  std::mt19937 rng(7);
  for (float& v : initial) v = std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);

  // Reference: one CollectiveSync replica per rank.
  auto ref_comms = collective::MakeLocalGroup(kWorkers, nullptr, std::chrono::milliseconds(30000));
  std::vector<std::unique_ptr<trainer::CollectiveSync>> ref;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    auto sync = trainer::CollectiveSync::CreateDenseOnly(job, *client, *ref_comms[w]);
    REQUIRE(sync.ok());
    ref.push_back(std::move(sync).value());
  }
  {
    std::vector<Status> set(kWorkers);
    std::vector<std::thread> threads;
    for (uint32_t w = 0; w < kWorkers; ++w)
      threads.emplace_back([&, w] { set[w] = ref[w]->SetInitialParams(initial); });
    for (auto& t : threads) t.join();
    for (const Status& st : set) REQUIRE(st.ok());
  }
  RunDenseSteps(
      kWorkers, data, [&](uint32_t w, std::vector<float>* p) { return ref[w]->DenseParams(w, p); },
      [&](uint32_t w, std::span<const float> g) {
        return ref[w]->Push(w, trainer::StepGrads{{}, {}, {}, {}, g});
      },
      [&](uint32_t w, bool out) { return ref[w]->EndStep(w, out); });

  // The process's one replica.
  auto comms = collective::MakeLocalGroup(kWorkers, nullptr, std::chrono::milliseconds(30000));
  std::vector<collective::Communicator*> ranks;
  for (auto& c : comms) ranks.push_back(c.get());
  auto replica = DenseReplica::Create(job, ranks, initial, {}, apply_threads);
  INFO(replica.status().ToString());
  REQUIRE(replica.ok());
  CHECK((*replica)->helper_threads() == (apply_threads > kWorkers ? apply_threads - 1 : 0));
  // The gradients depend on the parameters each step reads: a read before every slice of the
  // last step is applied changes the outcome.
  // Worker 1 (and a lone worker) reads the replica in place and writes its gradient into
  // its buffer in the replica, as the Trainer's dense step does; the others copy.
  const auto in_place = [&](uint32_t w) { return w == 1 || kWorkers == 1; };
  RunDenseSteps(
      kWorkers, data,
      [&](uint32_t w, std::vector<float>* p) -> Status {
        if (!in_place(w)) return (*replica)->DenseParams(w, p);
        ASSIGN_OR_RETURN(auto view, (*replica)->DenseParamsView(w));
        p->assign(view.begin(), view.end());
        return Status::OK();
      },
      [&](uint32_t w, std::span<const float> g) {
        if (!in_place(w)) return (*replica)->Push(w, g);
        const std::span<float> buffer = (*replica)->GradsBuffer(w);
        std::copy(g.begin(), g.end(), buffer.begin());
        return (*replica)->Push(w, buffer);
      },
      [&](uint32_t w, bool out) { return (*replica)->EndStep(w, out); });

  const uint64_t want_steps = drop_last && kWorkers == 3 ? 4 : 9;
  CHECK(ref[0]->steps() == want_steps);
  CHECK((*replica)->steps() == want_steps);
  CHECK(ref[0]->params() == ref[kWorkers - 1]->params());
  CHECK((*replica)->params() == ref[0]->params());  // bitwise
  CHECK((*replica)->params() != initial);
  std::vector<float> now;
  REQUIRE((*replica)->DenseParams(kWorkers - 1, &now).ok());
  CHECK(now == ref[kWorkers - 1]->params());
}

// A GPU-PS job of the Trainer over `files`: one QueueDataset pass, batches of 64.
config::TrainerOptions TrainerJob(const std::vector<std::string>& files, bool prefetch) {
  auto job = config::ParseTrainerYaml(R"(
runner: {sync_mode: gpubox, reader_type: QueueDataset, thread_num: 1, train_batch_size: 64, print_interval: 1000}
hyper_parameters:
  model_type: ctr_dnn
  optimizer: {class: Adam, learning_rate: 0.002}
  sparse_inputs_slots: 27
  sparse_feature_dim: 8
  dense_input_dim: 13
  fc_sizes: [32, 16]
fleetps:
  sparse_table: {shards: 2, accessor: {name: ctr, embedx_threshold: 2}}
)",
                                      "gpups_sync_test.yaml");
  REQUIRE(job.ok());
  job->data.train_paths = files;
  job->gpups.prefetch = prefetch;
  return *job;
}

// The Trainer in GPU-PS mode, in process: `workers` workers on one host device, with or
// without their prefetch helpers, train one pass over `files`. Returns the rows the pass wrote
// back and the dense replica; `examples` receives the records trained.
struct TrainedPass {
  std::map<uint64_t, std::vector<float>> rows;
  std::vector<float> dense;
  uint64_t examples = 0;
};
TrainedPass TrainWithTrainer(const std::vector<std::string>& files, uint32_t workers, bool prefetch) {
  const config::TrainerOptions job = TrainerJob(files, prefetch);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1, workers);
  PassTrainer& tr = *trainers[0];
  metrics::Registry registry;  // outlives the Trainer
  auto trainer = std::make_unique<trainer::Trainer>(tr.options, *tr.client, nullptr, nullptr, std::move(tr.sync));
  trainer->SetMetrics(&registry);
  REQUIRE(trainer->Start().ok());
  auto report = trainer->TrainEpoch(1);
  REQUIRE(report.ok());
  CHECK((report->prefetch_wait_sec > 0) == prefetch);
  // The pass's metrics, as /metrics publishes them.
  auto published = [&](const char* metric) {
    return registry.GetGauge("fleetps_trainer_pass_metric", "", {{"metric", metric}}).value();
  };
  CHECK(report->auc > 0);  // computed (this data holds little signal: near 0.5)
  CHECK(published("auc") == report->auc);
  CHECK(published("loss") == report->loss);
  CHECK(published("copc") == report->copc);
  CHECK(published("copc") == Approx(report->actual_ctr / report->predicted_ctr));
  CHECK(published("rmse") == report->rmse);
  CHECK(published("bucket_error") == report->bucket_error);
  TrainedPass out;
  out.examples = report->examples;
  out.rows = cluster.Rows(job.sparse_table.id);
  out.dense.resize(job.dense_table.dim);
  REQUIRE(tr.client->PullDense(job.dense_table.id, out.dense).get().ok());
  return out;
}

TEST_CASE("The Trainer's prefetch helpers: one worker's pass bitwise as without them; two workers train every record") {
  data::testing::TempDir dir;
  const auto files = data::testing::WriteNumberedRankDnnFiles(dir, "train", 2, 700);
  const TrainedPass with = TrainWithTrainer(files, 1, true);
  const TrainedPass without = TrainWithTrainer(files, 1, false);
  CHECK(with.examples == 1400);
  CHECK(with.rows.size() == 1400);   // the ids of the first slot, unique per record, hold the others
  CHECK(with.rows == without.rows);  // weights, optimizer state, statistics: bitwise
  CHECK(with.dense == without.dense);
  // Two workers and their two helpers at once (a TSan target): every record trained once.
  const TrainedPass two = TrainWithTrainer(files, 2, true);
  CHECK(two.examples == 1400);
  CHECK(two.rows.size() == with.rows.size());
}

// The model two epochs of the Trainer leave on the pservers: every sparse row, the dense
// parameters and the dense optimizer state.
struct TrainedModel {
  std::map<uint64_t, std::vector<float>> rows;
  std::vector<float> dense;
  PsClient::DenseState state;
  double auc = 0;  // the last epoch's
};

// Two epochs over `files` in file order (a QueueDataset with one reader thread), batches of
// 64, Adam for both tables: local training (DirectSync: each step's pushes applied on the
// pservers before its next pull), or GPU-PS on one host device with one worker and its
// prefetch helper.
TrainedModel TrainTwoEpochs(const std::vector<std::string>& files, bool gpups) {
  const config::TrainerOptions job = TrainerJob(files, /*prefetch=*/true);
  Cluster cluster(job);
  std::vector<std::unique_ptr<PassTrainer>> trainers;  // its options outlive the GpuPsSync
  std::unique_ptr<PsClient> client;
  std::unique_ptr<trainer::Trainer> trainer;
  if (gpups) {
    trainers = MakeTrainers(cluster, job, 1, 1);
    client = std::move(trainers[0]->client);
    trainer = std::make_unique<trainer::Trainer>(trainers[0]->options, *client, nullptr, nullptr,
                                                 std::move(trainers[0]->sync));
  } else {
    config::TrainerOptions local = job;
    local.sync_mode = config::SyncMode::kAsync;  // no pservers: local training
    local.pservers.clear();
    REQUIRE(local.local());
    client = cluster.Client();
    trainer = std::make_unique<trainer::Trainer>(local, *client);
  }
  REQUIRE(trainer->Start().ok());
  TrainedModel out;
  for (uint32_t epoch = 1; epoch <= 2; ++epoch) {
    auto report = trainer->TrainEpoch(epoch);
    INFO((gpups ? "GPU-PS" : "local") << " epoch " << epoch << ": " << report.status().ToString());
    REQUIRE(report.ok());
    CHECK(report->examples == 1400);
    out.auc = report->auc;
  }
  out.rows = cluster.Rows(job.sparse_table.id);
  const size_t n = job.dense_table.dim;
  out.dense.resize(n);
  out.state = {std::vector<float>(2 * n), std::vector<float>(2)};  // Adam: two moments, two beta powers
  REQUIRE(client->PullDense(job.dense_table.id, out.dense, &out.state).get().ok());
  return out;
}

TEST_CASE("GPU-PS with one device and one worker in file order trains the model local training trains") {
  data::testing::TempDir dir;
  // Slot 0's ids are unique per record, the other slots' (row % 97) are in nearly every
  // batch: the keys whose updates a merge of several batches would thin out.
  const auto files = data::testing::WriteNumberedRankDnnFiles(dir, "train", 2, 700);
  const TrainedModel local = TrainTwoEpochs(files, false);
  const TrainedModel gpups = TrainTwoEpochs(files, true);
  REQUIRE(gpups.rows.size() == local.rows.size());
  REQUIRE(local.rows.size() == 1400);
  Cluster probe(TrainerJob(files, true));
  const auto& accessor = probe.app->tables().sparse(0)->accessor();
  const uint32_t stats = accessor.stats_offset();
  size_t extended = 0;
  for (const auto& [key, want] : local.rows) {
    INFO("key " << key);
    REQUIRE(gpups.rows.count(key) == 1);
    const auto& got = gpups.rows.at(key);
    REQUIRE(got.size() == want.size());
    // Weights, optimizer state, flags, show, click, unseen_days: bitwise.
    for (uint32_t j = 0; j < stats + kDeltaScore; ++j) CHECK(got[j] == want[j]);
    // delta_score: local training adds each push's score, end_pass the score of the pass's
    // summed shows and clicks: equal up to the rounding of the sums.
    CHECK(got[stats + kDeltaScore] == Approx(want[stats + kDeltaScore]).epsilon(1e-6));
    extended += accessor.Extended(want.data());
  }
  CHECK(extended > 0);
  CHECK(gpups.dense == local.dense);
  CHECK(gpups.state.element == local.state.element);
  CHECK(gpups.state.shared == local.state.shared);
  CHECK(gpups.auc == local.auc);
}

TEST_CASE("A stop request mid-pass: no batch is trained after it, and every step trained is written back") {
  const bool prefetch = GENERATE(false, true);
  INFO("prefetch " << prefetch);
  data::testing::TempDir dir;
  constexpr uint64_t kRecords = 50000;
  const config::TrainerOptions job =
      TrainerJob(data::testing::WriteNumberedRankDnnFiles(dir, "train", 1, kRecords), prefetch);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1, /*workers_per_device=*/2);
  PassTrainer& tr = *trainers[0];
  metrics::Registry registry;  // outlives the Trainer
  trainer::Trainer trainer(tr.options, *tr.client, nullptr, nullptr, std::move(tr.sync));
  trainer.SetMetrics(&registry);
  StopRequest stop;
  trainer.SetStopRequest(&stop);
  REQUIRE(trainer.Start().ok());
  const metrics::Counter trained = registry.GetCounter("fleetps_trainer_examples_total", "");
  std::thread stopper([&] {
    while (trained.value() < 640) std::this_thread::sleep_for(std::chrono::microseconds(200));
    stop.Request("stopped by the test");
  });
  auto report = trainer.TrainEpoch(1);
  stopper.join();
  REQUIRE(report.ok());
  CHECK(report->examples >= 640);
  CHECK(report->examples < kRecords);  // the pass was cut short
  // Each record shows one key per sparse slot: the shows the pservers hold are exactly the
  // steps trained. A pass not written back holds none; a batch trained after the stop, or one
  // a prefetch helper prepared but no worker trained, would add its own.
  const auto rows = cluster.Rows(job.sparse_table.id);
  const uint32_t stats = cluster.app->tables().sparse(job.sparse_table.id)->accessor().stats_offset();
  double shows = 0;
  uint64_t records = 0;  // records >= 97 trained: their slot-0 ids are keys of their own
  for (const auto& [key, row] : rows) {
    shows += row[stats + kShow];
    if (key >= 97 && row[stats + kShow] > 0) ++records;
  }
  const double slots = static_cast<double>(job.data.sparse_slots.size());
  CHECK(shows == slots * static_cast<double>(report->examples));
  CHECK(records + 97 >= report->examples);
  CHECK(records <= report->examples);
}

// A dataset over another that requests `stop` as it hands out the `at`-th batch of a pass.
class StoppingDataset : public data::Dataset {
 public:
  StoppingDataset(data::Dataset& inner, StopRequest& stop, uint64_t at) : inner_(inner), stop_(stop), at_(at) {}
  Status StartPass() override {
    batches_ = 0;
    return inner_.StartPass();
  }
  StatusOr<bool> NextBatch(data::Batch* batch) override {
    ASSIGN_OR_RETURN(const bool has, inner_.NextBatch(batch));
    if (has && ++batches_ == at_) stop_.Request("stopped by the test");
    return has;
  }
  void EndPass() override { inner_.EndPass(); }
  data::ReadStats stats() const override { return inner_.stats(); }
  std::optional<uint64_t> PassRecordsId() const override { return inner_.PassRecordsId(); }
  uint64_t batches() const { return batches_; }

 private:
  data::Dataset& inner_;
  StopRequest& stop_;
  uint64_t at_;
  std::atomic<uint64_t> batches_{0};
};

TEST_CASE("A stop request during begin_pass: the pass's keys are read no further, nothing is pulled or built") {
  const config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1);
  GpuPsSync& sync = *trainers[0]->sync;
  metrics::Registry registry;
  sync.SetMetrics(registry);
  const metrics::Counter passes = registry.GetCounter("fleetps_gpups_passes_total", "");
  data::testing::TempDir dir;
  const auto files = data::testing::WriteNumberedRankDnnFiles(dir, "part", 2, 300);  // 600 records
  data::InMemoryDataset records(data::testing::RankDnnOptions(), files, 16);         // 38 batches a pass
  REQUIRE(records.LoadIntoMemory().ok());

  SECTION("while the keys are read") {
    StopRequest stop;
    StoppingDataset dataset(records, stop, 5);
    const Status st = sync.BeginPass(dataset, &stop);
    CHECK(st.code() == StatusCode::kAborted);
    CHECK_THAT(st.message(), Catch::Contains("reading the pass's keys") && Catch::Contains("stopped by the test"));
    // Each of begin_pass's threads (one per core, at most 16) takes at most one batch after it.
    CHECK(dataset.batches() >= 5);
    CHECK(dataset.batches() <= 5 + 16);  // of 38
  }
  SECTION("after the keys are read") {
    StopRequest stop;
    stop.Request("stopped by the test");
    const std::vector<uint64_t> keys = Range(0, 80);
    const Status st = sync.BeginPassWithKeys(keys, &stop);
    CHECK(st.code() == StatusCode::kAborted);
    CHECK_THAT(st.message(), Catch::Contains("stopped by the test before pulling the pass's rows; no pass was begun"));
  }
  CHECK(sync.table().size() == 0);
  CHECK(passes.value() == 0);
  // The next pass reads its keys again, whole, and begins.
  REQUIRE(sync.BeginPass(records, nullptr).ok());
  CHECK_FALSE(sync.last_pass().keys_reused);
  CHECK(sync.table().size() == 600);  // slot 0's ids are the records' numbers; the others are below 97
  CHECK(passes.value() == 1);
  REQUIRE(sync.EndPass().ok());
}

TEST_CASE("A stop request before an epoch's begin_pass: the Trainer's epoch ends with nothing trained or begun") {
  data::testing::TempDir dir;
  const config::TrainerOptions job = TrainerJob(data::testing::WriteNumberedRankDnnFiles(dir, "train", 1, 500), false);
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1);
  PassTrainer& tr = *trainers[0];
  metrics::Registry registry;
  tr.sync->SetMetrics(registry);
  trainer::Trainer trainer(tr.options, *tr.client, nullptr, nullptr, std::move(tr.sync));
  StopRequest stop;
  trainer.SetStopRequest(&stop);
  REQUIRE(trainer.Start().ok());
  stop.Request("stopped by the test");
  auto report = trainer.TrainEpoch(1);
  REQUIRE(report.ok());  // a pass cut short: the epoch ends with its Flush
  CHECK(report->examples == 0);
  CHECK(registry.GetCounter("fleetps_gpups_passes_total", "").value() == 0);
  CHECK(cluster.Rows(job.sparse_table.id).empty());
}

TEST_CASE("The dense replica starts from the pservers' dense table when it holds parameters (a loaded model)") {
  const config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  Cluster cluster(job);
  std::vector<float> loaded(job.dense_table.dim);
  for (size_t i = 0; i < loaded.size(); ++i) loaded[i] = 0.001f * static_cast<float>(i % 97) - 0.03f;
  REQUIRE(cluster.Client()->PushDenseParam(job.dense_table.id, loaded).get().ok());  // as a --load leaves it
  auto trainers = MakeTrainers(cluster, job, 1, 2);
  for (uint32_t w = 0; w < 2; ++w) {
    std::vector<float> replica;
    REQUIRE(trainers[0]->sync->DenseParams(w, &replica).ok());
    CHECK(replica == loaded);
  }
  // On fresh pservers trainer 0's draw is set there and is the replica.
  Cluster fresh(job);
  auto drawn = MakeTrainers(fresh, job, 1, 1);
  std::vector<float> replica, table(job.dense_table.dim);
  REQUIRE(drawn[0]->sync->DenseParams(0, &replica).ok());
  REQUIRE(drawn[0]->client->PullDense(job.dense_table.id, table).get().ok());
  CHECK(replica == table);
  CHECK(replica != loaded);
}

TEST_CASE(
    "A restarted node resumes the dense optimizer state end_pass left on the pservers: two passes across a "
    "restart give bitwise the uninterrupted run's model") {
  config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  job.dense_table.optimizer.kind = OptimizerKind::kAdam;  // moments and beta powers to lose
  job.dense_table.optimizer.learning_rate = 0.01f;
  job.collective.warmup_steps = 0;  // the rate's warm-up counts the replica's own steps
  const auto keys = Range(0, 30);
  const std::vector<std::vector<std::vector<std::vector<Batch>>>> passes = {{{Batches(keys, 5, 31)}},
                                                                            {{Batches(keys, 4, 32)}}};
  auto run_pass = [&](std::vector<std::unique_ptr<PassTrainer>>& trainers, size_t pass) {
    REQUIRE(trainers[0]->sync->BeginPassWithKeys(keys).ok());
    TrainPass(trainers, passes[pass]);
    REQUIRE(trainers[0]->sync->Flush().ok());  // end_pass: rows and the dense replica to the pservers
  };
  Cluster straight(job), restarted(job);
  {
    auto trainers = MakeTrainers(straight, job, 1, 1);
    run_pass(trainers, 0);
    run_pass(trainers, 1);
  }
  {
    auto first = MakeTrainers(restarted, job, 1, 1);
    run_pass(first, 0);
  }
  auto second = MakeTrainers(restarted, job, 1, 1);  // a new process: the replica from the pservers
  run_pass(second, 1);
  const size_t n = job.dense_table.dim;
  PsClient::DenseState want{std::vector<float>(2 * n), std::vector<float>(2)}, got = want;
  std::vector<float> want_params(n), got_params(n);
  REQUIRE(straight.Client()->PullDense(job.dense_table.id, want_params, &want).get().ok());
  REQUIRE(restarted.Client()->PullDense(job.dense_table.id, got_params, &got).get().ok());
  CHECK(got_params == want_params);
  CHECK(got.element == want.element);
  CHECK(got.shared == want.shared);
  // Adam's beta1 power: beta1 at the start, times beta1 at each of both passes' 9 steps.
  CHECK(want.shared[0] == Approx(std::pow(0.9, 10)).epsilon(1e-5));
  CHECK(std::any_of(want.element.begin(), want.element.end(), [](float v) { return v != 0.0f; }));
}

TEST_CASE("A failed worker's Abort ends the other workers' wait in the dense allreduce at once") {
  config::TrainerOptions job = JobOptions(/*embedx_threshold=*/4.0f);
  job.collective.timeout_ms = 60000;  // without Abort, worker 0 would wait this long
  Cluster cluster(job);
  auto trainers = MakeTrainers(cluster, job, 1, 1, /*workers_per_device=*/2);
  GpuPsSync& sync = *trainers[0]->sync;
  const auto keys = Range(0, 10);
  REQUIRE(sync.BeginPassWithKeys(keys).ok());
  const auto batches = Batches(keys, 1, 3);
  std::vector<float> dense(job.dense_table.dim, 0.01f);
  Status pushed, stepped;
  const auto start = std::chrono::steady_clock::now();
  std::thread worker0([&] {
    const Batch& b = batches[0];
    pushed = sync.Push(0, trainer::StepGrads{b.keys, b.grads, b.shows, b.clicks, dense});
    if (pushed.ok()) stepped = sync.EndStep(0, false).status();  // waits for worker 1
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  sync.Abort(Status::Internal("worker 1: CUDA error"));  // what the Trainer does when worker 1 fails
  worker0.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  REQUIRE(pushed.ok());
  CHECK_FALSE(stepped.ok());
  CHECK_THAT(stepped.message(), Catch::Contains("worker 1: CUDA error"));
}

}  // namespace
}  // namespace fleetps::heter
