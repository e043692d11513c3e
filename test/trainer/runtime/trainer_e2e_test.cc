// End-to-end: the real cpu-trainer and pserver binaries on loopback, on data from the
// real generator. Every training mode must finish with every process exiting 0 and reach
// a test AUC that an untrained model (AUC ~0.5) cannot, and the model trainer 0 saves must
// score the test split identically when loaded by infer mode. A pserver stopped with
// SIGSTOP must make a trainer fail within its RPC deadline, naming that pserver.
#include <signal.h>

#include <catch2/catch.hpp>
#include <regex>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "test/support/job.h"
#include "test/support/process.h"

namespace fleetps {
namespace {

using testing::ChildProcess;

constexpr double kAucFloor = 0.60;  // untrained: ~0.5; trained on this data: ~0.65-0.7

struct Workdir {
  std::string dir = testing::MakeTempDir("trainer_e2e");
  // `runner_extra`, `fleetps_extra`: more `runner:` and `fleetps:` keys, each line indented by
  // two spaces.
  explicit Workdir(const std::string& runner_extra = "", const std::string& fleetps_extra = "") {
    REQUIRE(testing::GenerateData(dir, {"--rows", "60000", "--train-files", "2"}));
    testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/train"
  test_data_dir: "data/test"
  train_batch_size: 256
  infer_batch_size: 1024
  thread_num: 1
  epochs: 2
  print_interval: 50
  geo_step: 10
  model_save_path: "model"
)" + runner_extra + R"(
)" + testing::kSmallCtrDnnModel + R"(fleetps:
  sparse_table: {shards: 4}
  server: {io_threads: 1, shard_threads: 1}
)" + fleetps_extra);
  }
};

// The test AUC of a report; fails the test when the report has none.
double TestAuc(const std::string& report) {
  const double auc = testing::ReportTestAuc(report);
  REQUIRE_FALSE(std::isnan(auc));
  return auc;
}

double TrainerRun(const Workdir& w, const std::string& name, const std::vector<std::string>& extra,
                  const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml",
                                   "--report", w.dir + "/" + name + ".json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  ChildProcess p;
  REQUIRE(p.Start(argv, env, w.dir + "/" + name + ".log"));
  const int rc = p.Wait(std::chrono::seconds(120));
  INFO(testing::ReadFile(w.dir + "/" + name + ".log"));
  REQUIRE(rc == 0);
  return TestAuc(w.dir + "/" + name + ".json");
}

TEST_CASE("Local training reaches the AUC floor and exits 0, one of its two training files gzip-compressed") {
  Workdir w;
  const size_t lines = testing::CountDataLines(w.dir + "/data/train");
  REQUIRE(std::system(("gzip " + w.dir + "/data/train/part-00001").c_str()) == 0);  // -> part-00001.gz
  const double auc = TrainerRun(w, "local", {}, {});
  CHECK(auc > kAucFloor);
  // Every line of both files trained, each epoch.
  const std::string report = testing::ReadFile(w.dir + "/local.json");
  CHECK_THAT(report, Catch::Contains("\"epoch\": 1, \"examples\": " + std::to_string(lines) + ",") &&
                         Catch::Contains("\"epoch\": 2, \"examples\": " + std::to_string(lines) + ","));
}

TEST_CASE("With the CTR accessor the trainer's show/click counts extend frequent keys only") {
  Workdir w;
  std::string yaml = testing::ReadFile(w.dir + "/job.yaml");
  const std::string shards = "sparse_table: {shards: 4}";
  yaml.replace(yaml.find(shards), shards.size(),
               "sparse_table: {shards: 4, accessor: {name: ctr, embedx_threshold: 5}}");
  testing::WriteFile(w.dir + "/ctr.yaml", yaml);
  ChildProcess p;
  REQUIRE(p.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/ctr.yaml", "--report",
                   w.dir + "/ctr.json"},
                  {}, w.dir + "/ctr.log"));
  const int rc = p.Wait(std::chrono::seconds(120));
  INFO(testing::ReadFile(w.dir + "/ctr.log"));
  REQUIRE(rc == 0);
  CHECK(TestAuc(w.dir + "/ctr.json") > kAucFloor);
  {  // The epoch's CPU time: spent (a whole epoch of parsing and training), and within what
     // the machine's cores could give in its wall time.
    const std::string report = testing::ReadFile(w.dir + "/ctr.json");
    std::smatch m;
    REQUIRE(std::regex_search(report, m, std::regex(R"("epoch": 1, .*"seconds": ([0-9.]+), .*"cpu_seconds": ([0-9.]+))")));
    const double seconds = std::stod(m[1]), cpu = std::stod(m[2]);
    CHECK(cpu > 0.01);
    CHECK(cpu <= seconds * std::thread::hardware_concurrency() + 0.05);
  }
  // Dump the saved rows: a row whose embedx (weights 1..7) is all zero was never extended.
  ChildProcess dump;
  REQUIRE(dump.Start({testing::BinaryPath("tools/pserver_tool/pserver_tool"), "dump", w.dir + "/model", "--table",
                      "0", "--limit", "100000000"},
                     {}, w.dir + "/dump.txt"));
  REQUIRE(dump.Wait(std::chrono::seconds(60)) == 0);
  std::istringstream lines(testing::ReadFile(w.dir + "/dump.txt"));
  std::string line;
  size_t rows = 0, extended = 0;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    uint64_t key;
    std::vector<double> weights;
    double v;
    if (!(fields >> key)) continue;
    while (fields >> v) weights.push_back(v);
    if (weights.size() != 8) continue;
    ++rows;
    bool any = false;
    for (size_t j = 1; j < weights.size(); ++j) any = any || weights[j] != 0.0;
    extended += any;
  }
  CHECK(rows > 10000);
  CHECK(extended > 100);         // frequent ids reached the threshold...
  CHECK(extended < rows / 2);    // ...the long tail did not
}

TEST_CASE("A trainer whose training files hold no records says so and exits 0") {
  const std::string dir = testing::MakeTempDir("empty_e2e");
  std::filesystem::create_directories(dir + "/data/train");
  testing::WriteFile(dir + "/data/train/part-00000", "");
  testing::WriteFile(dir + "/job.yaml", R"(
runner:
  train_data_dir: "data/train"
  epochs: 1
  model_save_path: "model"
)" + std::string(testing::kSmallCtrDnnModel));
  ChildProcess p;
  REQUIRE(p.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml"}, {}, dir + "/run.log"));
  const int rc = p.Wait(std::chrono::seconds(60));
  const std::string log = testing::ReadFile(dir + "/run.log");
  INFO(log);
  CHECK(rc == 0);
  CHECK_THAT(log, Catch::Contains("trainer 0 epoch 1: trained no examples: its share of the training data (") &&
                      Catch::Contains("data/train) holds no records"));
}

TEST_CASE("The Fleet quick-start mlp trains on MultiSlot data") {
  const std::string dir = testing::MakeTempDir("mlp_e2e");
  ChildProcess gen;
  REQUIRE(gen.Start({testing::BinaryPath("tools/datagen/fleetps-datagen"), "--out-dir", dir + "/data", "--rows",
                     "20000", "--format", "multislot", "--slots", "1", "--dense-dim", "32", "--seed", "3"},
                    {}, dir + "/datagen.log"));
  REQUIRE(gen.Wait(std::chrono::seconds(60)) == 0);
  ChildProcess p;
  REQUIRE(p.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config",
                   std::string(FLEETPS_SOURCE_DIR) + "/configs/mlp.yaml", "--train-data", dir + "/data/train",
                   "--test-data", dir + "/data/test", "--report", dir + "/mlp.json"},
                  {}, dir + "/mlp.log"));
  const int rc = p.Wait(std::chrono::seconds(120));
  INFO(testing::ReadFile(dir + "/mlp.log"));
  REQUIRE(rc == 0);
  CHECK(TestAuc(dir + "/mlp.json") > kAucFloor);
}

// Examples trainer `report` trained in `epoch` (1-based).
uint64_t EpochExamples(const std::string& report, int epoch) {
  const std::string text = testing::ReadFile(report);
  const std::string key = "\"epoch\": " + std::to_string(epoch) + ", \"examples\": ";
  const size_t at = text.find(key);
  REQUIRE(at != std::string::npos);
  return std::stoull(text.substr(at + key.size()));
}

TEST_CASE("Raw Criteo TSV (PaddleRec's legacy rank/dnn sample) trains with data_format criteo; infer scores it alike") {
  // 100 train and 100 test lines, some test lines with trailing empty columns trimmed.
  const std::string dir = testing::MakeTempDir("criteo_e2e");
  const std::string raw = std::string(FLEETPS_SOURCE_DIR) + "/../shared/data/paddlerec/rank_dnn_legacy_raw_tsv";
  testing::WriteFile(dir + "/job.yaml", R"(
runner:
  data_format: criteo
  train_data_dir: ")" + raw + R"(/train"
  test_data_dir: ")" + raw + R"(/test"
  train_batch_size: 16
  epochs: 2
  model_save_path: "model"
)" + std::string(testing::kSmallCtrDnnModel));
  ChildProcess p;
  REQUIRE(p.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml", "--report",
                   dir + "/criteo.json", "--predictions", dir + "/trained.txt"},
                  {}, dir + "/criteo.log"));
  const int rc = p.Wait(std::chrono::seconds(60));
  INFO(testing::ReadFile(dir + "/criteo.log"));
  REQUIRE(rc == 0);
  CHECK(EpochExamples(dir + "/criteo.json", 1) == 100);
  CHECK(EpochExamples(dir + "/criteo.json", 2) == 100);
  const std::string trained = testing::ReadFile(dir + "/trained.txt");
  CHECK(std::count(trained.begin(), trained.end(), '\n') == 100);  // every test line scored
  // The saved sparse rows: ids modulo criteo_hash_dim (1000001), at most one per column value.
  ChildProcess dump;
  REQUIRE(dump.Start({testing::BinaryPath("tools/pserver_tool/pserver_tool"), "dump", dir + "/model", "--table", "0",
                      "--limit", "100000"},
                     {}, dir + "/dump.txt"));
  REQUIRE(dump.Wait(std::chrono::seconds(60)) == 0);
  std::istringstream rows(testing::ReadFile(dir + "/dump.txt"));
  size_t keys = 0;
  uint64_t max_key = 0;
  for (std::string line; std::getline(rows, line);) {
    std::istringstream fields(line);
    uint64_t key;
    if (!(fields >> key)) continue;
    ++keys;
    max_key = std::max(max_key, key);
  }
  CHECK(keys > 26);         // every column's values of 100 lines
  CHECK(keys <= 26 * 100);  // and no more
  CHECK(max_key < 1000001);
  // Infer mode reads the same lines into the same ids: the saved model scores them alike.
  ChildProcess infer;
  REQUIRE(infer.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml", "--mode", "infer",
                       "--predictions", dir + "/infer.txt"},
                      {}, dir + "/infer.log"));
  const int infer_rc = infer.Wait(std::chrono::seconds(60));
  INFO(testing::ReadFile(dir + "/infer.log"));
  REQUIRE(infer_rc == 0);
  CHECK(testing::ReadFile(dir + "/infer.txt") == trained);
}

// 2 pservers started with the job YAML, 2 trainers; trainer 0 stops the servers at the end.
// Returns the work directory (logs, reports, data).
std::string ClusterRun(const std::string& mode, int threads = 1, const std::string& runner_extra = "",
                       const std::string& fleetps_extra = "") {
  Workdir w(runner_extra, fleetps_extra);
  const auto ports = testing::FreePorts(2);
  const std::string endpoints = "127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1]);
  ChildProcess servers[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE(servers[i].Start({testing::BinaryPath("server/pserver"), "--config", w.dir + "/job.yaml"},
                             {{"TRAINING_ROLE", "PSERVER"},
                              {"PADDLE_PSERVERS_IP_PORT_LIST", endpoints},
                              {"POD_IP", "127.0.0.1"},
                              {"PADDLE_PORT", std::to_string(ports[i])}},
                             w.dir + "/pserver" + std::to_string(i) + ".log"));
  }
  ChildProcess trainers[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE(trainers[i].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml",
                               "--sync-mode", mode, "--threads", std::to_string(threads), "--report",
                               w.dir + "/trainer" + std::to_string(i) + ".json",
                               "--predictions", w.dir + "/predictions" + std::to_string(i) + ".txt"},
                              {{"TRAINING_ROLE", "TRAINER"},
                               {"PADDLE_PSERVERS_IP_PORT_LIST", endpoints},
                               {"PADDLE_TRAINERS_NUM", "2"},
                               {"PADDLE_TRAINER_ID", std::to_string(i)}},
                              w.dir + "/trainer" + std::to_string(i) + ".log"));
  }
  for (int i = 0; i < 2; ++i) {
    const int rc = trainers[i].Wait(std::chrono::seconds(180));
    INFO("trainer " << i << " log:\n" << testing::ReadFile(w.dir + "/trainer" + std::to_string(i) + ".log"));
    REQUIRE(rc == 0);
  }
  for (int i = 0; i < 2; ++i) {
    const int rc = servers[i].Wait(std::chrono::seconds(30));  // stopped by trainer 0
    INFO("pserver " << i << " log:\n" << testing::ReadFile(w.dir + "/pserver" + std::to_string(i) + ".log"));
    CHECK(rc == 0);
  }
  // The test AUC is summed across trainers: both report the same figure.
  const double auc0 = TestAuc(w.dir + "/trainer0.json");
  const double auc1 = TestAuc(w.dir + "/trainer1.json");
  CHECK(auc0 == Approx(auc1).margin(1e-9));
  CHECK(auc0 > kAucFloor);

  // Trainer 0 saved the model after scoring the test split (one file, so trainer 0 scored
  // all of it): infer mode loads that checkpoint into a fresh in-process server and must
  // reproduce every prediction exactly.
  ChildProcess infer;
  REQUIRE(infer.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml", "--mode",
                       "infer", "--predictions", w.dir + "/infer.txt", "--report", w.dir + "/infer.json"},
                      {}, w.dir + "/infer.log"));
  const int rc = infer.Wait(std::chrono::seconds(60));
  INFO(testing::ReadFile(w.dir + "/infer.log"));
  REQUIRE(rc == 0);
  // Worker threads interleave batches, so compare the predictions as sorted lines.
  const auto sorted_lines = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  const auto trained = sorted_lines(testing::ReadFile(w.dir + "/predictions0.txt"));
  CHECK(trained.size() == 6000);  // the whole test split
  CHECK(sorted_lines(testing::ReadFile(w.dir + "/infer.txt")) == trained);
  CHECK(TestAuc(w.dir + "/infer.json") == Approx(auc0).margin(1e-12));
  return w.dir;
}

// Both epochs of a ClusterRun in `dir` trained every training line once, over both trainers.
void CheckEveryExampleOncePerEpoch(const std::string& dir) {
  const size_t train_lines = testing::CountDataLines(dir + "/data/train");
  for (int epoch = 1; epoch <= 2; ++epoch) {
    CHECK(EpochExamples(dir + "/trainer0.json", epoch) + EpochExamples(dir + "/trainer1.json", epoch) ==
          train_lines);
  }
}

TEST_CASE("Async training with 2 pservers and 2 trainers") { ClusterRun("async", 2, "", "  prefetch: false\n"); }
// Helper threads prepare each worker's next batch (read, pull, pool) while it trains: every
// example is still trained once per epoch, and the saved model reproduces the predictions.
TEST_CASE("Async training with prefetch helpers") {
  const std::string dir = ClusterRun("async", 2, "", "  prefetch: true\n");
  CheckEveryExampleOncePerEpoch(dir);
  for (int i = 0; i < 2; ++i) {
    const std::string log = testing::ReadFile(dir + "/trainer" + std::to_string(i) + ".log");
    CHECK(log.find("prefetch helpers on (fleetps.prefetch: true)") != std::string::npos);
    CHECK(log.find("waiting for the prefetch") != std::string::npos);
  }
}
// Two Hogwild workers per trainer: in sync mode all four workers meet at every step.
TEST_CASE("Sync training with 2 pservers and 2 trainers of 2 workers") { ClusterRun("sync", 2); }
// InMemoryDataset with a global shuffle before each epoch: the trainers exchange their
// records through the pservers, so each epoch's split differs but covers the data once.
TEST_CASE("Async training on an InMemoryDataset shuffled globally across the trainers") {
  const std::string dir = ClusterRun("async", 1, "  reader_type: InMemoryDataset\n  shuffle: global");
  CheckEveryExampleOncePerEpoch(dir);
  for (int i = 0; i < 2; ++i) {
    const std::string log = testing::ReadFile(dir + "/trainer" + std::to_string(i) + ".log");
    CHECK(log.find("global shuffle round 1:") != std::string::npos);
    CHECK(log.find("global shuffle round 2:") != std::string::npos);
  }
}
TEST_CASE("GEO training with 2 pservers and 2 trainers") { ClusterRun("geo"); }

// The sparse ids of the rank_dnn lines in `path` (tokens "<slot number>:<id>").
std::set<uint64_t> DataIds(const std::string& path) {
  std::set<uint64_t> ids;
  std::istringstream text(testing::ReadFile(path));
  for (std::string token; text >> token;) {
    const size_t colon = token.find(':');
    if (colon == std::string::npos || !std::isdigit(static_cast<unsigned char>(token[0]))) continue;
    ids.insert(std::stoull(token.substr(colon + 1)));
  }
  return ids;
}

// The keys of the sparse rows pserver_tool dumps from checkpoint `dir` (table 0).
std::set<uint64_t> DumpedKeys(const std::string& dir, const std::string& log) {
  ChildProcess dump;
  REQUIRE(dump.Start({testing::BinaryPath("tools/pserver_tool/pserver_tool"), "dump", dir, "--table", "0", "--limit",
                      "100000000"},
                     {}, log));
  REQUIRE(dump.Wait(std::chrono::seconds(60)) == 0);
  std::set<uint64_t> keys;
  std::istringstream rows(testing::ReadFile(log));
  for (std::string line; std::getline(rows, line);) {
    std::istringstream fields(line);
    uint64_t key;
    if (fields >> key) keys.insert(key);
  }
  return keys;
}

TEST_CASE("An online job: days x passes over their own data, waiting for the donefile, with each pass's delta and "
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
                       {{"TRAINING_ROLE", "PSERVER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                        {"POD_IP", "127.0.0.1"}, {"PADDLE_PORT", std::to_string(port)}},
                       dir + "/pserver.log"));
  ChildProcess trainers[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE(trainers[i].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml", "--report",
                               dir + "/trainer" + std::to_string(i) + ".json"},
                              {{"TRAINING_ROLE", "TRAINER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                               {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_TRAINER_ID", std::to_string(i)}},
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
                       {{"TRAINING_ROLE", "PSERVER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                        {"POD_IP", "127.0.0.1"}, {"PADDLE_PORT", std::to_string(port)}},
                       dir + "/pserver-resumed.log"));
  for (int i = 0; i < 2; ++i) {
    REQUIRE(trainers[i].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/resume.yaml",
                               "--report", dir + "/resumed" + std::to_string(i) + ".json"},
                              {{"TRAINING_ROLE", "TRAINER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                               {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_TRAINER_ID", std::to_string(i)}},
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
                             Catch::EndsWith("\t" + dir + "/model/" + day + (pass == "-1" ? "/checkpoint" : "/checkpoint-1") +
                                             "\t" + pass + "\t0"));
  }
  // A job that died after day 20191226's checkpoint-1, started again as it was, on a fresh
  // pserver: trainer 0 loads that checkpoint and both train pass 2 alone, then the day's end.
  testing::WriteFile(donefile, lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n");
  const auto rerun = [&](const std::string& name) {
    ChildProcess fresh;
    REQUIRE(fresh.Start({testing::BinaryPath("server/pserver"), "--config", dir + "/job.yaml"},
                        {{"TRAINING_ROLE", "PSERVER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                         {"POD_IP", "127.0.0.1"}, {"PADDLE_PORT", std::to_string(port)}},
                        dir + "/pserver-" + name + ".log"));
    for (int i = 0; i < 2; ++i) {
      REQUIRE(trainers[i].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/job.yaml",
                                 "--report", dir + "/" + name + std::to_string(i) + ".json"},
                                {{"TRAINING_ROLE", "TRAINER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                                 {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_TRAINER_ID", std::to_string(i)}},
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
                        {{"TRAINING_ROLE", "PSERVER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                         {"POD_IP", "127.0.0.1"}, {"PADDLE_PORT", std::to_string(port)}},
                        dir + "/pserver-lone.log"));
  REQUIRE(trainers[0].Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", dir + "/lone.yaml"},
                            {{"TRAINING_ROLE", "TRAINER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", endpoint},
                             {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_TRAINER_ID", "0"}},
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
    REQUIRE(servers[i].Start({testing::BinaryPath("server/pserver"), "--config", w.dir + "/job.yaml", "--bind",
                              "127.0.0.1"},
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
    REQUIRE(p->Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml", "--epochs",
                      "1000", "--rpc-timeout-ms", "2000", "--connect-timeout-ms", "10000"},
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
  const std::map<std::string, std::string> env = {{"TRAINING_ROLE", "TRAINER"},
                                                  {"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:" + std::to_string(port)},
                                                  {"PADDLE_TRAINERS_NUM", "1"},
                                                  {"PADDLE_TRAINER_ID", "0"},
                                                  {"POD_IP", "127.0.0.1"},
                                                  {"PADDLE_PORT", std::to_string(port)}};
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
  std::map<std::string, std::string> env = {{"TRAINING_ROLE", "PSERVER"},
                                            {"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:" + std::to_string(port)},
                                            {"PADDLE_TRAINERS_NUM", "2"},
                                            {"PADDLE_TRAINER_ID", "0"},
                                            {"POD_IP", "127.0.0.1"},
                                            {"PADDLE_PORT", std::to_string(port)}};
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
