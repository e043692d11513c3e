// heter_bench: what one heter-trainer can do.
//
//   heter_bench --config configs/ctr_dnn.yaml [--device cpu|gpu] [--senders 1,2,4,8]
//               [--batch 512] [--inflight 2] [--lanes 2] [--seconds 3] [--skip-dense]
//               [--dense-batches 512,1024,2048,4096,8192] [--dense-lanes 2,4]
//
// 1. Dense device: the mean time of one training step of the job's DenseNet (forward, loss,
//    backward, copies) per micro-batch size on the CPU device and, when a GPU is visible, on
//    the CUDA device next to its cuBLAS products alone (bench/heter_bench/dense_bench.h).
// 2. Heter-trainer capacity: a pserver and a heter-trainer in this process on loopback (the
//    job's tables and model; --device, --lanes), fed by N senders that each play a
//    cpu-trainer with its own HeterClient connection, keeping --inflight micro-batches of
//    --batch random activation rows in flight for --seconds. Prints examples/s served (all
//    senders), per sender, and the mean micro-batch round trip. Divided by the examples/s
//    one cpu-trainer produces in heter mode (its pull, pool and push work; see
//    docs/BENCHMARKS.md), the served rate gives how many cpu-trainers it keeps busy.

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "bench/free_port.h"
#include "bench/heter_bench/dense_bench.h"
#include "common/config/heter_config.h"
#include "common/config/trainer_config.h"
#include "common/net/endpoint.h"
#include "heter_trainer/app/heter_app.h"
#include "server/app/app.h"
#include "trainer/client/heter_client.h"
#include "trainer/client/ps_client.h"
#include "trainer/model/dense_net.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace fleetps;

struct Served {
  double examples_per_s = 0;
  double mean_round_trip_ms = 0;
};

// N senders, each with `inflight` micro-batches outstanding, for `seconds`.
StatusOr<Served> Feed(const trainer::HeterClientOptions& base, uint32_t senders, uint32_t batch, uint32_t inflight,
                      double seconds) {
  std::vector<std::unique_ptr<trainer::HeterClient>> clients;
  for (uint32_t s = 0; s < senders; ++s) {
    auto o = base;
    o.trainer_id = s;
    ASSIGN_OR_RETURN(auto c, trainer::HeterClient::Connect(o));
    clients.push_back(std::move(c));
  }
  const size_t width = base.input_width;
  std::atomic<uint64_t> examples{0}, round_trips{0};
  std::atomic<double> round_trip_s{0};
  Status first_error;
  std::mutex mu;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  auto run = [&](uint32_t s) {
    std::mt19937 rng(s + 1);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    std::vector<float> acts(size_t{batch} * width), labels(batch);
    for (float& a : acts) a = u(rng);
    for (uint32_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(rng() % 4 == 0);
    std::deque<std::pair<Clock::time_point, std::future<StatusOr<trainer::HeterStep>>>> pending;
    uint64_t id = 0;
    double rt = 0;
    while (Clock::now() < end || !pending.empty()) {
      while (Clock::now() < end && pending.size() < inflight) {
        pending.emplace_back(Clock::now(), clients[s]->Train(id++, batch, acts, labels));
      }
      if (pending.empty()) break;
      auto step = pending.front().second.get();
      rt += std::chrono::duration<double>(Clock::now() - pending.front().first).count();
      pending.pop_front();
      if (!step.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = step.status();
        continue;
      }
      examples += batch;
      ++round_trips;
    }
    double prev = round_trip_s.load();
    while (!round_trip_s.compare_exchange_weak(prev, prev + rt)) {
    }
  };
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (uint32_t s = 0; s < senders; ++s) threads.emplace_back(run, s);
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  RETURN_IF_ERROR(first_error);
  for (auto& c : clients) RETURN_IF_ERROR(c->Flush());
  Served out;
  out.examples_per_s = examples / secs;
  out.mean_round_trip_ms = round_trips ? 1e3 * round_trip_s.load() / round_trips : 0;
  return out;
}

// The value of the sample `name` (no labels) in a Prometheus text page; 0 when absent.
double Sample(const std::string& text, const std::string& name) {
  size_t at = 0;
  while ((at = text.find(name + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::strtod(text.c_str() + at + name.size() + 1, nullptr);
    at += name.size();
  }
  return 0;
}

int Fail(const Status& st) {
  std::fprintf(stderr, "heter_bench: %s\n", st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"heter_bench: dense device step times and heter-trainer capacity"};
  std::string config_path = "configs/ctr_dnn.yaml", device = "cpu";
  std::vector<uint32_t> senders = {1, 2, 4, 8};
  std::vector<size_t> dense_batches = {512, 1024, 2048, 4096, 8192};
  std::vector<uint32_t> dense_lanes = {2, 4};
  uint32_t batch = 512, inflight = 2, lanes = 2;
  double seconds = 3;
  bool skip_dense = false;
  int gpu = 0;
  cli.add_option("-c,--config", config_path, "job YAML: the model and tables");
  cli.add_option("--device", device, "heter-trainer device for the capacity table")
      ->check(CLI::IsMember({"cpu", "gpu"}));
  cli.add_option("--gpu", gpu, "GPU index");
  cli.add_option("--senders", senders, "simulated cpu-trainers per capacity row")->delimiter(',');
  cli.add_option("--batch", batch, "rows per micro-batch (capacity table)");
  cli.add_option("--inflight", inflight, "micro-batches in flight per sender");
  cli.add_option("--lanes", lanes, "heter-trainer lanes");
  cli.add_option("--seconds", seconds, "per capacity row");
  cli.add_option("--dense-batches", dense_batches, "micro-batch sizes of the dense device table")->delimiter(',');
  cli.add_option("--dense-lanes", dense_lanes, "GPU: lanes stepping at once, a column each")->delimiter(',');
  cli.add_flag("--skip-dense", skip_dense, "skip the dense device table");
  CLI11_PARSE(cli, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  auto job = config::LoadTrainerYaml(config_path);
  if (!job.ok()) return Fail(job.status());
  if (!skip_dense) {
    bench::DenseBenchOptions d;
    d.in_dim = DenseInputDim(job->model);
    d.hidden_sizes = job->model.fc_sizes;
    d.output = job->model.output;
    d.batches = dense_batches;
    d.lanes = dense_lanes;
    d.gpu = gpu;
    std::printf("== dense device step (job %s: in %zu, hidden", config_path.c_str(), d.in_dim);
    for (uint32_t h : d.hidden_sizes) std::printf(" %u", h);
    std::printf(")\n");
    if (int rc = bench::RunDenseDeviceBench(d); rc != 0) return rc;
    std::printf("\n");
  }

  // A pserver with the job's tables and a heter-trainer, in this process.
  uint32_t max_senders = 1;
  for (uint32_t s : senders) max_senders = std::max(max_senders, s);
  job->trainers_num = max_senders;
  config::ServerOptions so;
  so.endpoints = {{"127.0.0.1", bench::FreeLoopbackPort()}};
  so.tables = config::JobTables(*job);
  server::App pserver(so);
  if (auto st = pserver.Start(); !st.ok()) return Fail(st);
  job->pservers = so.endpoints;
  {
    trainer::PsClientOptions po;
    po.servers = job->pservers;
    auto ps = trainer::PsClient::Connect(po);
    if (!ps.ok()) return Fail(ps.status());
    const auto net = trainer::model::DenseNet::FromOptions(job->model);
    std::vector<float> params(net.num_params());
    net.InitParams(params, job->model.init_seed);
    if (auto st = (*ps)->PushDenseParam(job->dense_table.id, params).get(); !st.ok()) return Fail(st);
  }
  config::HeterTrainerOptions ho;
  ho.job = *job;
  ho.job.heter.lanes = lanes;
  ho.device = device;
  ho.gpus = {gpu};
  ho.server.endpoints = {{"127.0.0.1", bench::FreeLoopbackPort()}};
  heter::HeterApp heter(ho);
  if (auto st = heter.Start(); !st.ok()) return Fail(st);

  trainer::HeterClientOptions co;
  co.heter_trainers = ho.server.endpoints;
  co.trainers = max_senders;
  co.input_width = static_cast<uint32_t>(DenseInputDim(job->model));
  co.dense_params = job->dense_table.dim;
  co.io_threads = 1;
  std::printf("== heter-trainer capacity (%s device, %u lanes, micro-batch %u, %u in flight per sender, %.0f s)\n",
              device.c_str(), lanes, batch, inflight, seconds);
  std::printf(
      "| senders | examples/s served | per sender | mean round trip ms | lane step ms (heter-trainer) | "
      "lanes busy |\n|---|---|---|---|---|---|\n");
  for (uint32_t n : senders) {
    // The heter-trainer's own account: its lanes' step time (fleetps_heter_step_seconds).
    const std::string before = heter.MetricsText();
    const auto fed = Clock::now();
    auto served = Feed(co, n, batch, inflight, seconds);
    if (!served.ok()) return Fail(served.status());
    const double wall = std::chrono::duration<double>(Clock::now() - fed).count();
    const std::string after = heter.MetricsText();
    const double step_s =
        Sample(after, "fleetps_heter_step_seconds_sum") - Sample(before, "fleetps_heter_step_seconds_sum");
    const double steps =
        Sample(after, "fleetps_heter_step_seconds_count") - Sample(before, "fleetps_heter_step_seconds_count");
    std::printf("| %u | %.0f | %.0f | %.2f | %.3f | %.0f%% |\n", n, served->examples_per_s, served->examples_per_s / n,
                served->mean_round_trip_ms, steps > 0 ? 1e3 * step_s / steps : 0.0, 100.0 * step_s / (wall * lanes));
    std::fflush(stdout);
  }
  heter.Shutdown();
  pserver.Shutdown();
  return 0;
}
