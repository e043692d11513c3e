// End-to-end, as trainer_e2e_test.cc: an online job by days and passes (donefiles, deltas,
// resume), a pserver that stops answering, and graceful stops on SIGTERM.
#include "test/trainer/runtime/trainer_e2e_util.h"

namespace fleetps {
namespace {

using namespace trainer_e2e;  // NOLINT: the fixtures of this test

TEST_CASE(
    "An online job: days x passes over their own data, waiting for the donefile, with each pass's delta and "
    "each day's checkpoint and base") {
  const std::string dir = testing::MakeTempDir("online_e2e");
  REQUIRE(testing::GenerateData(dir, {"--rows", "18000", "--train-files", "8"}));
  // Day D pass P reads data/online/D/P: two files (one per trainer) and its donefile.
  const std::vector<std::string> days = {"20191225", "20191226"};
  int file = 0;
  for (const auto& day : days) {
    for (int pass = 1; pass <= 2; ++pass) {
      const std::string pass_dir = dir + "/data/online/" + day + "/" + std::to_string(pass);
      std::filesystem::create_directories(pass_dir);
      for (int k = 0; k < 2; ++k, ++file) {
        std::filesystem::rename(dir + "/data/train/part-0000" + std::to_string(file),
                                pass_dir + "/part-0000" + std::to_string(k));
      }
      if (day != days[1] || pass != 2) testing::WriteFile(pass_dir + "/data.done", "");
    }
  }
  testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/online/{day}/{pass}"
  test_data_dir: "data/test"
  days: "{20191225..20191226}"
  pass_per_day: 2
  checkpoint_per_pass: 1
  data_donefile: data.done
  data_sleep_second: 1
  train_batch_size: 128
  model_save_path: "model"
)" + testing::kSmallCtrDnnModel + R"(fleetps:
  sparse_table: {shards: 2, accessor: {name: ctr, embedx_threshold: 3}}
  server: {io_threads: 1, shard_threads: 1}
)");
  const auto port = testing::FreePorts(1)[0];
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  ChildProcess server;
  REQUIRE(server.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"},
                       {{"TRAINING_ROLE", "PSERVER"},
                        {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                        {"POD_IP", "127.0.0.1"},
                        {"PADDLE_PORT", std::to_string(port)}},
                       dir + "/pserver.log"));
  ChildProcess trainers[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE(trainers[i].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml", "--report",
                               dir + "/trainer" + std::to_string(i) + ".json"},
                              {{"TRAINING_ROLE", "TRAINER"},
                               {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                               {"PADDLE_TRAINERS_NUM", "2"},
                               {"PADDLE_TRAINER_ID", std::to_string(i)}},
                              dir + "/trainer" + std::to_string(i) + ".log"));
  }
  // The last pass's data comes late: both trainers wait for its donefile.
  const std::string last = dir + "/data/online/20191226/2";
  for (int i = 0; i < 2; ++i) {
    REQUIRE(testing::WaitForLog(dir + "/trainer" + std::to_string(i) + ".log", "waiting for " + last + "/data.done",
                                std::chrono::seconds(60)));
  }
  testing::WriteFile(last + "/data.done", "");
  for (int i = 0; i < 2; ++i) {
    const int rc = trainers[i].Wait(std::chrono::seconds(120));
    INFO("trainer " << i << " log:\n" << testing::ReadFile(dir + "/trainer" + std::to_string(i) + ".log"));
    REQUIRE(rc == 0);
  }
  CHECK(server.Wait(std::chrono::seconds(30)) == 0);
  const std::string log0 = testing::ReadFile(dir + "/trainer0.log");
  CHECK_THAT(log0, Catch::Contains("online: 2 day(s) x 2 pass(es)") && Catch::Contains("data.done is there after") &&
                       Catch::Contains("day 20191225: shrink deleted"));
  // Each pass trained its own files, once: trainer i the i-th of the two.
  const std::string report = testing::ReadFile(dir + "/trainer1.json");
  file = 0;
  for (const auto& day : days) {
    for (int pass = 1; pass <= 2; ++pass, file += 2) {
      const std::string part = dir + "/data/online/" + day + "/" + std::to_string(pass) + "/part-00001";
      const size_t lines = testing::CountDataLines(std::filesystem::path(part).parent_path().string()) / 2;
      INFO(day << " pass " << pass);
      CHECK_THAT(report, Catch::Contains("\"day\": \"" + day + "\", \"pass\": " + std::to_string(pass)));
      CHECK(EpochExamples(dir + "/trainer1.json", file / 2 + 1) == lines);
    }
  }
  // The saves: a delta per pass, a checkpoint after each pass but the day's last (whose
  // end makes one), the day's checkpoint and base.
  for (const auto& day : days) {
    CHECK_FALSE(std::filesystem::exists(dir + "/model/" + day + "/checkpoint-2"));
    for (const char* save : {"delta-1", "checkpoint-1", "delta-2", "checkpoint", "base"}) {
      INFO(day << "/" << save);
      CHECK(std::filesystem::exists(dir + "/model/" + day + "/" + save + "/CURRENT"));
    }
  }
  // A delta holds the rows its pass changed: ids of that pass's data only.
  std::set<uint64_t> pass_ids = DataIds(last + "/part-00000");
  for (uint64_t id : DataIds(last + "/part-00001")) pass_ids.insert(id);
  const auto delta = DumpedKeys(dir + "/model/20191226/delta-2", dir + "/delta.txt");
  CHECK(delta.size() > 1000);
  CHECK(std::includes(pass_ids.begin(), pass_ids.end(), delta.begin(), delta.end()));
  // The day's base is the table the day's shrink left.
  std::smatch shrunk;
  const std::regex left(R"(day 20191226: shrink deleted [0-9]+ sparse rows \(([0-9]+) left\))");
  REQUIRE(std::regex_search(log0, shrunk, left));
  CHECK(DumpedKeys(dir + "/model/20191226/base", dir + "/base.txt").size() == std::stoull(shrunk[1]));
  // The last day's checkpoint is the model the test pass scored.
  ChildProcess infer;
  REQUIRE(infer.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml", "--mode", "infer",
                       "--model", dir + "/model/20191226/checkpoint", "--report", dir + "/infer.json"},
                      {}, dir + "/infer.log"));
  const int rc = infer.Wait(std::chrono::seconds(60));
  INFO(testing::ReadFile(dir + "/infer.log"));
  REQUIRE(rc == 0);
  CHECK(TestAuc(dir + "/infer.json") == Approx(TestAuc(dir + "/trainer0.json")).margin(1e-12));

  // Resumed from day 20191226's checkpoint after pass 1: the pserver loads it, the trainers
  // train pass 2 alone and keep the loaded dense parameters.
  std::string resume = testing::ReadFile(dir + "/job.yaml");
  const std::string days_line = "  days: \"{20191225..20191226}\"\n";
  resume.replace(resume.find(days_line), days_line.size(),
                 "  start_day: '20191226'\n  end_day: '20191226'\n  start_pass: 2\n");
  const std::string save_line = "model_save_path: \"model\"";
  resume.replace(resume.find(save_line), save_line.size(), "model_save_path: \"model2\"");
  testing::WriteFile(dir + "/resume.yaml", resume);
  ChildProcess loaded;
  REQUIRE(loaded.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/resume.yaml", "--load",
                        dir + "/model/20191226/checkpoint-1"},
                       {{"TRAINING_ROLE", "PSERVER"},
                        {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                        {"POD_IP", "127.0.0.1"},
                        {"PADDLE_PORT", std::to_string(port)}},
                       dir + "/pserver-resumed.log"));
  for (int i = 0; i < 2; ++i) {
    REQUIRE(trainers[i].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/resume.yaml", "--report",
                               dir + "/resumed" + std::to_string(i) + ".json"},
                              {{"TRAINING_ROLE", "TRAINER"},
                               {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                               {"PADDLE_TRAINERS_NUM", "2"},
                               {"PADDLE_TRAINER_ID", std::to_string(i)}},
                              dir + "/resumed" + std::to_string(i) + ".log"));
  }
  for (int i = 0; i < 2; ++i) {
    const int resumed_rc = trainers[i].Wait(std::chrono::seconds(120));
    INFO("resumed trainer " << i << " log:\n" << testing::ReadFile(dir + "/resumed" + std::to_string(i) + ".log"));
    REQUIRE(resumed_rc == 0);
  }
  CHECK(loaded.Wait(std::chrono::seconds(30)) == 0);
  CHECK_THAT(testing::ReadFile(dir + "/resumed0.log"), Catch::Contains("dense table already holds parameters"));
  const std::string resumed = testing::ReadFile(dir + "/resumed0.json");
  CHECK_THAT(resumed, Catch::Contains("\"day\": \"20191226\", \"pass\": 2"));
  CHECK_THAT(resumed, !Catch::Contains("\"pass\": 1"));
  CHECK(std::filesystem::exists(dir + "/model2/20191226/delta-2/CURRENT"));
  CHECK(std::filesystem::exists(dir + "/model2/20191226/base/CURRENT"));
  CHECK_FALSE(std::filesystem::exists(dir + "/model2/20191226/delta-1"));

  // The first job recorded each checkpoint in model/donefile.txt, as Paddle's fleet_util:
  // DAY, KEY, PATH, PASS (-1: the day's end), 0.
  const std::string donefile = dir + "/model/donefile.txt";
  std::vector<std::string> lines;
  {
    std::istringstream in(testing::ReadFile(donefile));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  REQUIRE(lines.size() == 4);
  const std::vector<std::pair<std::string, std::string>> recorded = {
      {"20191225", "1"}, {"20191225", "-1"}, {"20191226", "1"}, {"20191226", "-1"}};
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& [day, pass] = recorded[i];
    INFO(lines[i]);
    CHECK_THAT(lines[i], Catch::StartsWith(day + "\t") &&
                             Catch::EndsWith("\t" + dir + "/model/" + day +
                                             (pass == "-1" ? "/checkpoint" : "/checkpoint-1") + "\t" + pass + "\t0"));
  }
  // A job that died after day 20191226's checkpoint-1, started again as it was, on a fresh
  // pserver: trainer 0 loads that checkpoint and both train pass 2 alone, then the day's end.
  testing::WriteFile(donefile, lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n");
  const auto rerun = [&](const std::string& name) {
    ChildProcess fresh;
    REQUIRE(fresh.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"},
                        {{"TRAINING_ROLE", "PSERVER"},
                         {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                         {"POD_IP", "127.0.0.1"},
                         {"PADDLE_PORT", std::to_string(port)}},
                        dir + "/pserver-" + name + ".log"));
    for (int i = 0; i < 2; ++i) {
      REQUIRE(trainers[i].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml", "--report",
                                 dir + "/" + name + std::to_string(i) + ".json"},
                                {{"TRAINING_ROLE", "TRAINER"},
                                 {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                                 {"PADDLE_TRAINERS_NUM", "2"},
                                 {"PADDLE_TRAINER_ID", std::to_string(i)}},
                                dir + "/" + name + std::to_string(i) + ".log"));
    }
    for (int i = 0; i < 2; ++i) {
      const int rerun_rc = trainers[i].Wait(std::chrono::seconds(120));
      INFO(name << " trainer " << i << " log:\n" << testing::ReadFile(dir + "/" + name + std::to_string(i) + ".log"));
      REQUIRE(rerun_rc == 0);
    }
    CHECK(fresh.Wait(std::chrono::seconds(30)) == 0);
  };
  rerun("restarted");
  const std::string restarted_log = testing::ReadFile(dir + "/restarted0.log");
  CHECK_THAT(restarted_log, Catch::Contains("resumed the online job from its last checkpoint") &&
                                Catch::Contains("training from day 20191226 pass 2") &&
                                Catch::Contains("dense table already holds parameters"));
  for (int i = 0; i < 2; ++i) {
    const std::string restarted = testing::ReadFile(dir + "/restarted" + std::to_string(i) + ".json");
    INFO(restarted);
    CHECK_THAT(restarted, Catch::Contains("\"day\": \"20191226\", \"pass\": 2"));
    CHECK_THAT(restarted, !Catch::Contains("\"pass\": 1") && !Catch::Contains("20191225"));
  }
  lines.clear();
  {
    std::istringstream in(testing::ReadFile(donefile));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  REQUIRE(lines.size() == 4);
  CHECK_THAT(lines[3], Catch::StartsWith("20191226\t") && Catch::EndsWith("/model/20191226/checkpoint\t-1\t0"));
  // Started once more, the job finds every pass trained: it loads the last day's checkpoint,
  // trains nothing and scores the test split with that model.
  rerun("complete");
  CHECK_THAT(testing::ReadFile(dir + "/complete0.log"), Catch::Contains("nothing to train"));
  CHECK_THAT(testing::ReadFile(dir + "/complete0.json"), Catch::Contains("\"epochs\": []"));
  CHECK(TestAuc(dir + "/complete0.json") == Approx(TestAuc(dir + "/restarted0.json")).margin(1e-12));

  // A trainer 0 restarted alone (its job's other trainers still at work elsewhere) waits at
  // the barrier 'online-resume' and fails there, without loading anything into the pservers.
  std::string lone = testing::ReadFile(dir + "/job.yaml");
  lone.replace(lone.find("fleetps:\n"), 9, "fleetps:\n  barrier_timeout_ms: 1500\n");
  testing::WriteFile(dir + "/lone.yaml", lone);
  ChildProcess pserver;
  REQUIRE(pserver.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/lone.yaml"},
                        {{"TRAINING_ROLE", "PSERVER"},
                         {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                         {"POD_IP", "127.0.0.1"},
                         {"PADDLE_PORT", std::to_string(port)}},
                        dir + "/pserver-lone.log"));
  REQUIRE(trainers[0].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/lone.yaml"},
                            {{"TRAINING_ROLE", "TRAINER"},
                             {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                             {"PADDLE_TRAINERS_NUM", "2"},
                             {"PADDLE_TRAINER_ID", "0"}},
                            dir + "/lone0.log"));
  CHECK(trainers[0].Wait(std::chrono::seconds(60)) != 0);
  CHECK_THAT(testing::ReadFile(dir + "/lone0.log"), Catch::Contains("online-resume"));
  pserver.Signal(SIGTERM);
  pserver.Wait(std::chrono::seconds(30));
  CHECK_THAT(testing::ReadFile(dir + "/pserver-lone.log"), !Catch::Contains("loaded"));
}

// A pserver stopped with SIGSTOP keeps its connections open and never answers: the trainer
// must fail within its RPC deadline with an error naming that pserver, not hang.
TEST_CASE("A stopped pserver fails the trainer within the RPC deadline, naming the pserver") {
  Workdir w;
  const auto ports = testing::FreePorts(2);
  const std::string endpoints = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  const std::string frozen = "pserver 1 (127.0.0.1:" + std::to_string(ports[1]) + ")";
  ChildProcess servers[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE(servers[i].Start(
        {testing::BinaryPath("server/pserver"), "--config", w.dir + "/job.yaml", "--bind", "127.0.0.1"},
        {{"TRAINING_ROLE", "PSERVER"},
         {"PADDLE_PSERVERS_IP_PORT_LIST", endpoints},
         {"POD_IP", "127.0.0.1"},
         {"PADDLE_PORT", std::to_string(ports[i])}},
        w.dir + "/pserver" + std::to_string(i) + ".log"));
  }
  for (uint16_t p : ports) REQUIRE(testing::WaitForPort(p, std::chrono::seconds(30)));
  const std::map<std::string, std::string> env = {{"TRAINING_ROLE", "TRAINER"},
                                                  {"PADDLE_PSERVERS_IP_PORT_LIST", endpoints},
                                                  {"PADDLE_TRAINERS_NUM", "1"},
                                                  {"PADDLE_TRAINER_ID", "0"}};
  const auto trainer = [&](const std::string& name) {
    auto p = std::make_unique<ChildProcess>();
    REQUIRE(p->Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml", "--epochs", "1000",
                      "--rpc-timeout-ms", "2000", "--connect-timeout-ms", "10000"},
                     env, w.dir + "/" + name + ".log"));
    return p;
  };

  // Stopped before the trainer starts: the start-up handshake times out.
  servers[1].Signal(SIGSTOP);
  auto early = trainer("at-start");
  int rc = early->Wait(std::chrono::seconds(30));
  std::string log = testing::ReadFile(w.dir + "/at-start.log");
  INFO(log);
  CHECK(rc == 1);
  CHECK_THAT(log, Catch::Contains("Ping to " + frozen));
  servers[1].Signal(SIGCONT);

  // Stopped in the middle of training: the trainer's pulls and pushes to it time out.
  auto running = trainer("mid-training");
  const auto started = std::chrono::steady_clock::now();
  while (testing::ReadFile(w.dir + "/mid-training.log").find(" step ") == std::string::npos) {
    REQUIRE(std::chrono::steady_clock::now() - started < std::chrono::seconds(60));
    REQUIRE(running->running());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  servers[1].Signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  rc = running->Wait(std::chrono::seconds(30));
  log = testing::ReadFile(w.dir + "/mid-training.log");
  INFO(log);
  CHECK(rc == 1);
  CHECK(std::chrono::steady_clock::now() - stopped < std::chrono::seconds(15));
  CHECK_THAT(log, Catch::Contains("cpu-trainer: TimedOut: "));
  CHECK_THAT(log, Catch::Contains(frozen));

  servers[1].Signal(SIGCONT);
  for (auto& s : servers) s.Signal(SIGKILL);
}

// SIGTERM (systemctl stop, kill): the trainer takes no new batch, pushes what it trained,
// tells the pservers it failed and why, and exits by the signal. A second SIGTERM ends it at
// once, here while its pushes wait on a stopped pserver.
TEST_CASE("SIGTERM stops a trainer gracefully; a second one at once") {
  Workdir w;
  const uint16_t port = testing::FreePorts(1)[0];
  const std::map<std::string, std::string> env = {
      {"TRAINING_ROLE", "TRAINER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:" + std::to_string(port)},
      {"PADDLE_TRAINERS_NUM", "1"}, {"PADDLE_TRAINER_ID", "0"},
      {"POD_IP", "127.0.0.1"},      {"PADDLE_PORT", std::to_string(port)}};
  const auto start = [&](ChildProcess& server, ChildProcess& trainer, const std::string& name) {
    auto server_env = env;
    server_env["TRAINING_ROLE"] = "PSERVER";
    REQUIRE(server.Start({testing::BinaryPath("server/pserver"), "--config", w.dir + "/job.yaml"}, server_env,
                         w.dir + "/" + name + "-pserver.log"));
    REQUIRE(testing::WaitForPort(port, std::chrono::seconds(30)));
    REQUIRE(trainer.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml", "--epochs",
                           "1000", "--report", w.dir + "/" + name + ".json"},
                          env, w.dir + "/" + name + ".log"));
    REQUIRE(testing::WaitForLog(w.dir + "/" + name + ".log", " step ", std::chrono::seconds(60)));
  };

  ChildProcess server, trainer;
  start(server, trainer, "graceful");
  trainer.Signal(SIGTERM);
  int rc = trainer.Wait(std::chrono::seconds(30));
  std::string log = testing::ReadFile(w.dir + "/graceful.log");
  INFO(log);
  CHECK(rc == 128 + SIGTERM);
  CHECK_THAT(log, Catch::Contains("SIGTERM: stopping: no new batches"));
  CHECK_THAT(log, Catch::Contains("cpu-trainer: Aborted: stopped by SIGTERM in epoch ") &&
                      Catch::Contains("the updates of every step trained were written to the pservers"));
  // The pserver hears of the failure at once instead of waiting out the trainer's lease.
  const auto ended = std::chrono::steady_clock::now();
  CHECK(server.Wait(std::chrono::seconds(30)) == 1);
  CHECK(std::chrono::steady_clock::now() - ended < std::chrono::seconds(15));
  CHECK_THAT(testing::ReadFile(w.dir + "/graceful-pserver.log"), Catch::Contains("failed: 0"));
  // The report keeps what was trained: the epochs, the last one cut short, and why.
  const std::string report = testing::ReadFile(w.dir + "/graceful.json");
  INFO(report);
  CHECK_THAT(report, Catch::Contains("\"test\": null, \"stopped\": \"stopped by SIGTERM in epoch "));
  std::smatch stopped;
  REQUIRE(std::regex_search(report, stopped, std::regex(R"(in epoch (\d+), after (\d+) of its examples)")));
  const std::string last_epoch = "{\"epoch\": " + stopped[1].str() + ", \"examples\": " + stopped[2].str() + ",";
  CHECK_THAT(report, Catch::Contains(last_epoch));
  CHECK(std::stoull(stopped[2].str()) > 0);
  CHECK_THAT(log, Catch::Contains("epoch " + stopped[1].str() + " stopped: auc "));

  ChildProcess frozen_server, impatient;
  start(frozen_server, impatient, "twice");
  frozen_server.Signal(SIGSTOP);  // the trainer's last pushes cannot complete
  impatient.Signal(SIGTERM);
  REQUIRE(testing::WaitForLog(w.dir + "/twice.log", "SIGTERM: stopping", std::chrono::seconds(10)));
  impatient.Signal(SIGTERM);
  rc = impatient.Wait(std::chrono::seconds(10));
  log = testing::ReadFile(w.dir + "/twice.log");
  INFO(log);
  CHECK(rc == 128 + SIGTERM);
  CHECK_THAT(log, Catch::Contains("a second SIGTERM: exiting at once"));
  frozen_server.Signal(SIGCONT);
  frozen_server.Signal(SIGKILL);
}

// A trainer waiting for the others (here at the start barrier, for a trainer 1 that never
// comes) stops on SIGTERM at once instead of at the barrier's timeout, and tells the pserver
// why it ended.
TEST_CASE("SIGTERM ends a wait at a barrier") {
  Workdir w;
  const uint16_t port = testing::FreePorts(1)[0];
  std::map<std::string, std::string> env = {
      {"TRAINING_ROLE", "PSERVER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:" + std::to_string(port)},
      {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_TRAINER_ID", "0"},
      {"POD_IP", "127.0.0.1"},      {"PADDLE_PORT", std::to_string(port)}};
  ChildProcess server, trainer;
  REQUIRE(server.Start({testing::BinaryPath("server/pserver"), "--config", w.dir + "/job.yaml"}, env,
                       w.dir + "/pserver.log"));
  REQUIRE(testing::WaitForPort(port, std::chrono::seconds(30)));
  env["TRAINING_ROLE"] = "TRAINER";
  REQUIRE(trainer.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml"}, env,
                        w.dir + "/trainer.log"));
  REQUIRE(testing::WaitForLog(w.dir + "/trainer.log", "waiting for the job's 2 trainers to start",
                              std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the barrier's call
  const auto signalled = std::chrono::steady_clock::now();
  trainer.Signal(SIGTERM);
  const int rc = trainer.Wait(std::chrono::seconds(30));
  const std::string log = testing::ReadFile(w.dir + "/trainer.log");
  INFO(log);
  CHECK(rc == 128 + SIGTERM);
  CHECK(std::chrono::steady_clock::now() - signalled < std::chrono::seconds(10));
  CHECK_THAT(log, Catch::Contains("cpu-trainer: Aborted: stopped by SIGTERM while waiting at barrier 'start' for the "
                                  "other trainers"));
  // (The pserver still waits for trainer 1, which it has never heard from.)
  CHECK(testing::WaitForLog(w.dir + "/pserver.log", "trainer 0 ended with an error: Aborted: stopped by SIGTERM",
                            std::chrono::seconds(10)));
  server.Signal(SIGKILL);
}

}  // namespace
}  // namespace fleetps
