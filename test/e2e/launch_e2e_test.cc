// fleetps-launch with the real binaries on loopback:
//  - one command runs 2 pservers + 2 cpu-trainers to the end: exit 0, Paddle's log files
//    under --log_dir, worker 0's output streamed, a report per trainer;
//  - two nodes on loopback (127.0.0.1 and 127.0.0.2), a launcher each: the pservers' node
//    keeps them until the trainers on the other node have ended; both exit 0;
//  - kill -9 of a worker: the launcher stops every other process and exits non-zero
//    (128 + 9) with the worker's log tail; no process of the job is left;
//  - kill -9 of the launcher itself: its processes die with it (PR_SET_PDEATHSIG);
//  - a trainer's opt-in /metrics (FLEETPS_TRAINER_METRICS_PORT, passed through the
//    launcher) moves while it trains; SIGTERM to the launcher stops the job (exit 143).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include "common/dense/cpu_features.h"
#include "test/support/http.h"
#include "test/support/job.h"
#include "test/support/process.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
using namespace std::chrono_literals;

struct LaunchJob {
  std::string dir = testing::MakeTempDir("launch_e2e");
  std::string launcher_log = dir + "/launcher.out";
  ChildProcess launcher;

  explicit LaunchJob(uint32_t epochs) {
    REQUIRE(testing::GenerateData(dir, {"--rows", "20000", "--train-files", "2"}));
    testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: ")" + dir + R"(/data/train"
  test_data_dir: ")" + dir + R"(/data/test"
  train_batch_size: 256
  infer_batch_size: 1024
  thread_num: 1
  epochs: )" + std::to_string(epochs) + R"(
  print_interval: 10
)" + testing::kSmallCtrDnnModel + R"(fleetps:
  sparse_table: {shards: 2}
  server:
    io_threads: 1
    shard_threads: 1
)");
  }
  void Start() {
    REQUIRE(launcher.Start(
        {testing::BinaryPath("tools/launch/fleetps-launch"), "--server_num", "2", "--worker_num", "2", "--log_dir",
         dir + "/log", "--stop_wait_s", "10", testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml",
         "--report", dir + "/report{trainer_id}.json", "--heartbeat-interval-ms", "500"},
        {}, launcher_log));
  }
  std::string Output() const { return testing::ReadFile(launcher_log); }
  std::string Log(const std::string& name) const { return testing::ReadFile(dir + "/log/" + name); }
  // The pid the launcher reported for `name` ("worker 1"), -1 if none yet.
  pid_t Pid(const std::string& name) const {
    std::smatch m;
    const std::string out = Output();
    if (!std::regex_search(out, m, std::regex("started " + name + " \\(pid ([0-9]+)\\)"))) return -1;
    return std::stoi(m[1]);
  }
  std::vector<pid_t> Pids() const {
    std::vector<pid_t> out;
    for (const char* n : {"server 0", "server 1", "worker 0", "worker 1"}) out.push_back(Pid(n));
    return out;
  }
};

// True when `pid` no longer runs (gone, or a zombie not yet reaped by init).
bool Gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close == std::string::npos || line.substr(close + 2, 1) == "Z";
}

// True when a TCP socket can be bound to `ip` on this machine.
bool CanBind(const char* ip) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  const bool ok = ::inet_pton(AF_INET, ip, &addr.sin_addr) == 1 &&
                  ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

bool AllGone(const std::vector<pid_t>& pids, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    bool gone = true;
    for (pid_t p : pids) gone = gone && p > 0 && Gone(p);
    if (gone) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

TEST_CASE("One fleetps-launch command runs 2 pservers + 2 cpu-trainers to the end", "[e2e]") {
  LaunchJob job(1);
  job.Start();
  const int rc = job.launcher.Wait(240s);
  const std::string out = job.Output();
  INFO("launcher output:\n"
       << out << "\nworkerlog.1:\n"
       << job.Log("workerlog.1") << "\nserverlog.0:\n"
       << job.Log("serverlog.0"));
  REQUIRE(rc == 0);
  CHECK_THAT(out, Catch::Contains("ps mode (inferred from --server_num)") && Catch::Contains("every process exited 0"));
  // Worker 0's output is streamed; the others' only go to their logs.
  CHECK_THAT(out, Catch::Contains("trainer 0 epoch 1 step") && !Catch::Contains("trainer 1 epoch 1 step"));
  CHECK_THAT(job.Log("workerlog.0"), Catch::Contains("trainer 0 test"));
  CHECK_THAT(job.Log("workerlog.1"), Catch::Contains("trainer 1 epoch 1 step"));
  CHECK_THAT(job.Log("serverlog.0"), Catch::Contains("pserver"));
  CHECK_THAT(job.Log("serverlog.1"), Catch::Contains("pserver"));
  // {trainer_id} in --report: one report per trainer.
  CHECK(testing::ReportTestAuc(job.dir + "/report0.json") > 0.5);
  CHECK(testing::ReportTestAuc(job.dir + "/report1.json") > 0.5);
  // The report's per-interval curve (fleetps-plot draws it): print_interval 10 over about
  // 9000 / 256 = 35 full batches gives points at steps 10, 20, 30, with 256 examples a step.
  const std::string report = testing::ReadFile(job.dir + "/report0.json");
  INFO(report);
  int points = 0;
  const std::regex point("\\{\"epoch\": 1, \"step\": ([0-9]+), \"examples\": ([0-9]+), \"loss\": ([0-9.]+)");
  for (std::sregex_iterator it(report.begin(), report.end(), point), end; it != end; ++it) {
    ++points;
    CHECK(std::stoi((*it)[1]) == 10 * points);
    CHECK(std::stoi((*it)[2]) == 10 * points * 256);
    CHECK(std::stod((*it)[3]) > 0);
  }
  CHECK(points >= 3);
  CHECK(AllGone(job.Pids(), 5s));
}

// Two nodes on loopback, 127.0.0.1 and 127.0.0.2 (both are this machine's): one launcher per
// node with the job's full lists, as fleetrun runs on each machine. Node A's launcher runs
// the pservers only (no worker of its own: it must not take "no worker running" for "the
// workers have finished", even with --stop_wait_s 0); node B's runs the trainers.
TEST_CASE("Two nodes: one launcher runs the pservers, the other the trainers; both end 0", "[e2e]") {
  if (!CanBind("127.0.0.2")) {  // Linux routes all of 127.0.0.0/8 to lo; a sandbox may not
    WARN("skipped: 127.0.0.2 is not an address of this machine");
    return;
  }
  LaunchJob job(1);
  const auto ports = testing::FreePorts(4);
  const std::string servers = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  const std::string workers = "127.0.0.2:" + std::to_string(ports[2]) + ",127.0.0.2:" + std::to_string(ports[3]);
  ChildProcess node_a, node_b;
  auto launch = [&](ChildProcess& node, const std::string& host, const std::string& stop_wait) {
    REQUIRE(node.Start({testing::BinaryPath("tools/launch/fleetps-launch"), "--servers", servers, "--workers", workers,
                        "--host", host, "--stop_wait_s", stop_wait, "--log_dir", job.dir + "/log-" + host,
                        testing::BinaryPath("trainer/cpu-trainer"), "--config", job.dir + "/job.yaml", "--report",
                        job.dir + "/report{trainer_id}.json", "--heartbeat-interval-ms", "500"},
                       {}, job.dir + "/launcher-" + host + ".out"));
  };
  launch(node_a, "127.0.0.1", "0");
  launch(node_b, "127.0.0.2", "10");
  const int rc_b = node_b.Wait(240s);
  const int rc_a = node_a.Wait(60s);
  const std::string out_a = testing::ReadFile(job.dir + "/launcher-127.0.0.1.out");
  const std::string out_b = testing::ReadFile(job.dir + "/launcher-127.0.0.2.out");
  INFO("node A:\n" << out_a << "\nnode B:\n" << out_b);
  CHECK(rc_a == 0);
  CHECK(rc_b == 0);
  CHECK_THAT(out_a, Catch::Contains("started server 0") && Catch::Contains("started server 1") &&
                        !Catch::Contains("started worker") && !Catch::Contains("stopping"));
  CHECK_THAT(out_b, Catch::Contains("started worker 0") && Catch::Contains("started worker 1") &&
                        !Catch::Contains("started server"));
  CHECK(testing::ReportTestAuc(job.dir + "/report1.json") > 0.5);
}

TEST_CASE("kill -9 of a worker: fleetps-launch stops everything and exits non-zero", "[e2e]") {
  LaunchJob job(200);  // far longer than the test: it ends only through the kill
  job.Start();
  REQUIRE(testing::WaitForLog(job.dir + "/log/workerlog.1", "trainer 1 epoch 1 step", 120s));
  const auto pids = job.Pids();
  for (pid_t p : pids) REQUIRE(p > 0);
  ::kill(pids[3], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const int rc = job.launcher.Wait(60s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const std::string out = job.Output();
  INFO("launcher output:\n" << out);
  CHECK(rc == 128 + SIGKILL);
  CHECK_THAT(out, Catch::Contains("worker 1 (pid " + std::to_string(pids[3])) &&
                      Catch::Contains("was killed by signal 9") && Catch::Contains("workerlog.1:") &&
                      Catch::Contains("every process has stopped"));
  CHECK(AllGone(pids, 5s));
  // The acceptance bound: 10 s. By design at most about 5.2 s: the launcher reacts within
  // 100 ms and the others stop on SIGTERM, or SIGKILL after --kill_grace_s (5 s).
  WARN("launcher exited " << seconds << " s after the kill");
  CHECK(seconds < 10);
}

TEST_CASE("kill -9 of fleetps-launch takes its processes with it", "[e2e]") {
  LaunchJob job(200);
  job.Start();
  REQUIRE(testing::WaitForLog(job.dir + "/log/workerlog.0", "trainer 0 epoch 1 step", 120s));
  const auto pids = job.Pids();
  for (pid_t p : pids) REQUIRE(p > 0);
  job.launcher.Signal(SIGKILL);
  CHECK(job.launcher.Wait(10s) == 128 + SIGKILL);
  CHECK(AllGone(pids, 10s));
}

TEST_CASE("A trainer's opt-in /metrics moves while it trains; SIGTERM to the launcher stops the job", "[e2e]") {
  LaunchJob job(200);
  const uint16_t port = testing::FreePorts(1)[0];
  REQUIRE(job.launcher.Start(
      {testing::BinaryPath("tools/launch/fleetps-launch"), "--server_num", "1", "--worker_num", "1", "--log_dir",
       job.dir + "/log", testing::BinaryPath("trainer/cpu-trainer"), "--config", job.dir + "/job.yaml"},
      {{"FLEETPS_TRAINER_METRICS_PORT", std::to_string(port)}}, job.launcher_log));
  REQUIRE(testing::WaitForLog(job.dir + "/log/workerlog.0", "trainer 0 epoch 2 done", 120s));
  const std::string text = testing::HttpGetBody(port, "/metrics");
  INFO(text);
  std::smatch m;
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_trainer_examples_total ([0-9.e+]+)")));
  CHECK(std::stod(m[1]) >= 18000);  // two epochs of 9000 examples, at least
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_trainer_pull_seconds_count ([0-9.e+]+)")));
  CHECK(std::stod(m[1]) > 0);
  CHECK_THAT(text, Catch::Contains("fleetps_trainer_auc ") && Catch::Contains("fleetps_trainer_epoch ") &&
                       Catch::Contains("fleetps_trainer_output_auc{label=\"click\",output=\"click\"} "));
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_trainer_loss ([0-9.e+-]+)")));
  CHECK(std::stod(m[1]) > 0);
  CHECK(std::stod(m[1]) < 1);  // log loss of a CTR near 0.25 stays well below 1
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_trainer_examples_per_second ([0-9.e+-]+)")));
  CHECK(std::stod(m[1]) > 0);
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_trainer_push_seconds_count ([0-9.e+]+)")));
  CHECK(std::stod(m[1]) > 0);
  CHECK(testing::HttpGetBody(port, "/readyz") == "ok\n");
  // The queues (QueueDataset, the async communicator): the job's default capacity, depths
  // within their bounds (their exact values: data_test and runtime_test).
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_trainer_data_queue_capacity ([0-9.e+]+)")));
  CHECK(std::stod(m[1]) == 32);
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_trainer_data_queue_batches ([0-9.e+]+)")));
  CHECK(std::stod(m[1]) <= 32);
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_trainer_push_queue_steps ([0-9.e+]+)")));
  // Back-pressure: at most 2 x max_merge_steps (4) steps merging, as many in the window sent.
  CHECK(std::stod(m[1]) <= 4 * 4);
  CHECK_THAT(text, Catch::Contains("\nfleetps_trainer_push_queue_keys "));
  // What its dense layers run on: the backend, the CPU's kernel family, the precision.
  REQUIRE(std::regex_search(
      text, m,
      std::regex("\nfleetps_dense_backend_info\\{backend=\"oneDNN [0-9.]+\",kernel=\"[^\"]+\",kernel_family=\"("
                 "generic|avx2|avx512|avx512_bf16|amx)\",precision=\"fp32\"\\} 1")));
  CHECK(m[1] == std::string(dense::IsaName(dense::DetectCpuFeatures().best())));
  REQUIRE(std::regex_search(text, m, std::regex("\nfleetps_dense_selfcheck_gflops ([0-9.e+]+)")));
  CHECK(std::stod(m[1]) > 0);
  CHECK(testing::HttpGetBody(port, "/healthz") == "ok\n");
  const auto pids = job.Pids();
  job.launcher.Signal(SIGTERM);
  CHECK(job.launcher.Wait(30s) == 128 + SIGTERM);
  CHECK_THAT(job.Output(), Catch::Contains("stopping 2 process(es): the launcher received Terminated"));
  CHECK(AllGone({pids[0], pids[2]}, 5s));
}

// The README's quick-start commands, with their install and build step skipped (the test
// runs against this build tree): scripts/run_local.sh (2 pservers + 2 cpu-trainers) and
// scripts/run_heter.sh (+ 1 heter-trainer on the CPU), each one fleetps-launch command.
TEST_CASE("scripts/run_local.sh and scripts/run_heter.sh run their jobs to the end", "[e2e]") {
  const std::string dir = testing::MakeTempDir("quick_start");
  REQUIRE(testing::GenerateData(dir, {"--rows", "20000", "--train-files", "2"}));
  for (const std::string script : {"run_local.sh", "run_heter.sh"}) {
    INFO(script);
    const std::string out = dir + "/" + script + ".out";
    const uint16_t base = testing::FreePortBase({0, 1, 2, 3, 4});
    ChildProcess run;
    REQUIRE(run.Start({std::string(FLEETPS_SOURCE_DIR) + "/scripts/" + script},
                      {{"BUILD", testing::BinaryDir()},
                       {"FLEETPS_SKIP_SETUP", "1"},
                       {"FLEETPS_TRAIN_DATA", dir + "/data/train"},
                       {"FLEETPS_TEST_DATA", dir + "/data/test"},
                       {"FLEETPS_EPOCHS", "1"},
                       {"FLEETPS_BASE_PORT", std::to_string(base)},
                       {"FLEETPS_OUT", out},
                       {"HETER_DEVICE_TYPE", "cpu"}},
                      dir + "/" + script + ".log"));
    const int rc = run.Wait(240s);
    const std::string log = testing::ReadFile(dir + "/" + script + ".log");
    INFO(log);
    REQUIRE(rc == 0);
    CHECK_THAT(log, Catch::Contains("every process exited 0") && Catch::Contains("test: auc"));
    CHECK(testing::ReportTestAuc(out + "/trainer0.json") > 0.5);
    CHECK(testing::ReportTestAuc(out + "/trainer1.json") > 0.5);
    if (script == "run_heter.sh") {
      CHECK_THAT(testing::ReadFile(out + "/heterlog.0"), Catch::Contains("micro-batches trained"));
    }
  }
}

}  // namespace
}  // namespace fleetps
