// The heter-trainer in-process (HeterApp on the CPU device) with a real pserver (the
// server App) on loopback, driven by the cpu-trainer's HeterClient:
//  - a micro-batch is answered exactly as model::DenseNet computes it, and its dense
//    gradient reaches the pserver's dense table (SGD, checked against the reference);
//  - malformed micro-batches get an error reply naming what is wrong, and it keeps serving;
//  - a cpu-trainer of another job is refused at HeterHello;
//  - it exits by itself once every cpu-trainer has finished (1 when one failed);
//  - a dead heter-trainer fails a micro-batch with an error naming it, or, with failover,
//    the micro-batch goes to another one;
//  - a micro-batch whose finite activations overflow the dense step fails alone: nothing of
//    it reaches the pservers, and the heter-trainer keeps training and flushing;
//  - its communicator drops a push the pservers refuse and keeps sending;
//  - a forward_only micro-batch is scored and changes nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "common/config/heter_config.h"
#include "common/net/io_threads.h"
#include "common/net/rpc_client.h"
#include "heter_trainer/app/heter_app.h"
#include "heter_trainer/device/dense_device.h"
#include "schemas/heter_generated.h"
#include "server/app/app.h"
#include "test/support/http.h"
#include "test/support/process.h"
#include "trainer/client/heter_client.h"
#include "trainer/client/ps_client.h"
#include "trainer/model/dense_net.h"
#include "trainer/runtime/param_sync.h"

namespace fleetps::heter {
namespace {

using namespace std::chrono_literals;
using trainer::HeterClient;
using trainer::HeterClientOptions;

// 2 slots of dim 2 and 3 dense features: activation rows of 7 floats; one hidden layer.
const char* kJob = R"(
runner: {sync_mode: heter}
hyper_parameters:
  model_type: ctr_dnn
  optimizer: {class: SGD, learning_rate: 0.5}
  sparse_inputs_slots: 3
  sparse_feature_dim: 2
  dense_input_dim: 3
  fc_sizes: [5]
fleetps:
  max_merge_steps: 1
)";

struct Cluster {
  config::TrainerOptions job;
  std::unique_ptr<server::App> pserver;
  std::unique_ptr<trainer::PsClient> ps;
  std::unique_ptr<trainer::model::DenseNet> net;
  std::vector<float> initial;
  std::vector<std::unique_ptr<HeterApp>> heters;
  std::vector<net::Endpoint> heter_endpoints;

  explicit Cluster(int heter_trainers = 1, uint16_t metrics_port = 0) {
    auto parsed = config::ParseTrainerYaml(kJob, "job.yaml");
    REQUIRE(parsed.ok());
    job = *parsed;
    job.trainers_num = 2;
    const auto ports = testing::FreePorts(1 + heter_trainers);
    config::ServerOptions so;
    so.endpoints = {{"127.0.0.1", ports[0]}};
    so.io_threads = 1;
    so.shard_threads = 1;
    so.tables = config::JobTables(job);
    pserver = std::make_unique<server::App>(so);
    REQUIRE(pserver->Start().ok());
    job.pservers = so.endpoints;
    trainer::PsClientOptions po;
    po.servers = job.pservers;
    auto c = trainer::PsClient::Connect(po);
    REQUIRE(c.ok());
    ps = std::move(*c);
    net = std::make_unique<trainer::model::DenseNet>(trainer::model::DenseNet::FromOptions(job.model));
    initial.resize(net->num_params());
    net->InitParams(initial, 7);
    REQUIRE(ps->PushDenseParam(job.dense_table.id, initial).get().ok());

    for (int i = 0; i < heter_trainers; ++i) heter_endpoints.push_back({"127.0.0.1", ports[1 + i]});
    for (int i = 0; i < heter_trainers; ++i) {
      config::HeterTrainerOptions ho;
      ho.job = job;
      ho.device = "cpu";
      ho.server.endpoints = heter_endpoints;
      ho.server.index = static_cast<uint32_t>(i);
      ho.server.io_threads = 1;
      if (i == 0) ho.metrics_port = metrics_port;
      REQUIRE(config::ValidateHeterTrainerOptions(ho).ok());
      heters.push_back(std::make_unique<HeterApp>(ho));
      REQUIRE(heters.back()->Start().ok());
    }
  }
  ~Cluster() {
    for (auto& h : heters) h->Shutdown();
    ps.reset();
    pserver->Shutdown();
  }

  HeterClientOptions ClientOptions(uint32_t trainer_id = 0) const {
    HeterClientOptions o;
    o.heter_trainers = heter_endpoints;
    o.trainer_id = trainer_id;
    o.trainers = job.trainers_num;
    o.input_width = static_cast<uint32_t>(net->in_dim());
    o.dense_params = net->num_params();
    o.io_threads = 1;
    o.rpc.request_timeout = 10s;
    return o;
  }
  std::unique_ptr<HeterClient> Connect(HeterClientOptions o) {
    auto c = HeterClient::Connect(std::move(o));
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    return std::move(*c);
  }
};

struct MicroBatch {
  size_t rows;
  std::vector<float> activations, labels;
  MicroBatch(size_t r, size_t width, uint32_t seed) : rows(r), activations(r * width), labels(r) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& a : activations) a = u(rng);
    for (size_t i = 0; i < rows; ++i) labels[i] = static_cast<float>(i % 3 == 0);
  }
};

double MaxRelError(std::span<const float> got, std::span<const float> want) {
  REQUIRE(got.size() == want.size());
  double max_abs = 1.0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) max_abs = std::max(max_abs, std::abs(double(want[i])));
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(double(got[i]) - want[i]));
  return err / max_abs;
}

TEST_CASE("A CPU heter-trainer asked to average its dense replica over NCCL is refused, saying what to set") {
  Cluster cluster(0);
  config::HeterTrainerOptions ho;
  ho.job = cluster.job;
  ho.job.heter.dense_sync = config::HeterDenseSync::kAllreduce;
  const auto ports = testing::FreePorts(2);
  ho.job.heter.allreduce_port = ports[1];
  ho.job.collective.backend = config::CollectiveBackend::kNccl;
  ho.device = "cpu";
  ho.server.endpoints = {{"127.0.0.1", ports[0]}};
  ho.server.io_threads = 1;
  REQUIRE(config::ValidateHeterTrainerOptions(ho).ok());
  HeterApp app(ho);
  const Status st = app.Start();
  INFO(st.ToString());
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains("heter-trainer 0") && Catch::Contains("runs on the CPU") &&
                               Catch::Contains("HETER_DEVICE_TYPE=gpu, or backend gloo"));
}

TEST_CASE("A micro-batch is answered as DenseNet computes it and its dense gradient reaches the pserver") {
  Cluster cluster;
  auto client = cluster.Connect(cluster.ClientOptions());
  const auto& net = *cluster.net;
  MicroBatch mb(6, net.in_dim(), 1);

  trainer::model::DenseNet::Workspace ws;
  std::vector<float> param_grads(net.num_params()), act_grads(mb.activations.size());
  const float loss =
      net.ForwardBackward(cluster.initial, mb.activations, mb.labels, mb.rows, param_grads, act_grads, &ws);

  auto step = client->Train(1, static_cast<uint32_t>(mb.rows), mb.activations, mb.labels).get();
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  CHECK(step->loss == Approx(loss).epsilon(1e-6));
  CHECK(MaxRelError(step->predictions, ws.predictions()) < 1e-6);
  CHECK(MaxRelError(step->activation_grads, act_grads) < 1e-6);

  // Flushed: the pserver applied SGD with lr 0.5 to exactly this one step's gradient.
  REQUIRE(client->Flush().ok());
  std::vector<float> dense(net.num_params()), want(net.num_params());
  REQUIRE(cluster.ps->PullDense(cluster.job.dense_table.id, dense).get().ok());
  for (size_t i = 0; i < want.size(); ++i) want[i] = cluster.initial[i] - 0.5f * param_grads[i];
  CHECK(MaxRelError(dense, want) < 1e-6);
  CHECK(MaxRelError(dense, cluster.initial) > 1e-4);  // it did move
}

TEST_CASE("Micro-batches and replies of the device's host buffers (64 KiB and up) are answered the same") {
  Cluster cluster;
  auto client = cluster.Connect(cluster.ClientOptions());
  const auto& net = *cluster.net;
  // 3000 rows of 7 floats: an 84 KB request and an 96 KB reply, each in a pooled block; the
  // second step reuses the blocks the first released.
  for (uint64_t batch_id : {1, 2}) {
    MicroBatch mb(3000, net.in_dim(), static_cast<uint32_t>(batch_id));
    trainer::model::DenseNet::Workspace ws;
    std::vector<float> param_grads(net.num_params()), act_grads(mb.activations.size());
    const float loss =
        net.ForwardBackward(cluster.initial, mb.activations, mb.labels, mb.rows, param_grads, act_grads, &ws);
    auto step = client->Train(batch_id, static_cast<uint32_t>(mb.rows), mb.activations, mb.labels).get();
    INFO(step.status().ToString());
    REQUIRE(step.ok());
    if (batch_id == 1) {
      CHECK(step->loss == Approx(loss).epsilon(1e-6));
      CHECK(MaxRelError(step->predictions, ws.predictions()) < 1e-6);
      CHECK(MaxRelError(step->activation_grads, act_grads) < 1e-6);
    } else {
      CHECK(step->predictions.size() == mb.rows);  // parameters may have moved since: shapes only
      CHECK(step->activation_grads.size() == mb.activations.size());
    }
  }
}

TEST_CASE("HostBufferPool: aligned blocks by power-of-two size, reused, capped, and ordinary memory as a fallback") {
  int allocated = 0, freed = 0;
  bool refuse = false;
  std::vector<std::unique_ptr<uint8_t[]>> arena;
  auto pool = std::make_shared<HostBufferPool>(
      [&](size_t bytes) -> void* {
        if (refuse) return nullptr;
        ++allocated;
        // 64-byte aligned by hand: the device's allocator would give page-aligned blocks.
        arena.push_back(std::make_unique<uint8_t[]>(bytes + 64));
        auto addr = reinterpret_cast<uintptr_t>(arena.back().get());
        return reinterpret_cast<void*>((addr + 63) / 64 * 64);
      },
      [&](void*) { ++freed; }, /*keep_bytes=*/size_t{3} << 16);
  uint8_t* a = pool->Acquire(100);    // a 64 KiB block
  uint8_t* b = pool->Acquire(70000);  // a 128 KiB block
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  CHECK(allocated == 2);
  CHECK(pool->outstanding() == 2);
  pool->Release(a, 100);
  CHECK(pool->Acquire(65536) == a);  // the same size: the kept block again
  CHECK(allocated == 2);
  pool->Release(a, 65536);
  pool->Release(b, 70000);             // 64 + 128 KiB kept: at the cap
  uint8_t* c = pool->Acquire(200000);  // 256 KiB: new
  pool->Release(c, 200000);            // above the cap: freed
  CHECK(allocated == 3);
  CHECK(freed == 1);
  refuse = true;  // the device's memory runs out: ordinary memory
  uint8_t* d = pool->Acquire(300000);
  REQUIRE(d != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(d) % 64 == 0);
  d[299999] = 1;
  pool->Release(d, 300000);  // above the cap: deleted, not handed to `free`
  CHECK(freed == 1);
  CHECK(pool->outstanding() == 0);
  {
    auto shared = SharedBlock(pool, 1000);
    CHECK(pool->outstanding() == 1);
    auto copy = shared;
    shared.reset();
    CHECK(pool->outstanding() == 1);
  }
  CHECK(pool->outstanding() == 0);
  pool.reset();  // the kept blocks (64 + 128 KiB) freed with the pool
  CHECK(freed == 3);
}

TEST_CASE("Malformed micro-batches get an error reply and the heter-trainer keeps serving") {
  const uint16_t metrics_port = testing::FreePorts(1)[0];
  Cluster cluster(1, metrics_port);
  REQUIRE(cluster.heters[0]->metrics_port() == metrics_port);
  const uint32_t width = static_cast<uint32_t>(cluster.net->in_dim());
  net::IoThreads io(1);
  net::RpcClient raw(io, cluster.heter_endpoints[0], {});
  REQUIRE(raw.Connect().ok());
  auto send = [&](uint32_t trainer_id, uint32_t rows, uint32_t w, std::vector<float> acts, std::vector<float> labels) {
    flatbuffers::FlatBufferBuilder fbb;
    auto a = fbb.CreateVector(acts);
    auto l = fbb.CreateVector(labels);
    fbb.Finish(wire::CreateHeterTrainRequest(fbb, trainer_id, 42, rows, w, a, l));
    auto reply = raw.CallSync(static_cast<uint16_t>(wire::MessageType::HeterTrain), fbb.Release());
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.status().IsInvalidArgument());
    return reply.status().message();
  };
  const std::vector<float> ok_acts(2 * width, 0.5f);
  CHECK_THAT(send(0, 2, width - 1, std::vector<float>(2 * (width - 1)), {0, 1}),
             Catch::Contains("micro-batch 42") && Catch::Contains("rows are 6 floats wide, the model takes 7"));
  CHECK_THAT(send(0, 3, width, ok_acts, {0, 1, 1}), Catch::Contains("14 activations for 3 rows of 7"));
  CHECK_THAT(send(0, 2, width, ok_acts, {0}), Catch::Contains("1 labels for 2 rows"));
  CHECK_THAT(send(0, 2, width, ok_acts, {0, 2}), Catch::Contains("label 1 is 2.0"));
  std::vector<float> nan_acts = ok_acts;
  nan_acts[width + 3] = std::nanf("");
  CHECK_THAT(send(0, 2, width, nan_acts, {0, 1}), Catch::Contains("activation 10 (row 1) is not finite"));
  CHECK_THAT(send(5, 2, width, ok_acts, {0, 1}), Catch::Contains("trainer id 5 is out of range [0, 2)"));
  CHECK_THAT(send(0, 0, width, {}, {}), Catch::Contains("no rows"));
  flatbuffers::FlatBufferBuilder junk;
  junk.Finish(junk.CreateString("not a micro-batch"));
  auto bad = raw.CallSync(static_cast<uint16_t>(wire::MessageType::HeterTrain), junk.Release());
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("malformed HeterTrain"));

  // Still serving.
  auto client = cluster.Connect(cluster.ClientOptions());
  MicroBatch mb(4, width, 2);
  auto step = client->Train(7, 4, mb.activations, mb.labels).get();
  INFO(step.status().ToString());
  CHECK(step.ok());

  // /metrics (opt-in, --metrics-port): the 8 refused micro-batches and the one trained.
  const std::string text = testing::HttpGetBody(metrics_port, "/metrics");
  INFO(text);
  auto value = [&](const std::string& series) {
    const auto at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 2));
  };
  CHECK(value("fleetps_heter_errors_total") == 8);
  CHECK(value("fleetps_heter_micro_batches_total") == 1);
  CHECK(value("fleetps_heter_examples_total") == 4);
  CHECK(value("fleetps_heter_step_seconds_count") == 1);
  CHECK(value("fleetps_heter_loss") == Approx(step->loss));
  CHECK(value("fleetps_heter_queued_micro_batches") == 0);
  CHECK(testing::HttpGetBody(metrics_port, "/healthz") == "ok\n");
}

TEST_CASE("A cpu-trainer of another job is refused at HeterHello") {
  Cluster cluster;
  auto o = cluster.ClientOptions();
  o.input_width += 1;
  auto c = HeterClient::Connect(o);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("sends activation rows of 8 floats") &&
                                       Catch::Contains("start every role with the same job YAML"));
  o = cluster.ClientOptions();
  o.trainers = 3;
  c = HeterClient::Connect(o);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("PADDLE_TRAINERS_NUM=3"));
  // A job whose data has two labels (or whose model has two outputs) against this one's one.
  o = cluster.ClientOptions();
  o.labels = 2;
  c = HeterClient::Connect(o);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("sends 2 labels per row for 1 model outputs") &&
                                       Catch::Contains("job has 1 labels and 1 outputs"));
  o = cluster.ClientOptions();
  o.outputs = 2;
  c = HeterClient::Connect(o);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("for 2 model outputs"));
}

TEST_CASE("The heter-trainer exits by itself once every cpu-trainer has finished") {
  const bool one_fails = GENERATE(false, true);
  Cluster cluster;
  auto c0 = cluster.Connect(cluster.ClientOptions(0));
  auto c1 = cluster.Connect(cluster.ClientOptions(1));
  REQUIRE(c0->Heartbeat({}, 2s).ok());
  REQUIRE(c0->Heartbeat({.finished = true, .reason = ""}, 2s).ok());
  REQUIRE(
      c1->Heartbeat({.finished = true, .failed = one_fails, .stopping = false, .reason = one_fails ? "boom" : ""}, 2s)
          .ok());
  auto& app = *cluster.heters[0];
  std::thread waiter([&] { app.WaitForShutdown(false); });
  waiter.join();  // returns once the sweep saw both finish (500 ms period)
  CHECK(app.exit_code() == (one_fails ? 1 : 0));
}

TEST_CASE("A dead heter-trainer fails the micro-batch naming it, or with failover another one takes it") {
  const bool failover = GENERATE(false, true);
  Cluster cluster(2);
  auto o = cluster.ClientOptions();
  o.failover = failover;
  o.rpc.request_timeout = 1500ms;
  auto client = cluster.Connect(o);
  cluster.heters[0]->Shutdown();
  MicroBatch mb(3, cluster.net->in_dim(), 3);
  const auto start = std::chrono::steady_clock::now();
  // Round robin: the first micro-batch goes to heter-trainer 0.
  auto step = client->Train(1, 3, mb.activations, mb.labels).get();
  const auto took = std::chrono::steady_clock::now() - start;
  if (failover) {
    INFO(step.status().ToString());
    CHECK(step.ok());
  } else {
    REQUIRE_FALSE(step.ok());
    CHECK_THAT(step.status().message(),
               Catch::Contains("heter-trainer 0 (" + cluster.heter_endpoints[0].ToString() + ")"));
    CHECK(took < 10s);
  }
}

// The pservers' dense table now.
std::vector<float> PullDense(const Cluster& cluster) {
  std::vector<float> dense(cluster.net->num_params());
  REQUIRE(cluster.ps->PullDense(cluster.job.dense_table.id, dense).get().ok());
  return dense;
}

TEST_CASE("A micro-batch whose finite activations overflow the dense step fails alone and reaches no pserver") {
  Cluster cluster;
  auto c0 = cluster.Connect(cluster.ClientOptions(0));
  auto c1 = cluster.Connect(cluster.ClientOptions(1));
  const auto& net = *cluster.net;
  // Finite, so the checks on arrival pass; the dense step's sums overflow.
  MicroBatch huge(4, net.in_dim(), 4);
  for (float& a : huge.activations) a = 3e38f;
  auto bad = c0->Train(2, 4, huge.activations, huge.labels).get();
  REQUIRE_FALSE(bad.ok());
  INFO(bad.status().ToString());
  CHECK(bad.status().IsInvalidArgument());
  CHECK_THAT(bad.status().message(), Catch::Contains("micro-batch 2 of cpu-trainer 0") &&
                                         Catch::Contains("activations overflowed the dense step") &&
                                         Catch::Contains("largest activation is 3e+38") &&
                                         Catch::Contains("nothing was pushed"));

  // The next micro-batch, of another cpu-trainer, trains; both flush.
  MicroBatch mb(5, net.in_dim(), 5);
  trainer::model::DenseNet::Workspace ws;
  std::vector<float> param_grads(net.num_params()), act_grads(mb.activations.size());
  net.ForwardBackward(cluster.initial, mb.activations, mb.labels, mb.rows, param_grads, act_grads, &ws);
  auto good = c1->Train(3, 5, mb.activations, mb.labels).get();
  INFO(good.status().ToString());
  REQUIRE(good.ok());
  CHECK(MaxRelError(good->activation_grads, act_grads) < 1e-6);
  const Status flushed0 = c0->Flush();
  INFO(flushed0.ToString());
  CHECK(flushed0.ok());
  CHECK(c1->Flush().ok());
  // The dense table moved by the good micro-batch's gradient alone.
  const std::vector<float> dense = PullDense(cluster);
  std::vector<float> want(net.num_params());
  for (size_t i = 0; i < want.size(); ++i) want[i] = cluster.initial[i] - 0.5f * param_grads[i];
  CHECK(MaxRelError(dense, want) < 1e-6);
}

TEST_CASE("The heter-trainer's dense communicator drops a push the pservers refuse and keeps sending") {
  Cluster cluster(0);
  const size_t n = cluster.net->num_params();
  auto sync = trainer::MakeAsyncSync(cluster.job, *cluster.ps, trainer::AsyncParts::kDenseOnly);
  REQUIRE(sync->DenseSnapshot(0).ok());
  // Refused by the pserver (server.nonfinite_gradients: reject): dropped, not sticky.
  std::vector<float> refused(n, 0.25f);
  refused[1] = std::numeric_limits<float>::infinity();
  REQUIRE(sync->Push(0, trainer::StepGrads{{}, {}, {}, {}, refused}).ok());
  const Status after_refusal = sync->Flush();
  INFO(after_refusal.ToString());
  CHECK(after_refusal.ok());
  CHECK(PullDense(cluster) == cluster.initial);
  std::vector<float> grads(n, 0.25f);
  const Status pushed = sync->Push(0, trainer::StepGrads{{}, {}, {}, {}, grads});
  INFO(pushed.ToString());
  REQUIRE(pushed.ok());
  REQUIRE(sync->Flush().ok());
  const std::vector<float> dense = PullDense(cluster);
  for (size_t i = 0; i < n; ++i) CHECK(dense[i] == Approx(cluster.initial[i] - 0.5f * 0.25f).epsilon(1e-6));
  auto snapshot = sync->DenseSnapshot(0);
  REQUIRE(snapshot.ok());
  CHECK(**snapshot == dense);
}

TEST_CASE("A forward_only micro-batch is scored with the current parameters and changes no table") {
  Cluster cluster;
  auto client = cluster.Connect(cluster.ClientOptions());
  const auto& net = *cluster.net;
  MicroBatch mb(6, net.in_dim(), 6);
  trainer::model::DenseNet::Workspace ws;
  const auto want = net.Forward(cluster.initial, mb.activations, mb.rows, &ws);
  auto scored = client->Train(1, 6, mb.activations, mb.labels, /*forward_only=*/true).get();
  INFO(scored.status().ToString());
  REQUIRE(scored.ok());
  CHECK(scored->loss == 0.0f);
  CHECK(scored->activation_grads.empty());
  CHECK(MaxRelError(scored->predictions, want) < 1e-6);
  REQUIRE(client->Flush().ok());
  const std::vector<float> dense = PullDense(cluster);
  REQUIRE(dense.size() == cluster.initial.size());
  CHECK(std::memcmp(dense.data(), cluster.initial.data(), dense.size() * sizeof(float)) == 0);
  // Training goes on as before.
  auto trained = client->Train(2, 6, mb.activations, mb.labels).get();
  REQUIRE(trained.ok());
  CHECK(trained->activation_grads.size() == mb.activations.size());
}

}  // namespace
}  // namespace fleetps::heter
