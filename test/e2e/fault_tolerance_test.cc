// Jobs that survive killed processes, and a cluster that admits only holders of its
// secret, with the real binaries on loopback:
//  - kill -9 one pserver in the middle of a 2 pserver + 2 trainer async job and restart it
//    from the last periodic checkpoint: the job finishes, every process exits 0, and the
//    test AUC is within 0.01 of the same job run without interruption;
//  - kill -9 a trainer: the other trainer and both pservers end within the lease-based
//    bound, with errors naming the dead trainer, instead of waiting forever;
//  - with server.auth: required, trainers holding the secret train and save; a trainer
//    without it, or with another one, is refused with an error that says so.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <thread>

#include "test/support/job.h"
#include "test/support/process.h"

namespace fleetps {
namespace {

using testing::ChildProcess;
using namespace std::chrono_literals;

// Data and a job YAML; `server_extra` adds keys under fleetps.server (two-space indented
// lines after "    ").
struct Job {
  std::string dir = testing::MakeTempDir("fault_e2e");
  std::vector<uint16_t> ports = testing::FreePorts(2);
  std::string endpoints = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  std::unique_ptr<ChildProcess> servers[2];
  std::unique_ptr<ChildProcess> trainers[2];

  Job(const std::string& server_extra, uint32_t epochs, uint32_t rows = 60000) {
    REQUIRE(testing::GenerateData(dir, {"--rows", std::to_string(rows), "--train-files", "2"}));
    testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/train"
  test_data_dir: "data/test"
  train_batch_size: 256
  infer_batch_size: 1024
  thread_num: 1
  epochs: )" + std::to_string(epochs) + R"(
  print_interval: 50
)" + testing::kSmallCtrDnnModel + R"(fleetps:
  sparse_table: {shards: 4}
  server:
    io_threads: 1
    shard_threads: 1
)" + server_extra);
  }

  // `load_dir`: given to `load_flag` (--load DIR, or --resume DIR: the newest checkpoint there).
  void StartServer(int i, const std::string& load_dir = "", const std::string& load_flag = "--load") {
    std::vector<std::string> argv = {testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"};
    if (!load_dir.empty()) {
      argv.push_back(load_flag);
      argv.push_back(load_dir);
    }
    servers[i] = std::make_unique<ChildProcess>();
    REQUIRE(servers[i]->Start(argv,
                              {{"TRAINING_ROLE", "PSERVER"},
                               {"PADDLE_PSERVERS_IP_PORT_LIST", endpoints},
                               {"POD_IP", "127.0.0.1"},
                               {"PADDLE_PORT", std::to_string(ports[i])}},
                              dir + "/pserver" + std::to_string(i) + ".log"));
  }
  std::string sync_mode = "async";

  void StartTrainer(int i, const std::string& name, std::map<std::string, std::string> env = {},
                    const std::string& config = "job.yaml") {
    env.insert({{"TRAINING_ROLE", "TRAINER"},
                {"PADDLE_PSERVERS_IP_PORT_LIST", endpoints},
                {"PADDLE_TRAINERS_NUM", "2"},
                {"PADDLE_TRAINER_ID", std::to_string(i)}});
    trainers[i] = std::make_unique<ChildProcess>();
    REQUIRE(
        trainers[i]->Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/" + config, "--sync-mode",
                            sync_mode, "--report", dir + "/" + name + ".json", "--heartbeat-interval-ms", "500"},
                           env, dir + "/" + name + ".log"));
  }
  std::string Log(const std::string& name) const { return testing::ReadFile(dir + "/" + name + ".log"); }
  // Periodic saves into DIR/ckpt (hourly: none falls due in a test, but a final save may);
  // returns that directory.
  std::string SaveEveryHour() {
    const std::string ckpt = dir + "/ckpt";
    testing::WriteFile(dir + "/job.yaml", testing::ReadFile(dir + "/job.yaml") +
                                              "    save_interval_s: 3600\n    save_dir: " + ckpt + "\n");
    return ckpt;
  }
  // Starts both pservers and both trainers; returns once each trainer has made 50 steps.
  void StartTraining() {
    for (int i = 0; i < 2; ++i) StartServer(i);
    for (uint16_t p : ports) REQUIRE(testing::WaitForPort(p, 30s));
    for (int i = 0; i < 2; ++i) StartTrainer(i, "trainer" + std::to_string(i));
    AwaitLog("trainer0", "epoch 1 step 50:", 60s);
    AwaitLog("trainer1", "epoch 1 step 50:", 60s);
  }
  // Waits until `name`'s log contains `text`, failing after `timeout`.
  void AwaitLog(const std::string& name, const std::string& text, std::chrono::seconds timeout) {
    const bool found = testing::WaitForLog(dir + "/" + name + ".log", text, timeout);
    INFO(name << " log:\n" << Log(name));
    REQUIRE(found);
  }
};

// Runs the whole job in `sync_mode`; returns trainer 0's test AUC. With `kill_server_1`,
// pserver 1 is killed with -9 after pserver 0 has made a periodic save during training,
// then restarted from it.
double RunJob(bool kill_server_1, const std::string& sync_mode = "async") {
  // One epoch of 200k rows: long enough to kill a pserver mid-job, short of over-fitting,
  // and a 20k-row test split, so that run-to-run AUC noise stays well under 0.01.
  Job job("    save_interval_s: 1\n", 1, 200000);
  job.sync_mode = sync_mode;
  testing::WriteFile(job.dir + "/job.yaml",
                     testing::ReadFile(job.dir + "/job.yaml") + "    save_dir: " + job.dir + "/ckpt\n");
  for (int i = 0; i < 2; ++i) job.StartServer(i);
  for (uint16_t p : job.ports) REQUIRE(testing::WaitForPort(p, 30s));
  for (int i = 0; i < 2; ++i) job.StartTrainer(i, "trainer" + std::to_string(i));
  if (kill_server_1) {
    // Whatever the machine's speed (an epoch can take under a second): the trainers pause
    // early in the epoch until pserver 0 has made a periodic save, go on, and pserver 1 is
    // killed once they have trained past that checkpoint (those updates are lost with it).
    job.AwaitLog("trainer0", "epoch 1 step 50:", 60s);
    for (auto& t : job.trainers) t->Signal(SIGSTOP);
    job.AwaitLog("pserver0", "periodic save to " + job.dir + "/ckpt done", 60s);
    for (auto& t : job.trainers) t->Signal(SIGCONT);
    job.AwaitLog("trainer0", "epoch 1 step 150:", 60s);
    job.servers[1]->Signal(SIGKILL);
    REQUIRE(job.servers[1]->Wait(10s) == 128 + SIGKILL);
    // As a supervisor would (systemd Restart=on-failure): start it again from the latest
    // checkpoint; a load that lost a race with a commit of pserver 0 is retried.
    for (int attempt = 0;; ++attempt) {
      job.StartServer(1, job.dir + "/ckpt");
      const auto deadline = std::chrono::steady_clock::now() + 60s;
      while (job.Log("pserver1").find("loaded checkpoint") == std::string::npos && job.servers[1]->running()) {
        REQUIRE(std::chrono::steady_clock::now() < deadline);
        std::this_thread::sleep_for(20ms);
      }
      if (job.servers[1]->running()) break;
      INFO("pserver 1 log:\n" << job.Log("pserver1"));
      REQUIRE(attempt < 3);
    }
  }
  for (int i = 0; i < 2; ++i) {
    const int rc = job.trainers[i]->Wait(180s);
    INFO("trainer " << i << " log:\n" << job.Log("trainer" + std::to_string(i)));
    REQUIRE(rc == 0);
  }
  for (int i = 0; i < 2; ++i) {
    const int rc = job.servers[i]->Wait(30s);
    INFO("pserver " << i << " log:\n" << job.Log("pserver" + std::to_string(i)));
    CHECK(rc == 0);
  }
  if (kill_server_1) {
    // The trainers noticed and went on.
    const std::string logs = job.Log("trainer0") + job.Log("trainer1");
    CHECK_THAT(logs, Catch::Contains("pserver 1"));
  }
  return testing::ReportTestAuc(job.dir + "/trainer0.json");
}

TEST_CASE("kill -9 of a pserver mid-job, restarted from the last periodic checkpoint: the job finishes", "[e2e]") {
  const double uninterrupted = RunJob(false);
  const double interrupted = RunJob(true);
  INFO("uninterrupted AUC " << uninterrupted << ", interrupted " << interrupted);
  CHECK(uninterrupted > 0.6);
  CHECK(std::abs(interrupted - uninterrupted) < 0.01);
}

// Sync mode: the dense steps are numbered, so the restarted pserver falls back into step
// with the trainers (a step it lost is abandoned, never mixed into the next one) and the
// sparse pushes lost with it are counted like async ones. GEO: deltas lost with the
// connection are logged and the exchange re-bases on what the servers hold.
TEST_CASE("kill -9 of a pserver mid-job in sync and GEO mode: the trainers rejoin it and the job finishes", "[e2e]") {
  for (const std::string mode : {"sync", "geo"}) {
    INFO("sync mode " << mode);
    const double auc = RunJob(true, mode);
    INFO("AUC " << auc);
    CHECK(auc > 0.6);
  }
}

TEST_CASE("kill -9 of a trainer: the other trainer and the pservers end within the lease bound", "[e2e]") {
  Job job("    trainer_lease_s: 3\n", 2);
  for (int i = 0; i < 2; ++i) job.StartServer(i);
  for (uint16_t p : job.ports) REQUIRE(testing::WaitForPort(p, 30s));
  for (int i = 0; i < 2; ++i) job.StartTrainer(i, "trainer" + std::to_string(i));
  job.AwaitLog("trainer1", "epoch 1 step", 60s);
  job.trainers[1]->Signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();

  const int rc0 = job.trainers[0]->Wait(60s);
  const std::string log0 = job.Log("trainer0");
  INFO("trainer 0 log:\n" << log0);
  CHECK(rc0 == 1);
  CHECK_THAT(log0, Catch::Contains("trainer 1 is gone"));
  for (int i = 0; i < 2; ++i) {
    const int rc = job.servers[i]->Wait(30s);
    const std::string log = job.Log("pserver" + std::to_string(i));
    INFO("pserver " << i << " log:\n" << log);
    CHECK(rc == 1);  // exited by itself: the job's trainers ended, one gone
    CHECK_THAT(log, Catch::Contains("trainer 1 is gone"));
    CHECK_THAT(log, Catch::Contains("every trainer has ended"));
  }
  // Lease 3 s + sweeps and the final heartbeat: well under the test's bound.
  CHECK(std::chrono::steady_clock::now() - killed < 30s);
}

// systemctl stop of a job's trainers, with periodic saves on: each trainer pushes what it
// trained and tells the pservers it was stopped; pserver 0 then saves once more, before any
// periodic save was due, and stops pserver 1, which waited for it. Pservers restarted with
// --resume load that checkpoint: the trainers' updates are in it. The same when the pservers
// get SIGTERM as soon as the trainers have exited (an ordered stop of every unit of a node,
// a script): the signal waits for the final save instead of cutting it off; and when every
// process gets it at once (a job's pods deleted): the pservers serve the stopping trainers
// until they have ended, then save (here the pservers' signal comes first, within the time
// a pserver gives training trainers to say they are stopping too).
TEST_CASE("Trainers stopped by SIGTERM: the pservers save once more before they exit, --resume loads it", "[e2e]") {
  enum Signalled { kNot, kAfterTrainers, kWithTrainers };
  const int servers_signalled = GENERATE(kNot, kAfterTrainers, kWithTrainers);
  INFO("pservers signalled (0: not, 1: after the trainers, 2: with them): " << servers_signalled);
  Job job("", 1000);
  const std::string ckpt = job.SaveEveryHour();
  job.StartTraining();
  if (servers_signalled == kWithTrainers) {  // the pservers' signal first, so that they see the trainers' stop
    for (auto& s : job.servers) s->Signal(SIGTERM);
    job.AwaitLog("pserver0", "SIGTERM: serving the job's stopping trainers until they have ended", 10s);
    job.AwaitLog("pserver1", "SIGTERM: serving the job's stopping trainers until they have ended", 10s);
  }
  for (auto& t : job.trainers) t->Signal(SIGTERM);
  for (int i = 0; i < 2; ++i) {
    const int rc = job.trainers[i]->Wait(30s);
    const std::string log = job.Log("trainer" + std::to_string(i));
    INFO("trainer " << i << " log:\n" << log);
    CHECK(rc == 128 + SIGTERM);
    CHECK_THAT(log, Catch::Contains("the updates of every step trained were written to the pservers"));
  }
  if (servers_signalled == kAfterTrainers) {
    for (auto& s : job.servers) s->Signal(SIGTERM);
  }
  for (int i = 0; i < 2; ++i) {
    const int rc = job.servers[i]->Wait(60s);
    INFO("pserver " << i << " log:\n" << job.Log("pserver" + std::to_string(i)));
    CHECK(rc == 1);  // the job did not finish
  }
  const std::string log0 = job.Log("pserver0"), log1 = job.Log("pserver1");
  INFO("pserver 0 log:\n" << log0 << "\npserver 1 log:\n" << log1);
  CHECK_THAT(log0, Catch::Contains("stopped by SIGTERM"));
  CHECK_THAT(log0, Catch::Contains("final save to " + ckpt + " done"));
  CHECK_THAT(log0, !Catch::Contains("periodic save"));  // the only save was the final one
  CHECK_THAT(log1, Catch::Contains("waiting for pserver 0's final save"));
  CHECK_THAT(log1, Catch::Contains("pserver 0's final save is done"));
  CHECK_THAT(log0 + log1, !Catch::Contains("shutting down (SIGTERM"));  // no signal cut a wait short

  for (int i = 0; i < 2; ++i) job.StartServer(i, ckpt, "--resume");
  for (int i = 0; i < 2; ++i) {
    const std::string name = "pserver" + std::to_string(i);
    job.AwaitLog(name, "loaded checkpoint", 60s);
    const std::string log = job.Log(name);
    INFO(log);
    CHECK_THAT(log, !Catch::Contains(" 0 sparse rows"));  // each holds its share of the trained rows
  }
  for (auto& s : job.servers) s->Signal(SIGKILL);
}

// A pserver that waits for pserver 0's final save (here pserver 0 is frozen) after a SIGTERM
// leaves the wait on a second one: it drains and exits without the save.
TEST_CASE("A second SIGTERM ends a pserver's wait for the final save", "[e2e]") {
  Job job("", 1000);
  job.SaveEveryHour();
  job.StartTraining();
  for (auto& t : job.trainers) t->Signal(SIGTERM);
  for (auto& t : job.trainers) CHECK(t->Wait(30s) == 128 + SIGTERM);
  job.servers[0]->Signal(SIGSTOP);  // its final save never comes
  job.servers[1]->Signal(SIGTERM);
  job.AwaitLog("pserver1", "SIGTERM: waiting for pserver 0's final save first", 10s);
  job.servers[1]->Signal(SIGTERM);
  const int rc = job.servers[1]->Wait(30s);
  const std::string log = job.Log("pserver1");
  INFO(log);
  CHECK(rc == 1);  // the job did not finish
  CHECK_THAT(log, Catch::Contains("shutting down (a second SIGTERM)"));
  CHECK_THAT(log, !Catch::Contains("pserver 0's final save is done"));
  job.servers[0]->Signal(SIGCONT);
  job.servers[0]->Signal(SIGKILL);
}

// A pserver stopped alone while the job trains (a restart for maintenance) does not wait for
// trainers that are not stopping: it shuts down once they have had kStoppingGrace (2 s) to
// say they are.
TEST_CASE("A pserver stopped while its trainers train waits only briefly for them", "[e2e]") {
  Job job("", 1000);
  job.StartTraining();
  const auto signalled = std::chrono::steady_clock::now();
  job.servers[1]->Signal(SIGTERM);
  const int rc = job.servers[1]->Wait(30s);
  const auto waited = std::chrono::steady_clock::now() - signalled;
  const std::string log = job.Log("pserver1");
  INFO(log);
  CHECK(rc == 0);
  CHECK_THAT(log, Catch::Contains("SIGTERM: serving the job's stopping trainers until they have ended (stopping: -; "
                                  "training: 0, 1;"));
  CHECK_THAT(log, Catch::Contains("shutting down (SIGTERM: trainer(s) 0, 1 still training)"));
  CHECK(waited >= 2s);
  CHECK(waited < 15s);
  for (auto& t : job.trainers) t->Signal(SIGKILL);
  for (auto& s : job.servers) s->Signal(SIGKILL);
}

TEST_CASE("A cluster with server.auth: required admits only trainers holding its secret", "[e2e]") {
  Job job("    auth: required\n    auth_secret_file: secret\n", 1);
  // The pservers read the secret file named in the job YAML (relative to their working
  // directory: write it with an absolute path instead).
  const std::string secret = job.dir + "/secret", other = job.dir + "/other-secret";
  testing::WriteFile(secret, "correct horse battery staple 0123\n");
  testing::WriteFile(other, "a different cluster's secret 4567\n");
  ::chmod(secret.c_str(), 0600);
  ::chmod(other.c_str(), 0600);
  std::string yaml = testing::ReadFile(job.dir + "/job.yaml");
  yaml.replace(yaml.find("auth_secret_file: secret"), 24, "auth_secret_file: " + secret);
  testing::WriteFile(job.dir + "/job.yaml", yaml);
  for (int i = 0; i < 2; ++i) job.StartServer(i);
  for (uint16_t p : job.ports) REQUIRE(testing::WaitForPort(p, 30s));

  // Intruders, each refused with a message that says why: one with another cluster's
  // secret (it does not even trust the servers), one with none (a job YAML without it).
  job.StartTrainer(0, "wrong", {{"FLEETPS_AUTH_SECRET_FILE", other}});
  CHECK(job.trainers[0]->Wait(60s) == 1);
  CHECK_THAT(job.Log("wrong"),
             Catch::Contains("PermissionDenied") && Catch::Contains("could not prove that it holds the shared secret"));
  std::string open_yaml = yaml;
  open_yaml.erase(open_yaml.find("    auth: required\n"), 19);
  open_yaml.erase(open_yaml.find("    auth_secret_file: "), 23 + secret.size());
  testing::WriteFile(job.dir + "/open.yaml", open_yaml);
  job.StartTrainer(0, "anonymous", {}, "open.yaml");
  CHECK(job.trainers[0]->Wait(60s) == 1);
  CHECK_THAT(job.Log("anonymous"), Catch::Contains("PermissionDenied") && Catch::Contains("requires authentication"));
  // The members: the secret from the job YAML.
  for (int i = 0; i < 2; ++i) job.StartTrainer(i, "trainer" + std::to_string(i));
  for (int i = 0; i < 2; ++i) {
    const int rc = job.trainers[i]->Wait(120s);
    INFO(job.Log("trainer" + std::to_string(i)));
    REQUIRE(rc == 0);
  }
  for (int i = 0; i < 2; ++i) {
    const int rc = job.servers[i]->Wait(30s);
    INFO(job.Log("pserver" + std::to_string(i)));
    CHECK(rc == 0);
  }
  CHECK_THAT(job.Log("pserver0"), Catch::Contains("before authenticating"));
  CHECK(testing::ReportTestAuc(job.dir + "/trainer0.json") > 0.6);
}

}  // namespace
}  // namespace fleetps
