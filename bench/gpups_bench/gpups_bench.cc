// gpups_bench: GPU-PS pass mode's building blocks.
//
//   gpups_bench --config configs/ctr_dnn.yaml [--device cpu|gpu] [--devices 2] [--servers 2]
//               [--keys 2000000] [--batch-keys 16384] [--seconds 3] [--callers 1]
//               [--write-back-rows 32768]
//
// 1. Pass build: --servers pservers in this process on loopback (the job's tables), --keys
//    random keys pushed once so the rows exist; then begin_pass's work — PullRows of every
//    key through PsClient and Build of the device table — and end_pass's — Export and
//    WriteRows — timed, as keys/s; then end_pass as the trainer runs it (WritePassBack:
//    --write-back-rows rows per range, each exported while the one before is written).
// 2. Device table: --devices shards; --callers threads per shard (as the workers of a device)
//    issue lookups (Pull) and updates (Push: the sparse optimizer in the table) of
//    --batch-keys random distinct pass keys for --seconds each. Prints keys/s and the bytes
//    the table moves per second (a lookup reads a row's dim floats and writes them out; an
//    update reads and writes the whole row, reads the gradient, and updates
//    show/click/touched), next to the memory bandwidth of the device (host twin: a large
//    memcpy on all threads; CUDA: a device-to-device copy).
// Prints markdown tables.

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "bench/free_port.h"
#include "common/config/trainer_config.h"
#include "common/key_index.h"
#include "heter_trainer/gpups/dense_replica.h"
#include "heter_trainer/gpups/gpups_job.h"
#include "heter_trainer/gpups/gpups_sync.h"
#include "heter_trainer/gpups/pass_table.h"
#include "server/app/app.h"
#include "trainer/client/ps_client.h"
#include "trainer/collective/local_group.h"
#include "trainer/model/dense_net.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace fleetps;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

int Fail(const Status& st) {
  std::fprintf(stderr, "gpups_bench: %s\n", st.ToString().c_str());
  return 1;
}

// Host memory bandwidth: `threads` threads each copying its own 256 MB buffer, read + write bytes/s.
double HostCopyGBps(uint32_t threads) {
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr int kRounds = 4;
  std::vector<std::vector<char>> a(threads, std::vector<char>(kBytes, 1)), b(threads, std::vector<char>(kBytes, 0));
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) std::memcpy(b[t].data(), a[t].data(), kBytes);
    });
  }
  for (auto& th : pool) th.join();
  return 2.0 * kBytes * kRounds * threads / Seconds(t0) / 1e9;
}

// ms per step of the node's dense replica with `workers` workers of one node, `steps` steps
// each, and 1, 2 and 4 threads applying the optimizer: each worker reads the replica in
// place (DenseParamsView), writes a gradient as its dense step would — into a vector of its
// own that Push copies, or into its buffer in the replica (GradsBuffer) — then Push and
// EndStep. A markdown table.
Status DenseReplicaSteps(config::TrainerOptions job, uint32_t workers, uint32_t steps) {
  const size_t n = trainer::model::DenseNet::FromOptions(job.model).num_params();
  job.dense_table.dim = static_cast<uint32_t>(n);
  std::printf(
      "| dense replica step (%zu parameters, %s, %u worker(s), %u steps) | apply threads | ms per step, "
      "gradient copied | ms per step, gradient in place |\n",
      n, std::string(config::OptimizerKindName(job.dense_table.optimizer.kind)).c_str(), workers, steps);
  std::printf("|---|---|---|---|\n");
  for (size_t apply : {size_t{1}, size_t{2}, size_t{4}}) {
    double ms[2];
    size_t helpers = 0;
    for (bool in_place : {false, true}) {
      auto comms = trainer::collective::MakeLocalGroup(workers, nullptr, std::chrono::milliseconds(600000));
      std::vector<trainer::collective::Communicator*> ranks;
      for (auto& c : comms) ranks.push_back(c.get());
      ASSIGN_OR_RETURN(auto replica, heter::DenseReplica::Create(job, ranks, std::vector<float>(n, 0.01f), {}, apply));
      helpers = replica->helper_threads();
      std::vector<Status> status(workers);
      const auto t0 = Clock::now();
      std::vector<std::thread> threads;
      for (uint32_t w = 0; w < workers; ++w) {
        threads.emplace_back([&, w] {
          std::vector<float> own(n);
          for (uint32_t i = 0; i < steps && status[w].ok(); ++i) {
            status[w] = replica->DenseParamsView(w).status();
            const std::span<float> grads = in_place ? replica->GradsBuffer(w) : std::span<float>(own);
            std::fill(grads.begin(), grads.end(), 1e-3f * static_cast<float>(i % 7 + 1));
            if (status[w].ok()) status[w] = replica->Push(w, grads);
            if (status[w].ok()) status[w] = replica->EndStep(w, false).status();
          }
        });
      }
      for (auto& t : threads) t.join();
      for (const Status& st : status) RETURN_IF_ERROR(st);
      ms[in_place] = Seconds(t0) * 1e3 / steps;
    }
    std::printf("| | %zu (%zu helper threads) | %.3f | %.3f |\n", apply, helpers, ms[0], ms[1]);
  }
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"gpups_bench: pass build, device-table lookup and update rates"};
  std::string config_path = "configs/ctr_dnn.yaml", device = "cpu";
  uint32_t devices = 2, servers = 2, batch_keys = 16384, callers = 1;
  uint64_t keys_n = 2000000, write_back_rows = uint64_t{1} << 15;
  double seconds = 3;
  cli.add_option("--config", config_path, "job YAML (tables and sparse rule)");
  cli.add_option("--device", device, "cpu (host twin) | gpu")->check(CLI::IsMember({"cpu", "gpu"}));
  cli.add_option("--devices", devices, "pass-table shards (devices)")->check(CLI::Range(1, 64));
  cli.add_option("--servers", servers, "pservers in this process")->check(CLI::Range(1, 16));
  cli.add_option("--keys", keys_n, "keys in the pass")->check(CLI::Range(1000, 100000000));
  cli.add_option("--batch-keys", batch_keys, "distinct keys per lookup / update call")->check(CLI::Range(1, 1 << 22));
  cli.add_option("--seconds", seconds, "seconds per rate measurement");
  cli.add_option("--write-back-rows", write_back_rows, "rows per range of end_pass's write-back (WritePassBack)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  cli.add_option("--callers", callers, "threads per device calling the table at once (as workers_per_device)")
      ->check(CLI::Range(1, 64));
  CLI11_PARSE(cli, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  auto job = config::LoadTrainerYaml(config_path);
  if (!job.ok()) return Fail(job.status());
  job->gpups.device = device;
  job->gpups.devices.clear();
  for (uint32_t d = 0; d < devices; ++d) job->gpups.devices.push_back(static_cast<int>(d));

  // The pservers.
  std::vector<net::Endpoint> endpoints;
  for (uint32_t s = 0; s < servers; ++s) endpoints.push_back({"127.0.0.1", bench::FreeLoopbackPort()});
  std::vector<std::unique_ptr<server::App>> apps;
  for (uint32_t s = 0; s < servers; ++s) {
    config::ServerOptions so;
    so.endpoints = endpoints;
    so.index = s;
    so.bind_host = "127.0.0.1";
    so.io_threads = 2;
    so.shard_threads = 2;
    so.tables = config::JobTables(*job);
    apps.push_back(std::make_unique<server::App>(so));
    if (auto st = apps.back()->Start(); !st.ok()) return Fail(st);
  }
  trainer::PsClientOptions co;
  co.servers = endpoints;
  auto client = trainer::PsClient::Connect(co);
  if (!client.ok()) return Fail(client.status());
  auto table = heter::MakeJobPassTable(*job);
  if (!table.ok()) return Fail(table.status());
  heter::PassTable& pass = **table;
  const uint32_t dim = pass.dim(), core = pass.core_floats();
  const uint32_t sparse_id = job->sparse_table.id;

  // Keys, and their rows created on the pservers (one push each, with shows so CTR rows are
  // extended).
  std::mt19937_64 rng(7);
  KeyIndex unique(keys_n);
  while (unique.size() < keys_n) unique.Insert(rng());
  const std::vector<uint64_t>& keys = unique.keys();
  {
    constexpr size_t kChunk = 1 << 18;
    std::vector<float> grads(kChunk * dim, 0.01f), shows(kChunk, 20.0f), clicks(kChunk, 1.0f);
    for (size_t b = 0; b < keys.size(); b += kChunk) {
      const size_t n = std::min(kChunk, keys.size() - b);
      trainer::PsClient::SparsePushOptions opt;
      opt.shows = std::span<const float>(shows).first(n);
      opt.clicks = std::span<const float>(clicks).first(n);
      auto st = (*client)
                    ->PushSparse(sparse_id, std::span<const uint64_t>(keys).subspan(b, n),
                                 std::span<const float>(grads).first(n * dim), opt)
                    .get();
      if (!st.ok()) return Fail(st);
    }
  }

  // 1. begin_pass / end_pass.
  std::vector<float> rows(keys.size() * core), stats(keys.size() * 2);
  std::vector<uint8_t> flags(keys.size());
  auto t0 = Clock::now();
  if (auto st = (*client)->PullRows(sparse_id, keys, core, {rows.data(), flags.data(), stats.data()}).get(); !st.ok()) {
    return Fail(st);
  }
  const double pull_s = Seconds(t0);
  t0 = Clock::now();
  if (auto st = pass.Build(keys, rows, flags, stats); !st.ok()) return Fail(st);
  const double build_s = Seconds(t0);
  // Touch every row once so end_pass writes them all.
  auto touch_every_row = [&] {
    std::vector<float> grads(keys.size() * dim, 0.001f);
    return pass.Push(keys, grads, {}, {});
  };
  if (auto st = touch_every_row(); !st.ok()) return Fail(st);
  t0 = Clock::now();
  heter::PassRows out;
  if (auto st = pass.Export(&out); !st.ok()) return Fail(st);
  const double export_s = Seconds(t0);
  t0 = Clock::now();
  trainer::PsClient::RowsIn in{out.begin, out.end, out.extended, out.shows, out.clicks, false};
  if (auto st = (*client)->WriteRows(sparse_id, out.keys, core, in).get(); !st.ok()) return Fail(st);
  const double write_s = Seconds(t0);
  // The same pass again, written back as end_pass does: ranges exported while the ones before
  // are being written (WritePassBack). Pulled afresh, so every row is written exact again.
  if (auto st = (*client)->PullRows(sparse_id, keys, core, {rows.data(), flags.data(), stats.data()}).get(); !st.ok()) {
    return Fail(st);
  }
  if (auto st = pass.Build(keys, rows, flags, stats); !st.ok()) return Fail(st);
  if (auto st = touch_every_row(); !st.ok()) return Fail(st);
  t0 = Clock::now();
  trainer::PsClient::RowsWritten written;
  if (auto st = heter::WritePassBack(pass, **client, sparse_id, false, write_back_rows, &written); !st.ok()) {
    return Fail(st);
  }
  const double pipelined_s = Seconds(t0);
  if (written.written != keys.size()) {
    return Fail(Status::Internal("WritePassBack wrote " + std::to_string(written.written) + " rows exact of " +
                                 std::to_string(keys.size())));
  }
  if (auto st = pass.Build(keys, rows, flags, stats); !st.ok()) return Fail(st);

  const double n = static_cast<double>(keys.size());
  std::printf(
      "gpups_bench: %llu keys, dim %u (%u floats per row on the wire), %u pservers in-process, %s table on %u "
      "device(s), %u hardware threads\n\n",
      static_cast<unsigned long long>(keys.size()), dim, core, servers, pass.device_name().c_str(), devices,
      std::thread::hardware_concurrency());
  std::printf("| pass step | seconds | keys/s |\n|---|---|---|\n");
  std::printf("| begin_pass: PullRows from the pservers | %.3f | %.0f |\n", pull_s, n / pull_s);
  std::printf("| begin_pass: build the device table | %.3f | %.0f |\n", build_s, n / build_s);
  std::printf("| begin_pass total | %.3f | %.0f |\n", pull_s + build_s, n / (pull_s + build_s));
  std::printf("| end_pass: export the rows | %.3f | %.0f |\n", export_s, n / export_s);
  std::printf("| end_pass: WriteRows to the pservers | %.3f | %.0f |\n", write_s, n / write_s);
  std::printf("| end_pass total | %.3f | %.0f |\n", export_s + write_s, n / (export_s + write_s));
  std::printf(
      "| end_pass as the trainer runs it: ranges of %llu rows, each exported while the previous is written "
      "(WritePassBack) | %.3f | %.0f |\n\n",
      static_cast<unsigned long long>(write_back_rows), pipelined_s, n / pipelined_s);

  // 2. Lookup and update rates, `callers` threads per device.
  const uint32_t row_floats = core + 1 + (job->sparse_table.accessor.kind == AccessorKind::kCtr ? 4 : 0);
  // Batches of distinct random pass keys, made before the clock starts; threads cycle through them.
  constexpr size_t kBatches = 32;
  const uint32_t threads = devices * callers;
  std::vector<std::vector<std::vector<uint64_t>>> batches(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    std::mt19937_64 r(100 + t);
    for (size_t b = 0; b < kBatches; ++b) {
      KeyIndex batch(batch_keys);
      while (batch.size() < std::min<uint64_t>(batch_keys, keys.size())) batch.Insert(keys[r() % keys.size()]);
      batches[t].push_back(batch.keys());
    }
  }
  auto rate = [&](bool update) -> StatusOr<double> {
    std::atomic<uint64_t> done{0};
    std::atomic<bool> stop{false};
    std::vector<Status> errors(threads);
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::vector<float> values(size_t{batch_keys} * dim, 0.001f), shows(batch_keys, 1.0f), clicks(batch_keys, 0.0f);
        for (size_t b = 0; !stop; b = (b + 1) % kBatches) {
          const auto& ks = batches[t][b];
          Status st = update ? pass.Push(ks, std::span<const float>(values).first(ks.size() * dim),
                                         std::span<const float>(shows).first(ks.size()),
                                         std::span<const float>(clicks).first(ks.size()))
                             : pass.Pull(ks, values.data());
          if (!st.ok()) {
            errors[t] = st;
            return;
          }
          done += ks.size();
        }
      });
    }
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& th : pool) th.join();
    for (auto& st : errors) RETURN_IF_ERROR(st);
    return done / Seconds(start);
  };
  auto lookups = rate(false);
  if (!lookups.ok()) return Fail(lookups.status());
  auto updates = rate(true);
  if (!updates.ok()) return Fail(updates.status());
  // Bytes per key: lookup = key in, row weights read, values out; update = key and gradient
  // in, whole row read + written, show/click/touched read + written.
  const double lookup_bytes = 8 + 4.0 * dim * 2;
  const double update_bytes = 8 + 4.0 * dim + 8.0 * row_floats + 2 * 9;
  double roofline = 0;
  std::string roof_what;
  if (device == "gpu") {
    auto gbps = heter::MeasureDeviceCopyGBps(job->gpups.devices[0]);
    if (!gbps.ok()) return Fail(gbps.status());
    roofline = *gbps;
    roof_what = "GPU 0 device-to-device copy";
  } else {
    roofline = HostCopyGBps(threads);
    roof_what = "host memcpy, " + std::to_string(threads) + " threads";
  }
  std::printf(
      "| device-table op (%u keys per call, %u threads: %u per device) | keys/s | GB/s moved | share of %s "
      "(%.1f GB/s) |\n",
      batch_keys, threads, callers, roof_what.c_str(), roofline);
  std::printf("|---|---|---|---|\n");
  std::printf("| lookup (Pull) | %.0f | %.2f | %.1f%% |\n", *lookups, *lookups * lookup_bytes / 1e9,
              100.0 * *lookups * lookup_bytes / 1e9 / roofline);
  std::printf("| update (Push: sparse optimizer in the table) | %.0f | %.2f | %.1f%% |\n", *updates,
              *updates * update_bytes / 1e9, 100.0 * *updates * update_bytes / 1e9 / roofline);
  client->reset();
  for (auto& a : apps) a->Shutdown();

  // 3. The dense replica's step, as --callers workers of one node run it.
  std::printf("\n");
  if (auto st = DenseReplicaSteps(*job, callers, 2000); !st.ok()) return Fail(st);
  return 0;
}
