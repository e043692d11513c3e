// Collective training with the real binaries, started by scripts/launch_collective.sh
// (fleetps-launch --run_mode collective):
//  - 2 ranks of the quick-start mlp (no pservers) reading one file through the distributed
//    sampler: every process exits 0, each rank trains on half of the records, and both ranks
//    log the same parameter checksum after every epoch;
//  - a rank that fails stops the job: the launcher exits non-zero naming it, with the tail
//    of its log, and leaves no rank running;
//  - the hybrid (ctr_dnn: sparse on 2 pservers, dense by allreduce): trains, saves, every
//    process exits 0, the ranks agree;
//  - one rank with backend nccl: on a GPU, bitwise the parameters of the Gloo run; without
//    one (or without NCCL in the build), refused at start with what is missing.
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <regex>
#include <thread>

#include <sys/stat.h>

#include <csignal>

#include "common/net/auth.h"
#include "test/support/job.h"
#include "test/support/process.h"
#include "trainer/collective/rendezvous.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
using namespace std::chrono_literals;

std::string Launcher() { return std::string(FLEETPS_SOURCE_DIR) + "/scripts/launch_collective.sh"; }

// The "parameter checksum" of every epoch in a log, in order.
std::vector<std::string> Checksums(const std::string& log) {
  std::vector<std::string> out;
  std::regex re("parameter checksum ([0-9a-f]{16})");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

const char* kMlp = R"(
runner:
  data_format: multislot
  train_data_dir: "data/train"
  test_data_dir: "data/test"
  train_batch_size: 64
  infer_batch_size: 1024
  epochs: 2
  print_interval: 100
hyper_parameters:
  model_type: mlp
  input_dim: 32
  dense_input_dim: 32
  sparse_inputs_slots: 2
  fc_sizes: [32, 32]
  output: softmax2
  optimizer: {class: SGD, learning_rate: 0.05}
fleetps:
  collective: {fuse_grad_size_in_MB: 1, warmup_steps: 10}
)";

TEST_CASE("Two collective ranks of the quick-start mlp share one file's records, agree and exit 0", "[e2e]") {
  const std::string dir = testing::MakeTempDir("collective_e2e");
  // One file: split by files, rank 1 would get nothing; the sampler splits its records.
  REQUIRE(testing::GenerateData(
      dir, {"--train-files", "1", "--rows", "20000", "--format", "multislot", "--slots", "1", "--dense-dim", "32"}));
  std::string yaml = kMlp;
  yaml.replace(yaml.find("runner:\n") + 8, 0,
               "  reader_type: InMemoryDataset\n  sampler: distributed\n  shuffle: local\n");
  testing::WriteFile(dir + "/mlp.yaml", yaml);
  ChildProcess launcher;
  REQUIRE(launcher.Start(
      {Launcher(), "--nproc", "2", "--log_dir", dir + "/logs", testing::BinaryPath("trainer/cpu-trainer"), "--config",
       dir + "/mlp.yaml", "--report", dir + "/report.json"},
      {}, dir + "/launcher.log"));
  const int rc = launcher.Wait(120s);
  const std::string log0 = testing::ReadFile(dir + "/logs/workerlog.0");
  const std::string log1 = testing::ReadFile(dir + "/logs/workerlog.1");
  INFO("launcher:\n" << testing::ReadFile(dir + "/launcher.log") << "\nrank 1:\n" << log1);
  REQUIRE(rc == 0);
  CHECK_THAT(log0, Catch::Contains("trainer 0/2: collective training"));
  // Every rank loads the whole file and trains on ceil(n / 2) of its records per epoch.
  std::smatch loaded;
  REQUIRE(std::regex_search(log1, loaded, std::regex("trainer 1: loaded (\\d+) examples into memory")));
  const long rows = std::stol(loaded[1]);
  CHECK(rows > 15000);  // the training share of the 20000 generated rows
  const std::string epoch_examples = "this trainer: " + std::to_string((rows + 1) / 2) + " examples in";
  CHECK_THAT(log0, Catch::Contains(epoch_examples));
  CHECK_THAT(log1, Catch::Contains(epoch_examples));
  const auto sums0 = Checksums(log0), sums1 = Checksums(log1);
  CHECK(sums0.size() == 2);
  CHECK(sums0 == sums1);
  CHECK(sums0.front() != sums0.back());  // it trained
  CHECK(testing::ReportTestAuc(dir + "/report.json") > 0.6);
}

// One rank run directly with PADDLE_DISTRI_BACKEND (gloo, then nccl on FLAGS_selected_gpus=0).
// Returns its exit code; *log gets its output.
int RunOneRank(const std::string& dir, const std::string& backend, std::string* log) {
  ChildProcess trainer;
  std::map<std::string, std::string> env = {{"PADDLE_DISTRI_BACKEND", backend}};
  if (backend == "nccl") env["FLAGS_selected_gpus"] = "0";
  REQUIRE(trainer.Start(
      {testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/mlp.yaml", "--sync-mode", "collective"}, env,
      dir + "/" + backend + ".log"));
  const int rc = trainer.Wait(120s);
  *log = testing::ReadFile(dir + "/" + backend + ".log");
  return rc;
}

TEST_CASE("One rank with backend nccl: the checksums of the Gloo run on a GPU, a clear refusal without one", "[e2e]") {
  const std::string dir = testing::MakeTempDir("collective_nccl");
  REQUIRE(testing::GenerateData(
      dir, {"--train-files", "1", "--rows", "4000", "--format", "multislot", "--slots", "1", "--dense-dim", "32"}));
  testing::WriteFile(dir + "/mlp.yaml", kMlp);
  std::string gloo_log, nccl_log;
  REQUIRE(RunOneRank(dir, "gloo", &gloo_log) == 0);
  INFO("gloo run:\n" << gloo_log);
  CHECK_THAT(gloo_log, Catch::Contains("backend: gloo"));
  const auto gloo = Checksums(gloo_log);
  REQUIRE(gloo.size() == 2);  // one per epoch
  const int rc = RunOneRank(dir, "nccl", &nccl_log);
  INFO("nccl run:\n" << nccl_log);
  if (rc != 0) {
    // No GPU here, or no NCCL in this build: refused at start, saying which and what to do.
    CHECK(rc == 1);
    CHECK_THAT(nccl_log, Catch::Contains("collective backend nccl: GPU 0 was selected, but") &&
                             Catch::Contains("or use backend: gloo"));
    CHECK_THAT(nccl_log, Catch::Contains("this build has no NCCL") || Catch::Contains("sees 0 CUDA device(s)"));
    WARN("NCCL run skipped: " << nccl_log.substr(nccl_log.find("collective backend nccl")));
    return;
  }
  // World size 1: allreduce and broadcast leave the data as it is on both backends, so the
  // parameters are bitwise those of the Gloo run.
  CHECK_THAT(nccl_log, Catch::Contains("backend: nccl on GPU 0"));
  CHECK(Checksums(nccl_log) == gloo);
}

// A collective job has no pservers (the trainer's local mode), but the cluster's secret
// still guards rank 0's rendezvous: a peer without it is refused.
TEST_CASE("With FLEETPS_AUTH_SECRET_FILE rank 0's rendezvous serves only peers that hold the secret", "[e2e]") {
  const std::string dir = testing::MakeTempDir("collective_auth");
  REQUIRE(testing::GenerateData(
      dir, {"--train-files", "1", "--rows", "200", "--format", "multislot", "--slots", "1", "--dense-dim", "32"}));
  std::string yaml = kMlp;
  yaml.replace(yaml.find("collective: {") + 13, 0, "timeout_ms: 60000, ");
  testing::WriteFile(dir + "/mlp.yaml", yaml);
  const std::string secret = "the collective ranks' shared secret";
  testing::WriteFile(dir + "/secret", secret);
  REQUIRE(::chmod((dir + "/secret").c_str(), 0600) == 0);
  const auto ports = testing::FreePorts(2);
  const std::vector<net::Endpoint> eps = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
  ChildProcess rank0;  // rank 1 never comes: rank 0 serves the rendezvous until killed
  REQUIRE(rank0.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/mlp.yaml"},
                      {{"PADDLE_TRAINER_ID", "0"},
                       {"PADDLE_TRAINERS_NUM", "2"},
                       {"PADDLE_TRAINER_ENDPOINTS", eps[0].ToString() + "," + eps[1].ToString()},
                       {"PADDLE_DISTRI_BACKEND", "gloo"},
                       {"FLEETPS_AUTH_SECRET_FILE", dir + "/secret"}},
                      dir + "/rank0.log"));
  INFO("rank 0:\n" << testing::ReadFile(dir + "/rank0.log"));
  REQUIRE(testing::WaitForPort(ports[0], 60s));
  auto plain = trainer::collective::RendezvousClient::Connect(eps[0], 5s, nullptr);
  if (plain.ok()) CHECK((*plain)->Set("intruder", std::vector<uint8_t>(1000)).code() == StatusCode::kPermissionDenied);
  auto ranked =
      trainer::collective::RendezvousClient::Connect(eps[0], 5s, std::make_shared<const net::AuthKey>(secret));
  REQUIRE(ranked.ok());
  CHECK((*ranked)->Set("probe", std::vector<uint8_t>{1}).ok());
  CHECK_FALSE((*ranked)->Get("intruder", 100ms).ok());  // never stored
  rank0.Signal(SIGKILL);
  rank0.Wait(30s);
}

TEST_CASE("A failing rank stops the collective job: the launcher names it and no rank is left", "[e2e]") {
  const std::string dir = testing::MakeTempDir("collective_fail");
  REQUIRE(testing::GenerateData(
      dir, {"--train-files", "2", "--rows", "2000", "--format", "multislot", "--slots", "1", "--dense-dim", "32"}));
  // Rank 1 reads a data directory that does not exist; rank 0 would wait for it forever.
  testing::WriteFile(dir + "/run.sh", "#!/bin/sh\nif [ \"$PADDLE_TRAINER_ID\" = 1 ]; then extra=\"--train-data " + dir +
                                          "/missing\"; fi\nexec " + testing::BinaryPath("trainer/cpu-trainer") +
                                          " --config " + dir + "/mlp.yaml $extra\n");
  testing::WriteFile(dir + "/mlp.yaml", kMlp);
  ChildProcess launcher;
  REQUIRE(launcher.Start({Launcher(), "--nproc", "2", "--log_dir", dir + "/logs", "/bin/sh", dir + "/run.sh"}, {},
                         dir + "/launcher.log"));
  const int rc = launcher.Wait(60s);
  const std::string out = testing::ReadFile(dir + "/launcher.log");
  INFO(out);
  CHECK(rc != 0);
  CHECK_THAT(out,
             Catch::Contains("worker 1 (pid ") && Catch::Contains("exited with code") && Catch::Contains("missing"));
  // ("[m]lp": the pattern must not match pgrep's own shell.)
  CHECK(::system(("pgrep -f '" + dir + "/[m]lp.yaml' >/dev/null").c_str()) != 0);  // nothing left running
}

TEST_CASE("Hybrid ctr_dnn: sparse on the pservers, dense by allreduce; trains, saves, all exit 0", "[e2e]") {
  const std::string dir = testing::MakeTempDir("hybrid_e2e");
  REQUIRE(testing::GenerateData(dir, {"--train-files", "2", "--rows", "30000"}));
  testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/train"
  test_data_dir: "data/test"
  train_batch_size: 256
  epochs: 1
  print_interval: 50
  model_save_path: "model"
)" + testing::kSmallCtrDnnModel + R"(fleetps:
  sparse_table: {shards: 4}
  server: {io_threads: 1, shard_threads: 1}
)");
  const auto ports = testing::FreePorts(2);
  const std::string pservers = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  std::unique_ptr<ChildProcess> servers[2];
  for (int i = 0; i < 2; ++i) {
    servers[i] = std::make_unique<ChildProcess>();
    REQUIRE(servers[i]->Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"},
                              {{"TRAINING_ROLE", "PSERVER"},
                               {"PADDLE_PSERVERS_IP_PORT_LIST", pservers},
                               {"POD_IP", "127.0.0.1"},
                               {"PADDLE_PORT", std::to_string(ports[i])}},
                              dir + "/pserver" + std::to_string(i) + ".log"));
  }
  for (uint16_t p : ports) REQUIRE(testing::WaitForPort(p, 30s));
  ChildProcess launcher;
  REQUIRE(launcher.Start({Launcher(), "--nproc", "2", "--log_dir", dir + "/logs",
                          testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml"},
                         {{"PADDLE_PSERVERS_IP_PORT_LIST", pservers}}, dir + "/launcher.log"));
  const int rc = launcher.Wait(180s);
  const std::string log0 = testing::ReadFile(dir + "/logs/workerlog.0");
  INFO(log0 << "\nrank 1:\n" << testing::ReadFile(dir + "/logs/workerlog.1"));
  REQUIRE(rc == 0);
  for (int i = 0; i < 2; ++i) CHECK(servers[i]->Wait(30s) == 0);
  CHECK_THAT(log0, Catch::Contains("hybrid training") && Catch::Contains("saved the model"));
  const auto sums = Checksums(log0);
  CHECK(sums.size() == 1);
  CHECK(sums == Checksums(testing::ReadFile(dir + "/logs/workerlog.1")));
}

}  // namespace
}  // namespace fleetps
