// data_format criteo against PaddleRec's legacy raw Criteo TSV sample (100 train and 100 test
// lines, some test lines with trailing empty columns trimmed). The expected dense values and
// ids were computed independently (Python: PaddleRec's scaling constants, FNV-1a 64 and the
// splitmix64 finalizer written out), not by this code.

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test/trainer/data/data_test_util.h"
#include "trainer/data/criteo_format.h"
#include "trainer/data/file_reader.h"
#include "trainer/data/line_format.h"

namespace fleetps::data {
namespace {

const std::string kCriteoTrain = testing::kPaddleRecDir + "/rank_dnn_legacy_raw_tsv/train/sample_train.txt";
const std::string kCriteoTest = testing::kPaddleRecDir + "/rank_dnn_legacy_raw_tsv/test/sample_test.txt";

config::DataOptions CriteoOptions(const std::string& extra = "") {
  return testing::OptionsFromYaml("data_format: criteo\n" + extra);
}

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> fields;
  size_t begin = 0;
  while (true) {
    const size_t tab = line.find('\t', begin);
    fields.push_back(line.substr(begin, tab == std::string::npos ? std::string::npos : tab - begin));
    if (tab == std::string::npos) return fields;
    begin = tab + 1;
  }
}

std::string Join(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i > 0 ? "\t" : "") + fields[i];
  return line;
}

TEST_CASE("criteo: PaddleRec's raw TSV sample, scaled and hashed as its criteo reader", "[data][format]") {
  const config::DataOptions options = CriteoOptions();
  CHECK(options.dense_dim == 13);
  CHECK(options.sparse_slots.size() == 26);
  CHECK(options.criteo_hash_dim == 1000001);
  const auto format = MakeLineFormat(options);
  CHECK_FALSE(format->CanWrite());

  const auto lines = testing::ReadLines(kCriteoTrain);
  REQUIRE(lines.size() == 100);
  Example ex;
  REQUIRE(format->Parse(lines[0], &ex).ok());
  // 0 \t "" 0 5 4 13275 14 35 4 41 "" 4 0 4 \t 05db9164 ... 43f13e8b ea9a246c 731c3655
  CHECK(ex.labels[0] == 0.0f);
  const std::vector<double> dense = {
      0.0, 0.004975124378109453, 0.05, 0.08, 0.207421875, 0.028, 0.35, 0.08, 0.082, 0.0, 0.4, 0.0, 0.08};
  REQUIRE(ex.dense.size() == 13);
  for (size_t j = 0; j < 13; ++j) CHECK(ex.dense[j] == static_cast<float>(dense[j]));
  REQUIRE(ex.slots.size() == 26);
  for (const auto& ids : ex.slots) CHECK(ids.size() == 1);  // one id per column, missing ones too
  CHECK(ex.slots[0][0] == 576878);
  CHECK(ex.slots[1][0] == 530473);
  CHECK(ex.slots[2][0] == 716601);
  CHECK(ex.slots[3][0] == 888850);
  CHECK(ex.slots[4][0] == 244966);
  CHECK(ex.slots[23][0] == 589923);  // C24 "43f13e8b"
  CHECK(ex.slots[24][0] == 813895);
  CHECK(ex.slots[25][0] == 708660);
  CHECK(CriteoFormat::HashValue(14, "05db9164") == 531504466884512258ull);

  // Every line: the label is the first field, every id below the hash dim, and a missing
  // categorical value has its column's own id.
  uint32_t clicks = 0;
  for (const auto& path : {kCriteoTrain, kCriteoTest}) {
    for (const auto& line : testing::ReadLines(path)) {
      INFO(path << ": " << line);
      REQUIRE(format->Parse(line, &ex).ok());
      const auto fields = Fields(line);
      CHECK(ex.labels[0] == (fields[0] == "1" ? 1.0f : 0.0f));
      clicks += fields[0] == "1";
      for (uint32_t c = 14; c < 40; ++c) {
        const std::string raw = c < fields.size() ? fields[c] : "";
        CHECK(ex.slots[c - 14][0] == CriteoFormat::HashValue(c, raw) % 1000001);
      }
    }
  }
  CHECK(clicks > 0);
}

TEST_CASE("criteo: trimmed trailing columns read as missing values; criteo_hash_dim 0 keeps the whole hash",
          "[data][format]") {
  const auto lines = testing::ReadLines(kCriteoTest);
  REQUIRE(lines.size() == 100);
  REQUIRE(Fields(lines[2]).size() == 38);  // the sample's third test line lost C25 and C26
  const auto format = MakeLineFormat(CriteoOptions());
  Example trimmed, padded;
  REQUIRE(format->Parse(lines[2], &trimmed).ok());
  REQUIRE(format->Parse(lines[2] + "\t\t", &padded).ok());  // the same line with its 40 fields
  CHECK(trimmed == padded);
  CHECK(trimmed.slots[24][0] == 683045);  // "38" hashed alone (the missing C25)
  CHECK(trimmed.slots[25][0] == 370947);

  const auto whole = MakeLineFormat(CriteoOptions("criteo_hash_dim: 0"));
  Example full;
  REQUIRE(whole->Parse(lines[2], &full).ok());
  for (size_t s = 0; s < 26; ++s) CHECK(full.slots[s][0] % 1000001 == trimmed.slots[s][0]);
  CHECK(full.slots[0][0] >= 1000001);
}

TEST_CASE("criteo: a malformed line is an error naming the column", "[data][format]") {
  const auto format = MakeLineFormat(CriteoOptions());
  const auto fields = Fields(testing::ReadLines(kCriteoTrain).at(1));
  REQUIRE(fields.size() == 40);
  auto error = [&](const std::string& line) {
    Example ex;
    const Status st = format->Parse(line, &ex);
    INFO(line);
    REQUIRE(st.IsInvalidArgument());
    return st.message();
  };
  auto with = [&](size_t index, const std::string& value) {
    auto f = fields;
    f[index] = value;
    return Join(f);
  };
  CHECK_THAT(error(with(0, "2")), Catch::Contains("column 1 \"2\": the label must be 0 or 1"));
  CHECK_THAT(error(with(0, "")), Catch::Contains("the label must be 0 or 1"));
  CHECK_THAT(error(with(3, "abc")), Catch::Contains("column 4 \"abc\": integer column I3 is not a number"));
  CHECK_THAT(error(with(5, "1e999")), Catch::Contains("integer column I5 is not a number"));
  CHECK_THAT(error(Join(fields) + "\textra"), Catch::Contains("more than 40 tab-separated fields"));
  const std::vector<std::string> short_line(fields.begin(), fields.begin() + 10);
  CHECK_THAT(error(Join(short_line)), Catch::Contains("10 tab-separated field(s)"));
  // A space-separated line (rank_dnn's) is one field.
  CHECK_THAT(error(testing::ReadLines(testing::kRankDnnSample).at(0)), Catch::Contains("column 1"));
}

TEST_CASE("criteo: a data file's bad line is named by file and line", "[data][format][files]") {
  testing::TempDir dir;
  auto lines = testing::ReadLines(kCriteoTrain);
  lines.resize(5);
  auto f = Fields(lines[3]);
  f[7] = "x7";
  lines[3] = Join(f);
  const std::string path = dir.Write("part-00000", lines);
  const auto format = MakeLineFormat(CriteoOptions());
  ReadProgress progress;
  FileReader reader(*format, /*skip_bad_lines=*/false, &progress);
  uint64_t read = 0;
  const Status st = reader.ReadFile(path, [&](const Example&) {
    ++read;
    return Status::OK();
  });
  REQUIRE(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains(path + ":4") && Catch::Contains("column 8 \"x7\""));
  CHECK(read == 3);
}

TEST_CASE("criteo options: the shape it needs, and criteo_hash_dim only with it", "[data][config]") {
  auto parse = [](const std::string& yaml) {
    auto node = config::LoadYamlString(yaml, "job.yaml");
    REQUIRE(node.ok());
    config::DataOptions options;
    return config::ParseDataOptions(*node, config::YamlContext{"job.yaml", "data"}, &options);
  };
  CHECK(parse("data_format: criteo\ncriteo_hash_dim: 0").ok());
  const Status dense = parse("data_format: criteo\ndense_input_dim: 12");
  CHECK_THAT(dense.message(), Catch::Contains("job.yaml:2") && Catch::Contains("dense_input_dim") &&
                                  Catch::Contains("dense_input_dim must be 13, not 12"));
  const Status slots = parse("data_format: criteo\nsparse_inputs_slots: 10");
  CHECK_THAT(slots.message(), Catch::Contains("job.yaml:2") && Catch::Contains("sparse_inputs_slots") &&
                                  Catch::Contains("26 sparse slots (sparse_inputs_slots: 27, the label counted), "
                                                  "not 9"));
  // From a PaddleRec config's hyper_parameters: the error points at data_format.
  auto node = config::LoadYamlString("runner:\n  data_format: criteo\nhyper_parameters:\n  sparse_inputs_slots: 20\n",
                                     "job.yaml");
  REQUIRE(node.ok());
  config::DataOptions options;
  const Status paddlerec = config::ParsePaddleRecDataOptions(*node, config::YamlContext{"job.yaml", ""}, &options);
  CHECK_THAT(paddlerec.message(),
             Catch::Contains("job.yaml:2") && Catch::Contains("data_format") && Catch::Contains("not 19"));
  // A criteo line has one label column: a second label slot is refused, naming the key.
  const Status two_labels = parse("data_format: criteo\nlabel_slots: [click, conversion]");
  CHECK(two_labels.IsInvalidArgument());
  CHECK(two_labels.message() ==
        "job.yaml:2: data.label_slots: data_format criteo lines carry one label: label_slots must name one slot, "
        "not 2");
  CHECK(parse("data_format: criteo\nlabel_slots: [clicked]").ok());
  const Status other = parse("data_format: rank_dnn\ncriteo_hash_dim: 7");
  CHECK_THAT(other.message(),
             Catch::Contains("criteo_hash_dim") && Catch::Contains("only valid with data_format criteo"));
}

}  // namespace
}  // namespace fleetps::data
