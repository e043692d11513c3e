// Heterogeneous training with the real binaries on loopback: 2 pservers, 1 heter-trainer
// (CPU device; 2 for dense_sync allreduce) and 2 cpu-trainers, launched with Paddle's
// heter-PS environment.
//  - the job trains (over TLS, with server.auth: required, so the heter-trainer's own
//    server and its pserver client use TLS and authenticate too), evaluates, saves, and
//    every process exits 0 by itself: the heter-trainer once both cpu-trainers said they
//    finished; its HETER_DEVICE_TYPE is auto, which without a GPU runs on the CPU and logs
//    why;
//  - the same with two heter-trainers averaging their dense gradients by allreduce: both
//    end with bitwise the same replica;
//  - kill -9 of the heter-trainer mid-job: the cpu-trainers fail within 30 s with an
//    error naming its endpoint, and the pservers end — no process hangs;
//  - a frozen heter-trainer (SIGSTOP): the same, through the micro-batch deadline;
//  - the same with fleetps-launch --heter_max_restarts 1 restarting it: the launcher exits 0;
//  - SIGTERM to a heter-trainer whose pserver is gone: it stops within the drain timeout;
//  - with fleetps.heter.failover, kill -9 of one of two heter-trainers and its restart: the
//    job goes on with the other one, takes the restarted one back, and every process exits 0;
//  - HETER_DEVICE_TYPE=gpu where no GPU is visible exits non-zero, saying how to run on
//    the CPU (skipped on a machine with a GPU).
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>
#include <thread>

#include "test/support/job.h"
#include "test/support/process.h"
#include "test/support/tls_files.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
using namespace std::chrono_literals;

// 2 pservers, `heter_count` heter-trainers (ports[2..]; one more port for the allreduce
// rendezvous, fleetps.heter.allreduce_port) and 2 cpu-trainers; `heter_yaml` adds to the
// fleetps.heter map.
struct HeterJob {
  const uint32_t heter_count;
  std::string heter_device = "cpu";  // the heter-trainers' HETER_DEVICE_TYPE
  std::string dir = testing::MakeTempDir("heter_e2e");
  std::vector<uint16_t> ports = testing::FreePorts(3 + heter_count);
  std::string pservers = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  std::string heter;  // PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST
  std::unique_ptr<ChildProcess> servers[2], trainers[2];
  std::vector<std::unique_ptr<ChildProcess>> heters;

  HeterJob(uint32_t rows, uint32_t epochs, uint32_t heters_num = 1, const std::string& heter_yaml = "")
      : heter_count(heters_num) {
    for (uint32_t h = 0; h < heter_count; ++h) {
      heter += (h > 0 ? "," : "") + std::string("127.0.0.1:") + std::to_string(ports[2 + h]);
    }
    REQUIRE(testing::GenerateData(dir, {"--rows", std::to_string(rows), "--train-files", "2"}));
    const std::string secret = dir + "/secret";
    testing::WriteFile(secret, "heterogeneous cluster secret 0123\n");
    ::chmod(secret.c_str(), 0600);
    testing::TlsTestFiles tls;
    REQUIRE(testing::MakeTlsFiles(dir, "cluster", "IP:127.0.0.1", &tls));
    testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/train"
  test_data_dir: "data/test"
  train_batch_size: 256
  infer_batch_size: 1024
  thread_num: 1
  epochs: )" + std::to_string(epochs) + R"(
  print_interval: 50
  sync_mode: heter
  model_save_path: "model"
)" + testing::kSmallCtrDnnModel + R"(fleetps:
  sparse_table: {shards: 4}
  heter: {inflight: 2, lanes: 2, timeout_ms: 10000, allreduce_port: )" +
                                              std::to_string(ports.back()) + heter_yaml + R"(}
  server:
    io_threads: 1
    shard_threads: 1
    trainer_lease_s: 5
    drain_timeout_ms: 3000
    auth: required
    auth_secret_file: )" + secret + R"(
    tls: {cert_file: )" + tls.cert_file +
                                              ", key_file: " + tls.key_file + ", ca_file: " + tls.ca_file + "}\n");
  }

  std::map<std::string, std::string> Env(const std::string& role) const {
    return {{"TRAINING_ROLE", role},      {"PADDLE_PSERVERS_IP_PORT_LIST", pservers},
            {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", heter},
            {"STAGE_NUM", "2"},           {"PADDLE_STAGE_TRAINERS_NUM", "[2, " + std::to_string(heter_count) + "]"}};
  }
  void Start() {
    for (int i = 0; i < 2; ++i) {
      auto env = Env("PSERVER");
      env["POD_IP"] = "127.0.0.1";
      env["PADDLE_PORT"] = std::to_string(ports[i]);
      servers[i] = std::make_unique<ChildProcess>();
      REQUIRE(servers[i]->Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"}, env,
                                dir + "/pserver" + std::to_string(i) + ".log"));
    }
    heters.resize(heter_count);
    for (uint32_t h = 0; h < heter_count; ++h) StartHeter(h, HeterLogName(h));
    for (size_t p = 0; p < 2 + heter_count; ++p) REQUIRE(testing::WaitForPort(ports[p], 60s));
    for (int i = 0; i < 2; ++i) {
      auto tenv = Env("TRAINER");
      tenv["PADDLE_TRAINER_ID"] = std::to_string(i);
      tenv["STAGE_ID"] = "1";
      trainers[i] = std::make_unique<ChildProcess>();
      REQUIRE(trainers[i]->Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml", "--report",
                                  dir + "/trainer" + std::to_string(i) + ".json", "--heartbeat-interval-ms", "500"},
                                 tenv, dir + "/trainer" + std::to_string(i) + ".log"));
    }
  }
  // Start(), then waits until cpu-trainer 0 has logged a training step.
  void StartTraining() {
    Start();
    const bool training = testing::WaitForLog(dir + "/trainer0.log", "epoch 1 step", 120s);
    INFO(AllLogs());
    REQUIRE(training);
  }
  // Starts heter-trainer h (again, after it was stopped) with its log in <log>.log.
  void StartHeter(uint32_t h, const std::string& log) {
    auto env = Env("HETER_TRAINER");
    env["POD_IP"] = "127.0.0.1";
    env["PADDLE_PORT"] = std::to_string(ports[2 + h]);
    env["STAGE_ID"] = "2";
    env["HETER_DEVICE_TYPE"] = heter_device;
    heters[h] = std::make_unique<ChildProcess>();
    REQUIRE(heters[h]->Start({testing::BinaryPath("heter_trainer/heter-trainer"), "--config", dir + "/job.yaml"}, env,
                             dir + "/" + log + ".log"));
  }
  static std::string HeterLogName(uint32_t h) { return h == 0 ? "heter" : "heter" + std::to_string(h); }
  std::string Log(const std::string& name) const { return testing::ReadFile(dir + "/" + name + ".log"); }
  std::string AllLogs() const {
    std::string logs = "trainer0:\n" + Log("trainer0") + "\ntrainer1:\n" + Log("trainer1");
    for (uint32_t h = 0; h < heter_count; ++h) logs += "\n" + HeterLogName(h) + ":\n" + Log(HeterLogName(h));
    return logs + "\npserver0:\n" + Log("pserver0");
  }
};

// HETER_DEVICE_TYPE=auto: the GPU where one is usable, else the CPU, saying why.
TEST_CASE("Heter job: cpu-trainers + a heter-trainer on device auto train, evaluate, save and all exit 0", "[e2e]") {
  HeterJob job(40000, 1);
  job.heter_device = "auto";
  job.Start();
  for (int i = 0; i < 2; ++i) {
    const int rc = job.trainers[i]->Wait(240s);
    INFO(job.AllLogs());
    REQUIRE(rc == 0);
  }
  const int heter_rc = job.heters[0]->Wait(30s);
  INFO(job.AllLogs());
  CHECK(heter_rc == 0);
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 0);
  const std::string heter_log = job.Log("heter");
  CHECK_THAT(heter_log, Catch::Contains("every cpu-trainer has ended"));
  if (::system("nvidia-smi -L >/dev/null 2>&1") != 0) {
    CHECK_THAT(heter_log, Catch::Contains("HETER_DEVICE_TYPE auto: the dense part runs on the CPU"));
  }
  CHECK_THAT(heter_log, Catch::Contains(", TLS)"));
  CHECK_THAT(job.Log("pserver0"), Catch::Contains(", TLS, shared-secret auth)"));
  CHECK_THAT(heter_log, !Catch::Contains(" 0 micro-batches trained"));
  CHECK_THAT(job.Log("trainer0"), Catch::Contains("heter training") && Catch::Contains("saved the model"));
  // One small epoch: 0.597-0.62 observed, depending on the machine's load (the pipeline's
  // staleness); a dense part that does not learn gives 0.50.
  CHECK(testing::ReportTestAuc(job.dir + "/trainer0.json") > 0.58);
}

// fleetps.heter.dense_sync: allreduce — two heter-trainers average their dense gradients
// among themselves (Gloo, rendezvous over the cluster's TLS) instead of through the
// pservers; the job trains, saves, and every process exits 0; both end with bitwise the
// same replica.
TEST_CASE("Heter job with 2 heter-trainers averaging dense gradients by allreduce", "[e2e]") {
  HeterJob job(40000, 1, 2, ", dense_sync: allreduce, allreduce_interval_ms: 1");
  job.Start();
  for (int i = 0; i < 2; ++i) {
    const int rc = job.trainers[i]->Wait(240s);
    INFO(job.AllLogs());
    REQUIRE(rc == 0);
  }
  std::vector<std::string> checksums;
  for (uint32_t h = 0; h < 2; ++h) {
    const int rc = job.heters[h]->Wait(30s);
    const std::string log = job.Log(HeterJob::HeterLogName(h));
    INFO(log);
    CHECK(rc == 0);
    CHECK_THAT(log, Catch::Contains("dense parameters averaged among 2 heter-trainer(s)") &&
                        Catch::Contains("(gloo: the replicas are in host memory"));
    CHECK_THAT(log, !Catch::Contains(" 0 micro-batches trained"));  // round robin: both work
    CHECK_THAT(log, !Catch::Contains("final dense allreduce"));     // no warning
    const auto at = log.find("checksum ");
    REQUIRE(at != std::string::npos);
    checksums.push_back(log.substr(at + 9, 16));
  }
  CHECK(checksums[0] == checksums[1]);
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 0);
  CHECK_THAT(job.Log("trainer0"), Catch::Contains("saved the model"));
  CHECK(testing::ReportTestAuc(job.dir + "/trainer0.json") > 0.58);  // observed 0.62-0.65
}

// Stops the heter-trainer mid-job with `signo`: the cpu-trainers fail within 30 s naming
// it, and the pservers end.
void HeterTrainerLost(int signo) {
  HeterJob job(200000, 2);
  job.StartTraining();
  job.heters[0]->Signal(signo);
  const auto lost = std::chrono::steady_clock::now();
  for (int i = 0; i < 2; ++i) {
    const int rc = job.trainers[i]->Wait(60s);
    const std::string log = job.Log("trainer" + std::to_string(i));
    INFO(log);
    CHECK(rc == 1);
    CHECK_THAT(log, Catch::Contains("heter-trainer 0 (" + job.heter + ")"));
  }
  CHECK(std::chrono::steady_clock::now() - lost < 30s);
  for (int i = 0; i < 2; ++i) {
    const int rc = job.servers[i]->Wait(30s);
    INFO(job.Log("pserver" + std::to_string(i)));
    CHECK(rc == 1);  // every trainer ended, failed
  }
}

// SIGTERM to the cpu-trainers (systemctl stop): each lets its micro-batches in flight come
// back and pushes what they trained, then ends by the signal; the heter-trainer and the
// pservers, whose trainers have all ended (failed), end by themselves. The same when every
// process of the job gets SIGTERM (here the servers' first): the heter-trainer and the
// pservers serve the stopping cpu-trainers until they have ended.
TEST_CASE("SIGTERM to the cpu-trainers of a heter job: they stop gracefully, the rest end by themselves", "[e2e]") {
  const bool everyone = GENERATE(false, true);
  INFO("every process signalled: " << everyone);
  HeterJob job(200000, 2);
  job.StartTraining();
  if (everyone) {
    job.heters[0]->Signal(SIGTERM);
    for (auto& s : job.servers) s->Signal(SIGTERM);
    const std::string serving = "SIGTERM: serving the job's stopping trainers until they have ended";
    CHECK(testing::WaitForLog(job.dir + "/heter.log", serving, 10s));
    for (int i = 0; i < 2; ++i) {
      CHECK(testing::WaitForLog(job.dir + "/pserver" + std::to_string(i) + ".log", serving, 10s));
    }
  }
  for (auto& t : job.trainers) t->Signal(SIGTERM);
  for (int i = 0; i < 2; ++i) {
    const int rc = job.trainers[i]->Wait(30s);
    const std::string log = job.Log("trainer" + std::to_string(i));
    INFO(log);
    CHECK(rc == 128 + SIGTERM);
    CHECK_THAT(log, Catch::Contains("cpu-trainer: Aborted: stopped by SIGTERM in epoch 1, after "));
  }
  const int heter_rc = job.heters[0]->Wait(30s);
  INFO(job.AllLogs());
  CHECK(heter_rc == 1);  // its cpu-trainers ended, not cleanly
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 1);
}

TEST_CASE("kill -9 of the heter-trainer: the cpu-trainers fail naming it within 30 s, nothing hangs", "[e2e]") {
  HeterTrainerLost(SIGKILL);
}

TEST_CASE("A frozen heter-trainer (SIGSTOP): the cpu-trainers fail naming it within 30 s", "[e2e]") {
  HeterTrainerLost(SIGSTOP);  // the stopped process is killed when the test ends
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// fleetps.heter.failover: kill -9 of one of two heter-trainers mid-job, then its restart
// on the same port (as systemd's Restart= does). The cpu-trainers send the micro-batches
// it lost to the other one, send it nothing while it is down (probed every 500 ms), take it
// back once it answers HeterHello, and finish; every process exits 0 by itself.
TEST_CASE("Heter failover: kill -9 of one of two heter-trainers, then its restart; the job finishes", "[e2e]") {
  HeterJob job(200000, 8, 2, ", failover: true, failover_probe_ms: 500");
  job.StartTraining();
  job.heters[1]->Signal(SIGKILL);
  REQUIRE(job.heters[1]->Wait(10s) == 128 + SIGKILL);
  // Two more epochs without it: many probes find it down, and no micro-batch waits for it.
  REQUIRE(testing::WaitForLog(job.dir + "/trainer0.log", "epoch 3 done", 120s));
  job.StartHeter(1, "heter1-restarted");
  for (int i = 0; i < 2; ++i) {
    const int rc = job.trainers[i]->Wait(240s);
    INFO(job.AllLogs() + "\nheter1-restarted:\n" + job.Log("heter1-restarted"));
    REQUIRE(rc == 0);
  }
  const std::string name = "heter-trainer 1 (127.0.0.1:" + std::to_string(job.ports[3]) + ")";
  for (int i = 0; i < 2; ++i) {
    const std::string log = job.Log("trainer" + std::to_string(i));
    INFO(log);
    CHECK(Count(log, name + " is down") >= 1);
    // Only the micro-batches in flight when it died failed there (inflight 2, 1 thread):
    // none was sent to it while it was down.
    CHECK(Count(log, "failed on " + name) <= 2);
    CHECK_THAT(log, Catch::Contains(name + " answers again"));
  }
  CHECK_THAT(job.Log("trainer0"), Catch::Contains("saved the model"));
  const int restarted_rc = job.heters[1]->Wait(30s);
  const std::string restarted = job.Log("heter1-restarted");
  INFO(restarted);
  CHECK(restarted_rc == 0);
  CHECK_THAT(restarted, Catch::Contains("micro-batches trained") && !Catch::Contains(" 0 micro-batches trained"));
  CHECK(job.heters[0]->Wait(30s) == 0);
  for (int i = 0; i < 2; ++i) CHECK(job.servers[i]->Wait(30s) == 0);
  CHECK(testing::ReportTestAuc(job.dir + "/trainer0.json") > 0.58);
}

// The same through fleetps-launch --heter_max_restarts 1: the launcher starts the killed
// heter-trainer again (as systemd's Restart= does), the job goes on and the launcher exits 0.
TEST_CASE("fleetps-launch --heter_max_restarts: a killed heter-trainer is started again, the job ends 0", "[e2e]") {
  HeterJob job(200000, 8, 2, ", failover: true, failover_probe_ms: 500");  // its data and YAML
  const std::string log_dir = job.dir + "/log", out = job.dir + "/launcher.out";
  ChildProcess launcher;
  REQUIRE(launcher.Start({testing::BinaryPath("tools/launch/fleetps-launch"),
                          "--server_num",
                          "2",
                          "--worker_num",
                          "2",
                          "--heter_worker_num",
                          "2",
                          "--heter_devices",
                          "cpu",
                          "--heter_max_restarts",
                          "1",
                          "--log_dir",
                          log_dir,
                          "--stop_wait_s",
                          "20",
                          testing::BinaryPath("trainer/cpu-trainer"),
                          "--config",
                          job.dir + "/job.yaml",
                          "--report",
                          job.dir + "/trainer{trainer_id}.json",
                          "--heartbeat-interval-ms",
                          "500"},
                         {}, out));
  const bool training = testing::WaitForLog(log_dir + "/workerlog.0", "epoch 1 step", 120s);
  INFO(testing::ReadFile(out));
  REQUIRE(training);
  std::smatch m;
  const std::string started = testing::ReadFile(out);
  REQUIRE(std::regex_search(started, m, std::regex(R"(started heter worker 1 \(pid ([0-9]+)\))")));
  REQUIRE(::kill(std::stoi(m[1]), SIGKILL) == 0);
  const int rc = launcher.Wait(240s);
  const std::string output = testing::ReadFile(out), heter1 = testing::ReadFile(log_dir + "/heterlog.1");
  INFO(output + "\nheterlog.1:\n" + heter1);
  CHECK(rc == 0);
  CHECK_THAT(output, Catch::Contains("heter worker 1 (pid " + std::string(m[1]) + ") was killed by signal 9") &&
                         Catch::Contains("(restart 1 of 1)"));
  // The second run took micro-batches (the cpu-trainers took it back) and ended by itself.
  const auto again = heter1.find("started again (restart 1)");
  REQUIRE(again != std::string::npos);
  CHECK_THAT(heter1.substr(again),
             Catch::Contains("micro-batches trained") && !Catch::Contains(" 0 micro-batches trained"));
  CHECK(testing::ReportTestAuc(job.dir + "/trainer0.json") > 0.58);
}

// SIGTERM to a heter-trainer whose pserver is gone: its final dense push gives up after
// server.drain_timeout_ms (3 s here) instead of the pserver request deadline (60 s), and
// it exits.
TEST_CASE("SIGTERM to a heter-trainer with a pserver gone: it stops within the drain timeout", "[e2e]") {
  HeterJob job(200000, 2);
  job.StartTraining();
  job.servers[1]->Signal(SIGKILL);
  REQUIRE(job.servers[1]->Wait(10s) == 128 + SIGKILL);
  const auto stop = std::chrono::steady_clock::now();
  job.heters[0]->Signal(SIGTERM);
  const int rc = job.heters[0]->Wait(40s);
  const auto took = std::chrono::steady_clock::now() - stop;
  INFO(job.Log("heter"));
  CHECK(rc == 0);
  CHECK(took < 15s);
  CHECK_THAT(job.Log("heter"),
             Catch::Contains("the final dense push did not finish within 3000 ms") ||
                 Catch::Contains("closing the pserver connections: the dense gradients not yet pushed"));
  // Its cpu-trainers went on training: they were given 2 s to say they are stopping too.
  CHECK_THAT(job.Log("heter"), Catch::Contains("SIGTERM: trainer(s) 0, 1 still training"));
}

TEST_CASE("HETER_DEVICE_TYPE=gpu without a visible GPU exits non-zero and says how to run on the CPU", "[e2e]") {
  if (::system("nvidia-smi -L >/dev/null 2>&1") == 0) {
    WARN("skipped: a GPU is visible here");
    return;
  }
  HeterJob job(1000, 1);
  auto env = job.Env("HETER_TRAINER");
  env["POD_IP"] = "127.0.0.1";
  env["PADDLE_PORT"] = std::to_string(job.ports[2]);
  env["STAGE_ID"] = "2";
  env["HETER_DEVICE_TYPE"] = "gpu";
  ChildProcess heter;
  REQUIRE(heter.Start({testing::BinaryPath("heter_trainer/heter-trainer"), "--config", job.dir + "/job.yaml"}, env,
                      job.dir + "/heter.log"));
  CHECK(heter.Wait(30s) == 2);
  CHECK_THAT(job.Log("heter"), Catch::Contains("HETER_DEVICE_TYPE=cpu"));
}

}  // namespace
}  // namespace fleetps
