// DataOptions parsing (common/config/data_config) against the real PaddleRec configs.

#include <catch2/catch.hpp>

#include "common/config/data_config.h"
#include "common/config/yaml_util.h"
#include "test/trainer/data/data_test_util.h"

namespace fleetps::data {
namespace {

using config::DataFormat;
using config::DataOptions;
using config::DatasetKind;
using config::SamplerKind;
using config::ShuffleMode;
using testing::kPaddleRecDir;
using testing::NumberedNames;

DataOptions LoadPaddleRec(const std::string& relative) {
  const std::string path = kPaddleRecDir + "/" + relative;
  auto root = config::LoadYamlFile(path);
  REQUIRE(root.ok());
  DataOptions options;
  const Status status = config::ParsePaddleRecDataOptions(*root, config::YamlContext{path, ""}, &options);
  INFO(status.ToString());
  REQUIRE(status.ok());
  return options;
}

// The error message ParseDataOptions gives for a `data:` section text.
std::string ParseError(const std::string& yaml) {
  auto node = config::LoadYamlString("data:\n" + yaml);
  REQUIRE(node.ok());
  DataOptions options;
  const Status status = config::ParseDataOptions((*node)["data"], config::YamlContext{"<test>", "data"}, &options);
  REQUIRE_FALSE(status.ok());
  CHECK(status.IsInvalidArgument());
  return status.message();
}

TEST_CASE("PaddleRec rank_dnn config.yaml gives the rank_dnn defaults", "[data][config]") {
  const DataOptions o = LoadPaddleRec("rank_dnn/config.yaml");
  CHECK(o.format == DataFormat::kRankDnn);
  CHECK(o.label_slots == std::vector<std::string>{"click"});
  CHECK(o.num_labels() == 1);
  CHECK(o.dense_slot == "dense_feature");
  CHECK(o.dense_dim == 13);                       // hyper_parameters.dense_input_dim
  CHECK(o.sparse_slots == NumberedNames(1, 26));  // sparse_inputs_slots: 27
  CHECK(o.batch_size == 2);
  CHECK(o.test_batch_size == 2);  // infer_batch_size
  CHECK(o.thread_num == 1);
  CHECK(o.dataset == DatasetKind::kQueue);
  CHECK_FALSE(o.split_file_list);
  CHECK_FALSE(o.skip_bad_lines);
  // Relative to the config file's directory, as PaddleRec resolves it.
  REQUIRE(o.train_paths.size() == 1);
  CHECK(o.train_paths[0] == kPaddleRecDir + "/rank_dnn/data/sample_data/train");
  CHECK(o.test_paths == o.train_paths);
}

TEST_CASE("PaddleRec reader_type and thread_num are read", "[data][config]") {
  const DataOptions gpubox = LoadPaddleRec("rank_dnn/config_gpubox.yaml");
  CHECK(gpubox.dataset == DatasetKind::kInMemory);  // spelled "InmemoryDataset" there
  CHECK(gpubox.thread_num == 30);
  CHECK(gpubox.batch_size == 32);
  const DataOptions cpups = LoadPaddleRec("rank_dnn/config_cpups.yaml");
  CHECK(cpups.dataset == DatasetKind::kQueue);
  CHECK(cpups.thread_num == 16);
  CHECK(cpups.batch_size == 1000);
  CHECK(cpups.shuffle == ShuffleMode::kLocal);  // the default
}

TEST_CASE("slot_dnn takes its slots from hyper_parameters.slot_num", "[data][config]") {
  const std::string path = kPaddleRecDir + "/slot_dnn/config_queuedataset.yaml";
  auto root = config::LoadYamlFile(path);
  REQUIRE(root.ok());
  (*root)["runner"]["data_format"] = "slot_dnn";  // the one key PaddleRec's config lacks
  DataOptions o;
  REQUIRE(config::ParsePaddleRecDataOptions(*root, config::YamlContext{path, ""}, &o).ok());
  CHECK(o.format == DataFormat::kSlotDnn);
  CHECK(o.label_slots == std::vector<std::string>{"1"});
  CHECK(o.dense_dim == 0);
  CHECK(o.sparse_slots == NumberedNames(2, 408));  // slot_num: 408 -> "2".."409"
  CHECK(o.train_paths == std::vector<std::string>{kPaddleRecDir + "/slot_dnn/data/"});
}

TEST_CASE("explicit keys override the format defaults", "[data][config]") {
  const DataOptions o = testing::OptionsFromYaml(R"(
data_format: multislot
label_slot: label
dense_slot: dense
dense_input_dim: 2
sparse_slots: [a, b]
multislot_slots: [dense, label, b, a]
train_files: [/abs/x, y]
skip_bad_lines: true
queue_capacity: 4
shuffle_seed: 7
shuffle: global
split_file_list: false
)");
  CHECK(testing::OptionsFromYaml("reader_type: InMemoryDataset\nsampler: distributed\n").sampler ==
        SamplerKind::kDistributed);
  CHECK(o.format == DataFormat::kMultiSlot);
  CHECK(o.label_slots == std::vector<std::string>{"label"});
  CHECK(o.dense_dim == 2);
  CHECK(o.sparse_slots == std::vector<std::string>{"a", "b"});
  CHECK(o.multislot_slots == std::vector<std::string>{"dense", "label", "b", "a"});
  CHECK(o.train_paths == std::vector<std::string>{"/abs/x", "y"});  // in-memory YAML: no base dir
  CHECK(o.skip_bad_lines);
  CHECK(o.queue_capacity == 4);
  CHECK(o.shuffle_seed == 7);
  CHECK(o.shuffle == ShuffleMode::kGlobal);
  CHECK_FALSE(o.split_file_list);
  CHECK(o.sampler == SamplerKind::kFiles);  // the default
}

TEST_CASE("multislot's default order is label, sparse slots, dense slot", "[data][config]") {
  const DataOptions o = testing::MultiSlotOptions();
  std::vector<std::string> expected{"click"};
  for (const auto& s : NumberedNames(1, 26)) expected.push_back(s);
  expected.push_back("dense_feature");
  CHECK(o.multislot_slots == expected);
}

TEST_CASE("label_slots gives several labels; multislot's default order starts with them", "[data][config]") {
  const DataOptions rank = testing::OptionsFromYaml("label_slots: [click, conversion]\n");
  CHECK(rank.label_slots == std::vector<std::string>{"click", "conversion"});
  CHECK(rank.num_labels() == 2);
  CHECK(testing::OptionsFromYaml("label_slots: [clicked]\n").label_slots == std::vector<std::string>{"clicked"});
  CHECK(testing::OptionsFromYaml("data_format: slot_dnn\nlabel_slots: ['1', conversion]\n").label_slots ==
        std::vector<std::string>{"1", "conversion"});

  const DataOptions multi = testing::OptionsFromYaml("data_format: multislot\nlabel_slots: [click, conversion]\n");
  std::vector<std::string> expected{"click", "conversion"};
  for (const auto& s : NumberedNames(1, 26)) expected.push_back(s);
  expected.push_back("dense_feature");
  CHECK(multi.multislot_slots == expected);
  // An explicit order may put the labels anywhere, each once.
  const DataOptions order = testing::OptionsFromYaml(
      "data_format: multislot\nlabel_slots: [click, conversion]\nsparse_slots: [a]\ndense_input_dim: 0\n"
      "multislot_slots: [a, conversion, click]\n");
  CHECK(order.multislot_slots == std::vector<std::string>{"a", "conversion", "click"});
}

TEST_CASE("bad label slots name the key", "[data][config]") {
  CHECK(ParseError("  label_slot: click\n  label_slots: [click, conversion]\n") ==
        "<test>:3: data.label_slots: give label_slot (one label) or label_slots (a list of labels), not both: "
        "this section has both");
  CHECK(ParseError("  label_slots: []\n") == "<test>:2: data.label_slots: needs at least one label slot");
  CHECK_THAT(ParseError("  label_slots: click\n"), Catch::Contains("<test>:2: data.label_slots:"));
  CHECK(ParseError("  label_slots: [click, click]\n") ==
        "<test>:2: data.label_slots: slot \"click\" is used twice (label, dense and sparse slot names must differ)");
  CHECK_THAT(ParseError("  label_slots: [click, dense_feature]\n"),
             Catch::Contains("slot \"dense_feature\" is used twice"));
  CHECK_THAT(ParseError("  label_slots: [click, '7']\n"),
             Catch::Contains("<test>:2: data.sparse_slots: slot \"7\" is used twice"));
  CHECK_THAT(ParseError("  label_slots: [click, '']\n"),
             Catch::Contains("<test>:2: data.label_slots: slot name must not be empty"));
  CHECK_THAT(ParseError("  data_format: multislot\n  label_slots: [click, conversion]\n  sparse_slots: [a]\n"
                        "  multislot_slots: [click, a, dense_feature]\n"),
             Catch::Contains("<test>:5: data.multislot_slots: must list every label slot"));
  CHECK_THAT(ParseError("  data_format: multislot\n  label_slots: [click, conversion]\n  sparse_slots: [a]\n"
                        "  multislot_slots: [click, conversion, conversion, a, dense_feature]\n"),
             Catch::Contains("must list every label slot, the dense slot and every sparse slot exactly once"));
}

TEST_CASE("bad data options name file:line, key and allowed values", "[data][config]") {
  CHECK(ParseError("  data_format: csv\n") ==
        "<test>:2: data.data_format: unknown value \"csv\" (allowed: rank_dnn, multislot, slot_dnn, criteo)");
  CHECK(ParseError("  reader_type: DataLoader\n") ==
        "<test>:2: data.reader_type: unknown value \"DataLoader\" "
        "(allowed: QueueDataset, InMemoryDataset, InmemoryDataset)");
  CHECK(ParseError("  shuffle: everywhere\n") ==
        "<test>:2: data.shuffle: unknown value \"everywhere\" (allowed: none, local, global)");
  CHECK(ParseError("  sampler: random\n") ==
        "<test>:2: data.sampler: unknown value \"random\" (allowed: files, distributed)");
  CHECK(ParseError("  sampler: distributed\n") ==
        "<test>:2: data.sampler: distributed needs reader_type: InMemoryDataset (it samples the loaded records)");
  CHECK_THAT(ParseError("  reader_type: InMemoryDataset\n  shuffle: global\n  sampler: distributed\n"),
             Catch::Contains("<test>:4: data.sampler: distributed cannot be combined with shuffle: global"));
  CHECK(ParseError("  thread_num: 0\n") == "<test>:2: data.thread_num: must be >= 1, got 0");
  CHECK(ParseError("  train_batch_size: many\n") ==
        "<test>:2: data.train_batch_size: expected an integer in [0, 4294967295], got \"many\"");
  CHECK_THAT(ParseError("  sparse_slots: [a, b, a]\n"), Catch::Contains("slot \"a\" is used twice"));
  CHECK_THAT(ParseError("  sparse_slots: [click]\n"), Catch::Contains("slot \"click\" is used twice"));
  CHECK_THAT(ParseError("  data_format: slot_dnn\n  dense_input_dim: 13\n"),
             Catch::Contains("<test>:3: data.dense_input_dim: must be 0 for data_format slot_dnn"));
  CHECK_THAT(ParseError("  data_format: multislot\n  multislot_slots: [click, dense_feature]\n"),
             Catch::Contains("<test>:3: data.multislot_slots: must list every label slot"));
  CHECK_THAT(ParseError("  multislot_slots: [click]\n"), Catch::Contains("only valid with data_format multislot"));
  CHECK_THAT(ParseError("  sparse_inputs_slots: 1\n"), Catch::Contains("data.sparse_inputs_slots: must be >= 2"));
}

TEST_CASE("format names round-trip", "[data][config]") {
  for (DataFormat format : {DataFormat::kRankDnn, DataFormat::kMultiSlot, DataFormat::kSlotDnn}) {
    DataFormat parsed = DataFormat::kRankDnn;
    CHECK(config::DataFormatFromName(config::DataFormatName(format), &parsed));
    CHECK(parsed == format);
  }
  DataFormat unused;
  CHECK_FALSE(config::DataFormatFromName("csv", &unused));
}

TEST_CASE("DataOptionKeys covers every key a data section may hold", "[data][config]") {
  auto node = config::LoadYamlString("thread_num: 2\ntypo_key: 1\n");
  REQUIRE(node.ok());
  const Status status =
      config::RejectUnknownKeys(*node, config::DataOptionKeys(), config::YamlContext{"<test>", "data"});
  CHECK_THAT(status.message(), Catch::Contains("unknown key 'typo_key'"));
}

}  // namespace
}  // namespace fleetps::data
