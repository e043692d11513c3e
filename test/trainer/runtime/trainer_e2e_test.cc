// End-to-end: the real cpu-trainer and pserver binaries on loopback, on data from the
// real generator. Every training mode must finish with every process exiting 0 and reach
// a test AUC that an untrained model (AUC ~0.5) cannot, and the model trainer 0 saves must
// score the test split identically when loaded by infer mode. A pserver stopped with
// SIGSTOP must make a trainer fail within its RPC deadline, naming that pserver.
#include "test/trainer/runtime/trainer_e2e_util.h"

namespace fleetps {
namespace {

using namespace trainer_e2e;  // NOLINT: the fixtures of this test

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
  REQUIRE(p.Start(
      {testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/ctr.yaml", "--report", w.dir + "/ctr.json"},
      {}, w.dir + "/ctr.log"));
  const int rc = p.Wait(std::chrono::seconds(120));
  INFO(testing::ReadFile(w.dir + "/ctr.log"));
  REQUIRE(rc == 0);
  CHECK(TestAuc(w.dir + "/ctr.json") > kAucFloor);
  {  // The epoch's CPU time: spent (a whole epoch of parsing and training), and within what
     // the machine's cores could give in its wall time.
    const std::string report = testing::ReadFile(w.dir + "/ctr.json");
    std::smatch m;
    REQUIRE(
        std::regex_search(report, m, std::regex(R"("epoch": 1, .*"seconds": ([0-9.]+), .*"cpu_seconds": ([0-9.]+))")));
    const double seconds = std::stod(m[1]), cpu = std::stod(m[2]);
    CHECK(cpu > 0.01);
    CHECK(cpu <= seconds * std::thread::hardware_concurrency() + 0.05);
  }
  // Dump the saved rows: a row whose embedx (weights 1..7) is all zero was never extended.
  ChildProcess dump;
  REQUIRE(dump.Start({testing::BinaryPath("tools/pserver_tool/pserver_tool"), "dump", w.dir + "/model", "--table", "0",
                      "--limit", "100000000"},
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
  CHECK(extended > 100);       // frequent ids reached the threshold...
  CHECK(extended < rows / 2);  // ...the long tail did not
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
  REQUIRE(p.Start(
      {testing::BinaryPath("trainer/cpu-trainer"), "--config", std::string(FLEETPS_SOURCE_DIR) + "/configs/mlp.yaml",
       "--train-data", dir + "/data/train", "--test-data", dir + "/data/test", "--report", dir + "/mlp.json"},
      {}, dir + "/mlp.log"));
  const int rc = p.Wait(std::chrono::seconds(120));
  INFO(testing::ReadFile(dir + "/mlp.log"));
  REQUIRE(rc == 0);
  CHECK(TestAuc(dir + "/mlp.json") > kAucFloor);
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
    REQUIRE(trainers[i].Start(
        {testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml", "--sync-mode", mode, "--threads",
         std::to_string(threads), "--report", w.dir + "/trainer" + std::to_string(i) + ".json", "--predictions",
         w.dir + "/predictions" + std::to_string(i) + ".txt"},
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
  REQUIRE(infer.Start({testing::BinaryPath("trainer/cpu-trainer"), "--config", w.dir + "/job.yaml", "--mode", "infer",
                       "--predictions", w.dir + "/infer.txt", "--report", w.dir + "/infer.json"},
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
    CHECK(EpochExamples(dir + "/trainer0.json", epoch) + EpochExamples(dir + "/trainer1.json", epoch) == train_lines);
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

}  // namespace
}  // namespace fleetps
