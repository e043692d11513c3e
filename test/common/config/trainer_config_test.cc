// Job YAML (common/config/trainer_config): every map rejects unknown keys, PaddleRec's own
// keys are accepted, and the shared PaddleRec configs and configs/ still load.
#include "common/config/trainer_config.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/config/server_config.h"

namespace fleetps::config {
namespace {

const std::string kPaddleRecDir = FLEETPS_SOURCE_DIR "/../shared/data/paddlerec/";
const std::string kConfigDir = FLEETPS_SOURCE_DIR "/configs/";

std::string ParseError(const std::string& text) {
  auto o = ParseTrainerYaml(text, "job.yaml");
  INFO(text);
  REQUIRE_FALSE(o.ok());
  CHECK(o.status().IsInvalidArgument());
  return o.status().message();
}

TEST_CASE("A misspelt runner key is an error, not a silent default") {
  // Before: `sync_mod: sync` trained async and `model_save_pth` never saved.
  CHECK(ParseError("runner:\n"
                   "  epochs: 1\n"
                   "  sync_mod: sync\n"
                   "hyper_parameters:\n"
                   "  fc_sizes: [4]\n") ==
        "job.yaml:3:3: unknown key 'sync_mod' under 'runner' (did you mean 'sync_mode'?)");
  CHECK(ParseError("runner:\n"
                   "  model_save_pth: out\n"
                   "hyper_parameters: {}\n") ==
        "job.yaml:2:3: unknown key 'model_save_pth' under 'runner' (did you mean 'model_save_path'?)");
  // Data keys live in the runner too.
  CHECK(ParseError("runner:\n  train_batch_sise: 8\nhyper_parameters: {}\n") ==
        "job.yaml:2:3: unknown key 'train_batch_sise' under 'runner' (did you mean 'train_batch_size'?)");
  // Nothing close: the keys fleetps reads are listed.
  const std::string far = ParseError("runner:\n  learning_speed: 3\nhyper_parameters: {}\n");
  CHECK_THAT(far, Catch::StartsWith("job.yaml:2:3: unknown key 'learning_speed' under 'runner' (known keys: "
                                    "sync_mode, geo_step, epochs, print_interval, thread_num, model_save_path, "
                                    "infer_load_path, days, pass_per_day, data_donefile, data_sleep_second, "
                                    "train_thread_num, start_day, end_day, checkpoint_per_pass, start_pass, "
                                    "data_format,"));
  CHECK_THAT(far, !Catch::Contains("use_gpu"));  // ignored PaddleRec keys are not offered
}

TEST_CASE("A misspelt hyper_parameters key is an error") {
  CHECK(ParseError("hyper_parameters:\n"
                   "  sparse_feature_dimm: 8\n"
                   "runner: {}\n") ==
        "job.yaml:2:3: unknown key 'sparse_feature_dimm' under 'hyper_parameters' (did you mean "
        "'sparse_feature_dim'?)");
  CHECK(ParseError("hyper_parameters:\n"
                   "  fc_sizes: [4]\n"
                   "  optimiser: {class: Adam}\n"
                   "runner: {}\n") ==
        "job.yaml:3:3: unknown key 'optimiser' under 'hyper_parameters' (did you mean 'optimizer'?)");
  CHECK(ParseError("hyper_parameters:\n  slot_nun: 4\nrunner: {}\n") ==
        "job.yaml:2:3: unknown key 'slot_nun' under 'hyper_parameters' (did you mean 'slot_num'?)");
  CHECK(ParseError("hyper_parameters:\n  optimizer:\n    class: adam\n    learning_rte: 0.1\nrunner: {}\n") ==
        "job.yaml:4:5: unknown key 'learning_rte' under 'hyper_parameters.optimizer' (did you mean "
        "'learning_rate'?)");
}

TEST_CASE("Unknown keys in the fleetps section and its maps") {
  CHECK(ParseError("hyper_parameters: {}\nfleetps:\n  max_merge_step: 2\nrunner: {}\n") ==
        "job.yaml:3:3: unknown key 'max_merge_step' under 'fleetps' (did you mean 'max_merge_steps'?)");
  CHECK(ParseError("hyper_parameters: {}\nfleetps:\n  server:\n    io_thread: 2\nrunner: {}\n") ==
        "job.yaml:4:5: unknown key 'io_thread' under 'fleetps.server' (did you mean 'io_threads'?)");
  CHECK(ParseError("hyper_parameters: {}\nfleetps:\n  sparse_table: {shard: 2}\nrunner: {}\n") ==
        "job.yaml:3:18: unknown key 'shard' under 'fleetps.sparse_table' (did you mean 'shards'?)");
  CHECK(ParseError("hyper_parameters: {}\nfleetps:\n  sparse_table:\n    initializer: {name: uniform, sed: 1}\n"
                   "runner: {}\n") ==
        "job.yaml:4:34: unknown key 'sed' under 'fleetps.sparse_table.initializer' (did you mean 'seed'?)");
  CHECK(ParseError("hyper_parameters: {}\nrunners: {}\n") ==
        "job.yaml:2:1: unknown key 'runners' at the top level (did you mean 'runner'?)");
  // The pserver reads fleetps.server from the same file with the same check.
  auto server =
      ParseServerYaml("hyper_parameters: {}\nfleetps:\n  server: {max_conections: 3}\nrunner: {}\n", "job.yaml");
  CHECK(server.status().message() ==
        "job.yaml:3:12: unknown key 'max_conections' under 'fleetps.server' (did you mean 'max_connections'?)");
}

TEST_CASE("fleetps.dense picks the dense backend's precision and kernel-family cap") {
  auto defaults = ParseTrainerYaml("hyper_parameters: {}\nrunner: {}\n", "job.yaml");
  REQUIRE(defaults.ok());
  CHECK(defaults->dense.precision == dense::Precision::kFp32);
  CHECK_FALSE(defaults->dense.max_isa.has_value());
  auto bf16 = ParseTrainerYaml(
      "hyper_parameters: {}\nrunner: {}\nfleetps:\n  dense: {precision: bf16, max_isa: avx512}\n", "job.yaml");
  REQUIRE(bf16.ok());
  CHECK(bf16->dense.precision == dense::Precision::kBf16);
  CHECK(bf16->dense.max_isa == dense::IsaLevel::kAvx512);
  CHECK(ParseError("hyper_parameters: {}\nrunner: {}\nfleetps:\n  dense: {precision: fp16}\n") ==
        "job.yaml:4: fleetps.dense.precision: unknown precision 'fp16' (use fp32 or bf16)");
  CHECK(ParseError("hyper_parameters: {}\nrunner: {}\nfleetps:\n  dense: {max_isa: sse2}\n") ==
        "job.yaml:4: fleetps.dense.max_isa: unknown max_isa 'sse2' (use auto, generic, avx2, avx512, avx512_bf16 or "
        "amx)");
  CHECK(ParseError("hyper_parameters: {}\nrunner: {}\nfleetps:\n  dense: {precission: bf16}\n") ==
        "job.yaml:4:11: unknown key 'precission' under 'fleetps.dense' (did you mean 'precision'?)");
}

TEST_CASE("fleetps.prefetch is auto, true or false") {
  auto defaults = ParseTrainerYaml("hyper_parameters: {}\nrunner: {}\n", "job.yaml");
  REQUIRE(defaults.ok());
  CHECK_FALSE(defaults->prefetch.has_value());
  auto on = ParseTrainerYaml("hyper_parameters: {}\nrunner: {}\nfleetps: {prefetch: true}\n", "job.yaml");
  REQUIRE(on.ok());
  CHECK(on->prefetch == true);
  CHECK(ParseError("hyper_parameters: {}\nrunner: {}\nfleetps: {prefetch: yes}\n") ==
        "job.yaml:3: fleetps.prefetch: unknown prefetch 'yes' (use auto, true or false)");
}

TEST_CASE("A key given twice is an error") {
  CHECK(ParseError("runner:\n  sync_mode: async\n  sync_mode: sync\nhyper_parameters: {}\n") ==
        "job.yaml:3:3: duplicate key 'sync_mode' under 'runner' (first at line 2); give each key once");
}

TEST_CASE("PaddleRec keys fleetps has no use for are accepted") {
  auto o = ParseTrainerYaml(R"(runner:
  train_reader_path: "criteo_reader"
  infer_reader_path: "criteo_reader"
  pipe_command: "python reader.py"
  model_path: "static_model.py"
  use_gpu: False
  use_auc: True
  num_workers: 0
  dataset_debug: False
  infer_reader_type: "DataLoader"
  infer_start_epoch: 0
  infer_end_epoch: 3
  use_inference: False
  save_inference_feed_varnames: ["1", "2"]
  save_inference_fetch_varnames: ["sigmoid_0.tmp_0"]
  model_init_path: "output_model_dnn/0"
  sync_mode: "sync"
hyper_parameters:
  optimizer: {class: Adam, learning_rate: 0.001, strategy: async, adam_lazy_mode: True}
  sparse_feature_number: 1000001
  dict_dim: 1000000
  distributed_embedding: 0
)",
                            "job.yaml");
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  CHECK(o->sync_mode == SyncMode::kSync);
}

TEST_CASE("PaddleRec slot_dnn spellings emb_dim and layer_sizes are read") {
  auto o = ParseTrainerYaml("runner: {}\nhyper_parameters:\n  emb_dim: 7\n  layer_sizes: [16, 8]\n", "job.yaml");
  REQUIRE(o.ok());
  CHECK(o->model.sparse_feature_dim == 7);
  CHECK(o->model.fc_sizes == std::vector<uint32_t>{16, 8});
  o = ParseTrainerYaml(
      "runner: {}\nhyper_parameters:\n  emb_dim: 7\n  sparse_feature_dim: 7\n  layer_sizes: [16]\n"
      "  fc_sizes: [16]\n",
      "job.yaml");
  REQUIRE(o.ok());
  CHECK(ParseError("hyper_parameters:\n  sparse_feature_dim: 9\n  emb_dim: 8\nrunner: {}\n") ==
        "job.yaml:3: hyper_parameters.emb_dim: is 8 but sparse_feature_dim is 9; both name the embedding width, "
        "give one");
  CHECK(ParseError("hyper_parameters:\n  fc_sizes: [4]\n  layer_sizes: [8]\nrunner: {}\n") ==
        "job.yaml:3: hyper_parameters.layer_sizes: differs from fc_sizes; both name the hidden layer widths, give one");
}

// The shared PaddleRec configs that loaded before the unknown-key checks, as job YAML (trainer)
// and as the pserver's config (tables from the model).
TEST_CASE("The shared PaddleRec configs still load") {
  const std::string loadable[] = {
      "rank_dnn/config.yaml",
      "rank_dnn/config_bigdata.yaml",
      "rank_dnn/config_cpups.yaml",
      "rank_dnn/config_queuedataset.yaml",
      "rank_dnn/config_to_static.yaml",
      "rank_dnn/benchmark.yaml",
      "slot_dnn/config_queuedataset.yaml",
      "slot_dnn/config_queuedataset_for_concat.yaml",
  };
  for (const auto& name : loadable) {
    const std::string path = kPaddleRecDir + name;
    INFO(path);
    auto job = LoadTrainerYaml(path);
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    auto server = LoadServerYaml(path);
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    CHECK(server->tables.size() == 2);
  }
  auto config = LoadTrainerYaml(kPaddleRecDir + "rank_dnn/config.yaml");
  REQUIRE(config.ok());
  CHECK(config->model.sparse_feature_dim == 9);
  CHECK(config->model.optimizer.kind == OptimizerKind::kAdam);
  CHECK(config->model.optimizer.learning_rate == 0.001f);
  CHECK(config->data.batch_size == 2);
  CHECK_THAT(config->model_save_path, Catch::EndsWith("/paddlerec/rank_dnn/output_model_dnn"));
  auto slot_dnn = LoadTrainerYaml(kPaddleRecDir + "slot_dnn/config_queuedataset.yaml");
  REQUIRE(slot_dnn.ok());
  CHECK(slot_dnn->model.fc_sizes == std::vector<uint32_t>{512, 256, 128, 128, 128});  // layer_sizes

  // PaddleRec's GPU-PS configs are gpubox jobs (heter-trainer's GPU-PS pass mode).
  for (const char* name : {"rank_dnn/config_gpubox.yaml", "rank_dnn/benchmark_gpubox.yaml"}) {
    auto gpubox = LoadTrainerYaml(kPaddleRecDir + name);
    INFO(name << ": " << gpubox.status().ToString());
    REQUIRE(gpubox.ok());
    CHECK(gpubox->gpubox_mode());
  }
  // The others use what fleetps does not have, and say so (as they did before).
  CHECK_THAT(LoadTrainerYaml(kPaddleRecDir + "slot_dnn/config_online.yaml").status().message(),
             Catch::Contains("unknown key 'table_parameters' at the top level"));
  CHECK_THAT(LoadTrainerYaml(kPaddleRecDir + "slot_dnn/config_offline_infer.yaml").status().message(),
             Catch::Contains("unknown key 'table_parameters' at the top level"));
  // Online training by day and pass: its days, passes, threads and list of data directories.
  auto online = LoadTrainerYaml(kPaddleRecDir + "rank_dnn/online.yaml");
  INFO(online.status().ToString());
  REQUIRE(online.ok());
  CHECK(online->online.days == std::vector<std::string>{"20191225", "20191226", "20191227"});
  CHECK(online->online.pass_per_day == 24);
  CHECK(online->worker_threads == 16);  // train_thread_num
  REQUIRE(online->data.train_paths.size() == 1);
  CHECK_THAT(online->data.train_paths[0], Catch::EndsWith("rank_dnn/data/sample_data/train/"));
  CHECK(ValidateTrainerOptions(*online).ok());
}

TEST_CASE("Online days: Paddle's shell spelling, expanded as bash does") {
  auto days = [](const std::string& text) {
    auto d = ExpandDays(text);
    INFO(text << ": " << d.status().ToString());
    REQUIRE(d.ok());
    return *d;
  };
  using V = std::vector<std::string>;
  CHECK(days("{20191225..20191227}") == V{"20191225", "20191226", "20191227"});
  CHECK(days(" 20191225\t20191230 ") == V{"20191225", "20191230"});
  CHECK(days("2019122{5..7}") == V{"20191225", "20191226", "20191227"});
  CHECK(days("{01..03}") == V{"01", "02", "03"});  // zero-padded to the wider end
  CHECK(days("{9..11}") == V{"9", "10", "11"});
  CHECK(days("{3..1}") == V{"3", "2", "1"});
  CHECK(days("{a,b}{1..2}") == V{"a1", "a2", "b1", "b2"});
  CHECK(days("x{a,{1..2}}y") == V{"xay", "x1y", "x2y"});
  CHECK(days("") == V{});
  for (const char* bad : {"{2019", "2019}", "{abc}", "{1..x}", "{1..200000}", "{1..9999}{1..9999}"}) {
    INFO(bad);
    auto d = ExpandDays(bad);
    REQUIRE_FALSE(d.ok());
    CHECK_THAT(d.status().message(), Catch::Contains(std::string("days '") + bad + "'"));
  }
  std::string nested = "1";
  for (int i = 0; i < 40; ++i) nested = "{a," + nested + "}";
  CHECK_THAT(ExpandDays(nested).status().message(), Catch::Contains("more than 32 brace groups"));
  CHECK(OnlinePassPath("/data/{day}/{pass}/x{day}", "20191225", 7) == "/data/20191225/7/x20191225");

  auto job = [](const std::string& runner) {
    return ParseTrainerYaml("runner:\n" + runner + "hyper_parameters: {fc_sizes: [8]}\n", "job.yaml");
  };
  auto listed = job("  days: ['{20191225..20191226}', '20191230']\n  pass_per_day: 2\n");
  REQUIRE(listed.ok());
  CHECK(listed->online.days == V{"20191225", "20191226", "20191230"});
  CHECK_THAT(job("  days: '{2019'\n").status().message(),
             Catch::Contains("job.yaml:2") && Catch::Contains("a '{' without its '}'"));
  CHECK_THAT(job("  days: '20191225'\n  pass_per_day: 0\n").status().message(),
             Catch::Contains("runner.pass_per_day") && Catch::Contains("must be >= 1"));
  CHECK_THAT(job("  days: '20191225'\n  data_donefile: a/b.done\n").status().message(),
             Catch::Contains("data_donefile") && Catch::Contains("not a path"));
  // Dates: start_day and end_day step through the calendar (month and year ends, 2020's
  // leap day); a brace range of dates that is not one is refused.
  auto dated = job("  start_day: '20191230'\n  end_day: '20200102'\n");
  REQUIRE(dated.ok());
  CHECK(dated->online.days == V{"20191230", "20191231", "20200101", "20200102"});
  auto leap = job("  start_day: '20200228'\n  end_day: '20200301'\n");
  REQUIRE(leap.ok());
  CHECK(leap->online.days == V{"20200228", "20200229", "20200301"});
  CHECK_THAT(job("  days: '{20191230..20200102}'\n").status().message(),
             Catch::Contains("job.yaml:2") && Catch::Contains("'20191232' is not a calendar date") &&
                 Catch::Contains("start_day and end_day"));
  CHECK_THAT(job("  start_day: '20200102'\n  end_day: '20191230'\n").status().message(),
             Catch::Contains("runner.end_day") && Catch::Contains("is before start_day 20200102"));
  CHECK_THAT(job("  start_day: '20191301'\n  end_day: '20191302'\n").status().message(),
             Catch::Contains("'20191301' is not a YYYYMMDD date"));
  CHECK_THAT(job("  start_day: '20191230'\n").status().message(), Catch::Contains("needs both start_day and end_day"));
  CHECK_THAT(job("  days: '20191225'\n  start_day: '20191230'\n  end_day: '20191231'\n").status().message(),
             Catch::Contains("not both"));
  CHECK_THAT(job("  days: ['{2019']\n").status().message(),
             Catch::Contains("job.yaml:2") && Catch::Contains("'{2019'"));

  CHECK_THAT(job("  days: '20191225'\n  pass_per_day: 4\n  start_pass: 5\n").status().message(),
             Catch::Contains("runner.start_pass") && Catch::Contains("must be in [1, pass_per_day = 4]"));
  auto resumed = job("  days: '20191225'\n  pass_per_day: 4\n  start_pass: 3\n  checkpoint_per_pass: 2\n");
  REQUIRE(resumed.ok());
  CHECK(resumed->online.start_pass == 3);
  CHECK(resumed->online.checkpoint_per_pass == 2);

  auto epochs = job("  days: '20191225'\n  epochs: 3\n");
  REQUIRE(epochs.ok());
  CHECK_THAT(ValidateTrainerOptions(*epochs).message(), Catch::Contains("leave out runner.epochs"));
}

TEST_CASE("Dense rate scaling: auto is linear for SGD and square-root for the adaptive rules") {
  auto parsed = ParseTrainerYaml("runner: {}\nhyper_parameters: {}\n", "job.yaml");
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->collective.lr_scaling == LrScaling::kAuto);  // the default
  for (const auto& [name, want] : {std::pair<const char*, LrScaling>{"auto", LrScaling::kAuto},
                                   {"linear", LrScaling::kLinear},
                                   {"sqrt", LrScaling::kSqrt},
                                   {"none", LrScaling::kNone}}) {
    auto o = ParseTrainerYaml(
        std::string("runner: {}\nhyper_parameters: {}\nfleetps:\n  collective: {lr_scaling: ") + name + "}\n",
        "job.yaml");
    REQUIRE(o.ok());
    CHECK(o->collective.lr_scaling == want);
  }
  CHECK_THAT(ParseError("runner: {}\nhyper_parameters: {}\nfleetps:\n  collective: {lr_scaling: cubic}\n"),
             Catch::Contains("cubic") && Catch::Contains("sqrt"));
  CHECK(parsed->collective.store_budget_bytes == 0);  // auto: from the number of ranks
  auto budget = ParseTrainerYaml(
      "runner: {}\nhyper_parameters: {}\nfleetps:\n  collective: {store_budget_bytes: 1048576}\n", "job.yaml");
  REQUIRE(budget.ok());
  CHECK(budget->collective.store_budget_bytes == 1048576);
  CHECK_THAT(ParseError("runner: {}\nhyper_parameters: {}\nfleetps:\n  collective: {store_budget_bytes: 100}\n"),
             Catch::Contains("store_budget_bytes") && Catch::Contains("must be 0 (auto) or >= 4096"));

  DataParallelOptions c;
  OptimizerOptions sgd, adam, adagrad;
  sgd.kind = OptimizerKind::kSgd;
  adam.kind = OptimizerKind::kAdam;
  adagrad.kind = OptimizerKind::kAdagrad;
  sgd.learning_rate = adam.learning_rate = adagrad.learning_rate = 0.01f;
  CHECK(DataParallelLearningRate(c, sgd, 0, 16) == Approx(0.16f));   // auto: 0.01 x 16
  CHECK(DataParallelLearningRate(c, adam, 0, 16) == Approx(0.04f));  // auto: 0.01 x 4
  CHECK(DataParallelLearningRate(c, adagrad, 0, 9) == Approx(0.03f));
  c.lr_scaling = LrScaling::kLinear;
  CHECK(DataParallelLearningRate(c, adam, 0, 16) == Approx(0.16f));
  c.lr_scaling = LrScaling::kSqrt;
  CHECK(DataParallelLearningRate(c, sgd, 0, 25) == Approx(0.05f));
  c.lr_scaling = LrScaling::kNone;
  CHECK(DataParallelLearningRate(c, sgd, 0, 25) == Approx(0.01f));
  // Warm-up after the scaling: steps 0 and 2 of 4 at a quarter and three quarters, then whole.
  c.lr_scaling = LrScaling::kAuto;
  c.warmup_steps = 4;
  CHECK(DataParallelLearningRate(c, adam, 0, 4) == Approx(0.005f));
  CHECK(DataParallelLearningRate(c, adam, 2, 4) == Approx(0.015f));
  CHECK(DataParallelLearningRate(c, adam, 4, 4) == Approx(0.02f));
  CHECK(DataParallelLearningRate(c, adam, 1000, 1) == Approx(0.01f));
}

TEST_CASE("The configs in configs/ load") {
  for (const std::string name : {"ctr_dnn.yaml", "ctr_dnn_criteo.yaml", "mlp.yaml"}) {
    INFO(name);
    auto job = LoadTrainerYaml(kConfigDir + name);
    INFO(job.status().ToString());
    CHECK(job.ok());
    auto server = LoadServerYaml(kConfigDir + name);
    INFO(server.status().ToString());
    CHECK(server.ok());
  }
  auto pserver = LoadServerYaml(kConfigDir + "pserver.yaml");
  INFO(pserver.status().ToString());
  REQUIRE(pserver.ok());
  CHECK(pserver->tables.size() == 2);
}

}  // namespace
}  // namespace fleetps::config
