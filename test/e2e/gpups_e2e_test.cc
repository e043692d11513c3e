// End-to-end GPU-PS pass mode: real pserver processes and heter-trainers in gpubox mode
// (host twin, FLAGS_selected_gpus=0,1: two host shards each), launched with the environment
// fleetps-launch sets, on generated data in real files with a real job YAML; and
// scripts/run_gpubox.sh itself (one fleetps-launch command).
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>

#include "test/support/http.h"
#include "test/support/job.h"
#include "test/support/notify_socket.h"
#include "test/support/process.h"
#include "test/support/tls_files.h"

namespace fleetps {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;

struct GpuBoxJob {
  std::string dir = testing::MakeTempDir("gpups_e2e");
  uint32_t trainers;
  std::vector<uint16_t> ports = testing::FreePorts(4);  // 2 pservers, 2 node endpoints
  std::string pservers = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  std::unique_ptr<ChildProcess> servers[2], nodes[2];
  std::string gpus = "0,1";  // FLAGS_selected_gpus: two host shards

  // `extra_yaml`: more keys of the fleetps map; `extra_model`: more hyper_parameters;
  // `server_yaml`: more keys of fleetps.server.
  GpuBoxJob(uint32_t rows, uint32_t trainer_count, const std::string& extra_yaml = "",
            const std::string& extra_model = "", const std::string& server_yaml = "")
      : trainers(trainer_count) {
    REQUIRE(testing::GenerateData(dir, {"--rows", std::to_string(rows), "--train-files", "2"}));
    testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/train"
  test_data_dir: "data/test"
  reader_type: InMemoryDataset
  shuffle: local
  train_batch_size: 256
  infer_batch_size: 1024
  thread_num: 1
  epochs: 2
  print_interval: 50
  sync_mode: gpubox
  model_save_path: "model"
)" + testing::kSmallCtrDnnModel + extra_model +
                                              R"(fleetps:
  sparse_table: {shards: 4}
  server:
    io_threads: 1
    shard_threads: 1
    trainer_lease_s: 10
)" + server_yaml + extra_yaml);
  }
  std::map<std::string, std::string> Env(const std::string& role) const {
    std::map<std::string, std::string> env = {{"TRAINING_ROLE", role},
                                              {"PADDLE_PSERVERS_IP_PORT_LIST", pservers},
                                              {"PADDLE_TRAINERS_NUM", std::to_string(trainers)},
                                              {"FLAGS_selected_gpus", gpus},
                                              {"HETER_DEVICE_TYPE", device}};
    if (trainers > 1) {
      env["PADDLE_TRAINER_ENDPOINTS"] =
          "127.0.0.1:" + std::to_string(ports[2]) + ",127.0.0.1:" + std::to_string(ports[3]);
    }
    return env;
  }
  std::vector<std::string> node0_args;  // more flags of node 0's heter-trainer
  std::string device = "cpu";           // HETER_DEVICE_TYPE

  void Start() {
    for (int i = 0; i < 2; ++i) {
      auto env = Env("PSERVER");
      env["POD_IP"] = "127.0.0.1";
      env["PADDLE_PORT"] = std::to_string(ports[i]);
      servers[i] = std::make_unique<ChildProcess>();
      REQUIRE(servers[i]->Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"}, env,
                                dir + "/pserver" + std::to_string(i) + ".log"));
    }
    for (uint32_t t = 0; t < trainers; ++t) {
      auto env = Env("TRAINER");
      env["PADDLE_TRAINER_ID"] = std::to_string(t);
      nodes[t] = std::make_unique<ChildProcess>();
      std::vector<std::string> args = {testing::BinaryPath("heter_trainer/heter-trainer"), "--config",
                                       dir + "/job.yaml", "--report", dir + "/trainer" + std::to_string(t) + ".json"};
      if (t == 0) args.insert(args.end(), node0_args.begin(), node0_args.end());
      REQUIRE(nodes[t]->Start(args, env, dir + "/trainer" + std::to_string(t) + ".log"));
    }
  }
  // Start(), then waits until node `node` trains its first logged step.
  void StartUntilTraining(uint32_t node) {
    Start();
    const bool training = testing::WaitForLog(dir + "/trainer" + std::to_string(node) + ".log", "epoch 1 step", 120s);
    INFO(AllLogs());
    REQUIRE(training);
  }
  std::string Log(const std::string& name) const { return testing::ReadFile(dir + "/" + name + ".log"); }
  std::string AllLogs() const {
    std::string out;
    for (uint32_t t = 0; t < trainers; ++t)
      out += "trainer" + std::to_string(t) + ":\n" + Log("trainer" + std::to_string(t));
    return out + "\npserver0:\n" + Log("pserver0");
  }
};

TEST_CASE("GPU-PS job: two nodes x two host devices train two passes per epoch, evaluate, save and all exit 0",
          "[e2e]") {
  // Per-slot embedding widths: the pass table's rows stay 8 wide, each slot pools its first
  // 8, 4 or 2 floats. Every worker with its prefetch helper, pass after pass.
  std::string dims;
  for (int s = 0; s < 26; ++s) dims += (s ? ", " : "") + std::to_string(8 >> (s % 3));
  GpuBoxJob job(30000, 2, "  gpups: {passes_per_epoch: 2, prefetch: true}\n", "  slot_dims: [" + dims + "]\n");
  const uint16_t metrics_port = testing::FreePorts(1)[0];
  job.node0_args = {"--metrics-port", std::to_string(metrics_port)};
  job.Start();
  // Node 0's /metrics while it trains (three passes and the evaluation are still to come):
  // the training series and the passes'.
  REQUIRE(testing::WaitForLog(job.dir + "/trainer0.log", "pass 1: end_pass", 120s));
  const std::string metrics = testing::HttpGetBody(metrics_port, "/metrics");
  INFO(metrics);
  CHECK(std::regex_search(metrics, std::regex("\nfleetps_gpups_passes_total [1-4]\n")));
  CHECK(std::regex_search(metrics, std::regex("\nfleetps_gpups_pass_keys [1-9][0-9]*\n")));
  CHECK(std::regex_search(metrics, std::regex("\nfleetps_trainer_examples_total [1-9][0-9.e+]*\n")));
  CHECK_THAT(metrics, Catch::Contains("fleetps_gpups_rows_written_total{merge=\"exact\"}"));
  for (uint32_t t = 0; t < 2; ++t) {
    const int rc = job.nodes[t]->Wait(120s);
    INFO(job.AllLogs());
    REQUIRE(rc == 0);
  }
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 0);
  for (uint32_t t = 0; t < 2; ++t) {
    const std::string log = job.Log("trainer" + std::to_string(t));
    INFO(log);
    CHECK_THAT(log, Catch::Contains("GPU-PS (gpubox) on 2 host device(s)") && Catch::Contains("4 dense ranks"));
    // 2 epochs x 2 passes, each on half of the node's records (about 6750 of 13500).
    CHECK_THAT(log, Catch::Contains("pass 4: begin_pass") && Catch::Contains("pass 4: end_pass"));
    CHECK_THAT(log, !Catch::Contains("pass 5:"));
    // The dense part's input is 9 x 8 + 9 x 4 + 8 x 2 + 13 = 137 wide (221 without slot_dims):
    // (137 + 1) x 64 + (64 + 1) x 32 + (32 + 1) x 2 = 10978 parameters.
    CHECK_THAT(log, Catch::Contains("(10978 dense parameters)"));
  }
  // The nodes share keys: whichever wrote second merged its pass into the other's rows.
  const std::string both = job.Log("trainer0") + job.Log("trainer1");
  CHECK_THAT(both, Catch::Matches(R"((.|\n)*exact, [1-9][0-9]* merged(.|\n)*)"));
  CHECK_THAT(job.Log("trainer0"), Catch::Contains("saved the model"));
  CHECK(testing::ReportTestAuc(job.dir + "/trainer0.json") > 0.6);
}

TEST_CASE("scripts/run_gpubox.sh runs two nodes x two host devices through fleetps-launch, all exit 0", "[e2e]") {
  GpuBoxJob job(20000, 2);  // its data and job YAML; the script starts the processes
  const std::string out = job.dir + "/out";
  // The pservers from the base port up, the nodes at base + 100 and + 116 (and + 1: device 1).
  const uint16_t base = testing::FreePortBase({0, 1, 100, 101, 116, 117});
  ChildProcess script;
  REQUIRE(script.Start({std::string(FLEETPS_SOURCE_DIR) + "/scripts/run_gpubox.sh"},
                       {{"BUILD", testing::BinaryDir()},
                        {"FLEETPS_SKIP_SETUP", "1"},
                        {"FLEETPS_CONFIG", job.dir + "/job.yaml"},
                        {"FLEETPS_TRAIN_DATA", job.dir + "/data/train"},
                        {"FLEETPS_TEST_DATA", job.dir + "/data/test"},
                        {"FLEETPS_PSERVERS", "2"},
                        {"FLEETPS_TRAINERS", "2"},
                        {"FLEETPS_EPOCHS", "1"},
                        {"FLEETPS_BASE_PORT", std::to_string(base)},
                        {"FLEETPS_OUT", out},
                        {"HETER_DEVICE_TYPE", "cpu"},
                        {"FLAGS_selected_gpus", "0,1"}},
                       job.dir + "/script.log"));
  const int rc = script.Wait(240s);
  const std::string log = testing::ReadFile(job.dir + "/script.log");
  INFO(log);
  REQUIRE(rc == 0);
  CHECK_THAT(log, Catch::Contains("fleetps-launch: every process exited 0") &&
                      Catch::Contains("== done: every process exited 0"));
  for (int t = 0; t < 2; ++t) {
    const std::string worker = testing::ReadFile(out + "/workerlog." + std::to_string(t));
    CHECK_THAT(worker, Catch::Contains("trainer " + std::to_string(t) + "/2: GPU-PS (gpubox) on 2 host device(s)") &&
                           Catch::Contains("4 dense ranks") && Catch::Contains("pass 1: end_pass"));
  }
  CHECK(testing::ReportTestAuc(out + "/trainer0.json") > 0.5);
  CHECK(testing::ReportTestAuc(out + "/trainer1.json") > 0.5);
}

TEST_CASE("GPU-PS: one host device driven by two workers (fleetps.gpups.workers_per_device: 2) trains every record",
          "[e2e]") {
  GpuBoxJob job(20000, 1, "  gpups: {workers_per_device: 2}\n");
  job.gpus = "0";
  job.device = "auto";  // without a GPU: the host twin, saying why
  job.Start();
  const int rc = job.nodes[0]->Wait(120s);
  INFO(job.AllLogs());
  REQUIRE(rc == 0);
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 0);
  const std::string log = job.Log("trainer0");
  if (::system("nvidia-smi -L >/dev/null 2>&1") != 0) {
    CHECK_THAT(log, Catch::Contains("HETER_DEVICE_TYPE auto: the pass table is the host-memory twin"));
    CHECK_THAT(log,
               Catch::Contains("on 1 host device(s) (FLAGS_selected_gpus), 2 worker(s) per device, 2 dense ranks"));
  }
  // The two workers share the records: each epoch trains every training line once.
  const size_t lines = testing::CountDataLines(job.dir + "/data/train");
  const std::string report = testing::ReadFile(job.dir + "/trainer0.json");
  CHECK_THAT(report, Catch::Contains("\"epoch\": 1, \"examples\": " + std::to_string(lines) + ",") &&
                         Catch::Contains("\"epoch\": 2, \"examples\": " + std::to_string(lines) + ","));
  CHECK(testing::ReportTestAuc(job.dir + "/trainer0.json") > 0.55);
  {  // Where the two workers' and their prefetch helpers' time went: each part spent, the
     // workers' (dense, push, end of step, waiting for the helper) within 2 x the epoch, the
     // helpers' (read, pull) too.
    std::smatch m;
    REQUIRE(std::regex_search(
        report, m,
        std::regex(
            R"("epoch": 1, [^}]*"seconds": ([0-9.]+), [^}]*"dense_compute_sec": ([0-9.]+), "read_sec": ([0-9.]+), )"
            R"("pull_sec": ([0-9.]+), "push_sec": ([0-9.]+), "end_step_sec": ([0-9.]+), "pass_sync_sec": ([0-9.]+), )"
            R"("prefetch_wait_sec": ([0-9.]+))")));
    const double seconds = std::stod(m[1]), pass = std::stod(m[7]);
    for (int i = 2; i <= 6; ++i) {
      INFO("field " << i);
      CHECK(std::stod(m[i]) > 0.0);
    }
    CHECK(std::stod(m[2]) + std::stod(m[5]) + std::stod(m[6]) + std::stod(m[8]) <= 2 * seconds + 0.05);
    CHECK(std::stod(m[3]) + std::stod(m[4]) <= 2 * seconds + 0.05);
    CHECK(pass > 0.0);  // begin_pass and end_pass: the table built and written back
    CHECK(pass < seconds);
    CHECK_THAT(log,
               Catch::Contains("pass 1: begin_pass: ") && Catch::Contains("distinct keys read from the dataset in"));
    // The second epoch's pass reads the same records (in memory, reshuffled): their keys again.
    CHECK_THAT(log, Catch::Contains("pass 2: begin_pass: the same records as the last pass: its "));
  }
}

// The dump of table `table` of the checkpoint in `model`, one row per line (pserver_tool dump
// --full: weights, flags, optimizer state, as %.9g), sorted.
std::vector<std::string> SortedDump(const std::string& model, const std::string& table) {
  ChildProcess dump;
  const std::string out = model + ".table" + table + ".txt";
  REQUIRE(dump.Start({testing::BinaryPath("tools/pserver_tool/pserver_tool"), "dump", model, "--table", table,
                      "--limit", "100000000", "--full"},
                     {}, out));
  REQUIRE(dump.Wait(60s) == 0);
  std::istringstream text(testing::ReadFile(out));
  std::vector<std::string> lines;
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// fleetps.gpups.prefetch: the helper reads and pulls the next batch while the worker steps,
// but never ahead of the update that the pull would see. One worker trains bitwise the same
// model with it as without: every saved row (weights, flags, optimizer state) and dense weight
// with its optimizer state.
TEST_CASE("GPU-PS prefetch: one worker trains bitwise the same model with the helper as without", "[e2e]") {
  std::map<bool, std::vector<std::string>> sparse, dense;
  for (bool prefetch : {true, false}) {
    GpuBoxJob job(20000, 1, std::string("  gpups: {prefetch: ") + (prefetch ? "true" : "false") + "}\n");
    job.gpus = "0";
    job.Start();
    const int rc = job.nodes[0]->Wait(120s);
    INFO(job.AllLogs());
    REQUIRE(rc == 0);
    for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 0);
    std::smatch m;
    const std::string report = testing::ReadFile(job.dir + "/trainer0.json");
    REQUIRE(std::regex_search(report, m, std::regex(R"("epoch": 2, [^}]*"prefetch_wait_sec": ([0-9.]+))")));
    if (!prefetch) CHECK(std::stod(m[1]) == 0.0);  // no helper to wait for
    sparse[prefetch] = SortedDump(job.dir + "/model", "0");
    dense[prefetch] = SortedDump(job.dir + "/model", "1");
  }
  // The first line that differs, or "" (not the whole dumps: Catch would print them).
  auto first_difference = [](const std::vector<std::string>& a, const std::vector<std::string>& b) -> std::string {
    if (a.size() != b.size()) return std::to_string(a.size()) + " lines against " + std::to_string(b.size());
    auto at = std::mismatch(a.begin(), a.end(), b.begin());
    return at.first == a.end() ? "" : *at.first + "  against  " + *at.second;
  };
  CHECK(sparse[true].size() > 1000);
  CHECK(dense[true].size() > 100);
  CHECK(first_difference(sparse[true], sparse[false]) == "");
  CHECK(first_difference(dense[true], dense[false]) == "");
  // The replica's Adam state reached the checkpoint with its weights: each slice's beta1 power
  // advanced from its start (0.9) once per step, and the moments are not all zero.
  size_t slices = 0;
  for (const std::string& line : dense[true]) {
    if (line.rfind("shared_state\t", 0) != 0) continue;
    ++slices;
    INFO(line);
    CHECK(std::stod(line.substr(line.find('\t') + 1)) < 0.01);
  }
  CHECK(slices == 2);  // one per pserver
  CHECK(std::any_of(dense[true].begin(), dense[true].end(),
                    [](const std::string& line) { return std::regex_search(line, std::regex("state=.*[1-9]")); }));
}

// kill -9 of one of two nodes mid-pass: the other fails its next dense allreduce at once,
// saying a rank died, and the pservers end (the killed node's lease runs out): nothing
// hangs.
TEST_CASE("GPU-PS: kill -9 of one of two nodes mid-pass, the other fails saying a rank died, nothing hangs", "[e2e]") {
  GpuBoxJob job(100000, 2);
  job.StartUntilTraining(1);
  job.nodes[1]->Signal(SIGKILL);
  const auto lost = std::chrono::steady_clock::now();
  const int rc = job.nodes[0]->Wait(60s);
  const std::string log = job.Log("trainer0");
  INFO(log);
  CHECK(rc != 0);
  CHECK(rc != -1);  // not still running
  CHECK(std::chrono::steady_clock::now() - lost < 30s);
  CHECK_THAT(log, Catch::Contains("a rank died, or is unreachable"));
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(60s) == 1);  // a trainer failed, one gone
}

TEST_CASE("GPU-PS: SIGTERM mid-pass writes the pass back, then the node exits by the signal and the pservers end",
          "[e2e]") {
  GpuBoxJob job(100000, 1);
  job.StartUntilTraining(0);
  job.nodes[0]->Signal(SIGTERM);
  const int rc = job.nodes[0]->Wait(60s);
  const std::string log = job.Log("trainer0");
  INFO(log);
  CHECK(rc == 128 + SIGTERM);
  const size_t signalled = log.find("SIGTERM: stopping");
  REQUIRE(signalled != std::string::npos);
  // The pass it was training is written back before it ends, and nothing after it runs.
  const size_t written = log.find("pass 1: end_pass: ", signalled);
  CHECK(written != std::string::npos);
  CHECK_THAT(log, Catch::Contains("Aborted: stopped by SIGTERM in epoch 1, after "));
  CHECK(log.find("pass 2: begin_pass") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(job.dir + "/model"));  // a stopped job saves nothing
  // The node said it failed: the pservers end without waiting out its lease.
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 1);
  CHECK_THAT(job.Log("pserver0"), Catch::Contains("failed: 0"));
}

TEST_CASE("GPU-PS: a pass above fleetps.gpups.device_memory_mb is refused naming keys and bytes, nothing hangs",
          "[e2e]") {
  GpuBoxJob job(4000, 1, "  gpups: {device_memory_mb: 1}\n");
  job.Start();
  const int rc = job.nodes[0]->Wait(60s);
  const std::string log = job.Log("trainer0");
  INFO(log);
  CHECK(rc == 2);
  CHECK_THAT(log, Catch::Contains("keys; device") && Catch::Contains("bytes") &&
                      Catch::Contains("fleetps.gpups.device_memory_mb"));
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 1);  // the trainer ended, failed
}

TEST_CASE("GPU-PS: a node trains against pservers that require TLS and the cluster's secret, all exit 0", "[e2e]") {
  // The cluster's files, as the job YAML's fleetps.server names them for every role.
  const std::string files = testing::MakeTempDir("gpups_tls");
  const std::string secret = files + "/secret";
  testing::WriteFile(secret, "gpubox cluster secret 0123456789\n");
  ::chmod(secret.c_str(), 0600);
  testing::TlsTestFiles tls;
  REQUIRE(testing::MakeTlsFiles(files, "cluster", "IP:127.0.0.1", &tls));
  // Two nodes: their dense allreduce's rendezvous (node 0 serves it) uses the cluster's TLS too.
  GpuBoxJob job(4000, 2, "", "",
                "    auth: required\n    auth_secret_file: " + secret + "\n    tls: {cert_file: " + tls.cert_file +
                    ", key_file: " + tls.key_file + ", ca_file: " + tls.ca_file + "}\n");
  job.Start();
  for (uint32_t t = 0; t < 2; ++t) {
    const int rc = job.nodes[t]->Wait(120s);
    INFO(job.AllLogs());
    REQUIRE(rc == 0);
  }
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 0);
  CHECK_THAT(job.Log("pserver0"), Catch::Contains(", TLS, shared-secret auth)"));
  CHECK_THAT(job.Log("trainer0"), Catch::Contains("pass 2: end_pass") && Catch::Contains("saved the model"));
}

TEST_CASE("GPU-PS with HETER_DEVICE_TYPE=gpu and no visible GPU exits non-zero, saying how to use the host twin",
          "[e2e]") {
  if (::system("nvidia-smi -L >/dev/null 2>&1") == 0) {
    WARN("skipped: a GPU is visible here");
    return;
  }
  GpuBoxJob job(1000, 1);  // no pservers needed: the device is checked first
  auto env = job.Env("TRAINER");
  env["PADDLE_TRAINER_ID"] = "0";
  env["HETER_DEVICE_TYPE"] = "gpu";
  ChildProcess node;
  REQUIRE(node.Start({testing::BinaryPath("heter_trainer/heter-trainer"), "--config", job.dir + "/job.yaml"}, env,
                     job.dir + "/gpu.log"));
  CHECK(node.Wait(60s) == 2);
  CHECK_THAT(job.Log("gpu"), Catch::Contains("HETER_DEVICE_TYPE=cpu"));
}

TEST_CASE("PaddleRec's own rank_dnn config_gpubox.yaml trains its sample data as a gpubox job", "[e2e]") {
  // The YAML as PaddleRec ships it (copied, so the model is saved next to the copy), its
  // sample data, one pserver, one node with the two host shards.
  const std::string paddlerec = FLEETPS_SOURCE_DIR "/../shared/data/paddlerec/rank_dnn/";
  GpuBoxJob job(1000, 1);
  testing::WriteFile(job.dir + "/config_gpubox.yaml", testing::ReadFile(paddlerec + "config_gpubox.yaml"));
  const std::string data = paddlerec + "data/sample_data/train";
  auto env = job.Env("PSERVER");
  env["PADDLE_PSERVERS_IP_PORT_LIST"] = "127.0.0.1:" + std::to_string(job.ports[0]);
  env["POD_IP"] = "127.0.0.1";
  env["PADDLE_PORT"] = std::to_string(job.ports[0]);
  ChildProcess server;
  REQUIRE(server.Start({testing::BinaryPath("server/pserver"), "--config", job.dir + "/config_gpubox.yaml"}, env,
                       job.dir + "/pserver0.log"));
  env["TRAINING_ROLE"] = "TRAINER";
  env["PADDLE_TRAINER_ID"] = "0";
  // As under fleetps-heter-trainer@.service (Type=notify): the node says READY=1 once it
  // trains, STOPPING=1 at the end.
  testing::NotifySocket manager;
  env["NOTIFY_SOCKET"] = manager.address();
  env["WATCHDOG_USEC"] = "400000";
  ChildProcess node;
  REQUIRE(node.Start({testing::BinaryPath("heter_trainer/heter-trainer"), "--config", job.dir + "/config_gpubox.yaml",
                      "--train-data", data, "--test-data", data, "--report", job.dir + "/trainer0.json"},
                     env, job.dir + "/trainer0.log"));
  const int rc = node.Wait(60s);
  INFO(job.Log("trainer0") + "\npserver:\n" + job.Log("pserver0"));
  REQUIRE(rc == 0);
  CHECK(server.Wait(30s) == 0);
  const auto ready = manager.Receive(5s);  // sent long before the exit: already queued
  REQUIRE(ready.has_value());
  CHECK(*ready == "READY=1\nSTATUS=heter-trainer (gpubox) trainer 0 training");
  std::optional<std::string> msg;
  do {  // the watchdog's pings (WatchdogSec=) from READY=1 on, as many as the job took
    msg = manager.Receive(5s);
  } while (msg == "WATCHDOG=1");
  CHECK(msg == std::optional<std::string>("STOPPING=1\nSTATUS=job finished"));
  const std::string log = job.Log("trainer0");
  CHECK_THAT(log, Catch::Contains("pass 3: end_pass: 1055 rows written back"));  // 3 epochs, 80 lines
  CHECK_THAT(log, Catch::Contains("saved the model"));
  CHECK(testing::ReportTestAuc(job.dir + "/trainer0.json") > 0.5);
}

}  // namespace
}  // namespace fleetps
