// fleetps-datagen's library: generated files read back with the trainer's readers.

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include <catch2/catch.hpp>

#include "common/config/yaml_util.h"
#include "test/trainer/data/data_test_util.h"
#include "tools/datagen/datagen.h"
#include "tools/datagen/exact_auc.h"
#include "trainer/data/file_list.h"
#include "trainer/data/in_memory_dataset.h"

namespace fleetps::datagen {
namespace {

using config::DataFormat;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// All records of `files` in file order, as one batch.
data::Batch LoadAll(const config::DataOptions& options, const std::vector<std::string>& files) {
  data::InMemoryDataset dataset(options, files, 1 << 30);
  const Status status = dataset.LoadIntoMemory();
  INFO(status.ToString());
  REQUIRE(status.ok());
  data::Batch all;
  REQUIRE(dataset.StartPass().ok());
  if (dataset.size() > 0) REQUIRE(*dataset.NextBatch(&all));
  return all;
}

DatagenOptions SmallOptions(const std::string& out_dir, DataFormat format) {
  DatagenOptions o;
  o.format = format;
  o.rows = 20000;
  o.test_fraction = 0.2;
  o.train_files = 3;
  o.out_dir = out_dir;
  o.seed = 17;
  o.dense_dim = format == DataFormat::kSlotDnn ? 0 : 13;
  return o;
}

TEST_CASE("generated files read back through data.yaml in every format", "[datagen]") {
  for (DataFormat format : {DataFormat::kRankDnn, DataFormat::kMultiSlot, DataFormat::kSlotDnn}) {
    INFO(config::DataFormatName(format));
    data::testing::TempDir dir;
    const DatagenOptions options = SmallOptions(dir.path(), format);
    const auto report = GenerateDataset(options);
    REQUIRE(report.ok());
    CHECK(report->train_rows == 16000);
    CHECK(report->test_rows == 4000);

    // The data section datagen wrote is what the trainer parses.
    auto root = config::LoadYamlFile(report->config_file);
    REQUIRE(root.ok());
    config::DataOptions data;
    REQUIRE(config::ParseDataOptions((*root)["data"], config::YamlContext{report->config_file, "data"}, &data).ok());
    CHECK(data.format == format);
    CHECK(data.sparse_slots.size() == 26);
    CHECK(data.dense_dim == options.dense_dim);
    auto train_files = data::ExpandFileList(data.train_paths);
    auto test_files = data::ExpandFileList(data.test_paths);
    REQUIRE(train_files.ok());
    REQUIRE(test_files.ok());
    CHECK(*train_files == report->train_files);
    CHECK(*test_files == report->test_files);

    const data::Batch train = LoadAll(data, *train_files);
    const data::Batch test = LoadAll(data, *test_files);
    REQUIRE(train.size() == 16000);
    REQUIRE(test.size() == 4000);
    const double positives = std::count(train.labels.begin(), train.labels.end(), 1.0f) +
                             std::count(test.labels.begin(), test.labels.end(), 1.0f);
    CHECK(positives / 20000 == Approx(report->label_mean).epsilon(1e-12));
    CHECK(report->label_mean > 0.1);
    CHECK(report->label_mean < 0.4);
    CHECK(report->bayes_auc > 0.7);
    CHECK(report->bayes_auc < 1.0);
    for (const auto& slot : train.slots) CHECK(slot.ids.size() == 16000);  // one id per slot and row
  }
}

TEST_CASE("every format writes the same examples for the same seed", "[datagen]") {
  data::testing::TempDir rank_dir, multi_dir;
  const auto rank = GenerateDataset(SmallOptions(rank_dir.path(), DataFormat::kRankDnn));
  const auto multi = GenerateDataset(SmallOptions(multi_dir.path(), DataFormat::kMultiSlot));
  REQUIRE(rank.ok());
  REQUIRE(multi.ok());
  CHECK(rank->bayes_auc == multi->bayes_auc);
  auto options = DatagenDataOptions(SmallOptions("", DataFormat::kRankDnn));
  auto multi_options = DatagenDataOptions(SmallOptions("", DataFormat::kMultiSlot));
  REQUIRE(options.ok());
  REQUIRE(multi_options.ok());
  CHECK(LoadAll(*options, rank->train_files) == LoadAll(*multi_options, multi->train_files));
}

TEST_CASE("generation is deterministic with the seed", "[datagen]") {
  data::testing::TempDir a, b, c;
  DatagenOptions options = SmallOptions(a.path(), DataFormat::kRankDnn);
  const auto first = GenerateDataset(options);
  options.out_dir = b.path();
  const auto second = GenerateDataset(options);
  options.out_dir = c.path();
  options.seed = 18;
  const auto other = GenerateDataset(options);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  REQUIRE(other.ok());
  CHECK(first->bayes_auc == second->bayes_auc);
  for (size_t i = 0; i < first->train_files.size(); ++i) {
    CHECK(Slurp(first->train_files[i]) == Slurp(second->train_files[i]));
    CHECK(Slurp(first->train_files[i]) != Slurp(other->train_files[i]));
  }
  CHECK(Slurp(first->test_files[0]) == Slurp(second->test_files[0]));
}

TEST_CASE("ids are Zipf-skewed and never shared between slots", "[datagen]") {
  data::testing::TempDir dir;
  DatagenOptions options = SmallOptions(dir.path(), DataFormat::kRankDnn);
  options.vocab_size = 1000;
  options.zipf_exponent = 1.2;
  const auto report = GenerateDataset(options);
  REQUIRE(report.ok());
  auto data = DatagenDataOptions(options);
  REQUIRE(data.ok());
  const data::Batch train = LoadAll(*data, report->train_files);
  for (size_t s = 0; s < train.num_slots(); ++s) {
    std::map<uint64_t, int> counts;
    for (uint64_t id : train.slots[s].ids) ++counts[id];
    // Slot s owns ids [s * vocab, (s + 1) * vocab).
    CHECK(counts.begin()->first >= s * options.vocab_size);
    CHECK(counts.rbegin()->first < (s + 1) * options.vocab_size);
    // Rank 1 is the most frequent id: P(1) = (1 - 2^-0.2) / (1 - 1001^-0.2) = 0.173 under the
    // continuous approximation (density x^-1.2 on [1, 1001)).
    const auto top = std::max_element(counts.begin(), counts.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
    CHECK(top->first == s * options.vocab_size);
    CHECK(top->second > 0.16 * 16000);
    CHECK(top->second < 0.19 * 16000);
  }
}

TEST_CASE("the data-limited AUCs", "[datagen]") {
  data::testing::TempDir dir;
  DatagenOptions options = SmallOptions(dir.path(), DataFormat::kRankDnn);
  // A tiny vocabulary: every id of the test rows was seen >= 100 times in training, so every
  // limit is the true model's AUC on the test rows.
  options.vocab_size = 5;
  auto report = GenerateDataset(options);
  REQUIRE(report.ok());
  REQUIRE(report->data_limited_auc.size() == std::size(kDataLimitThresholds));
  for (size_t t = 0; t < std::size(kDataLimitThresholds); ++t) {
    CHECK(report->data_limited_auc[t].first == kDataLimitThresholds[t]);
    CHECK(report->data_limited_auc[t].second == report->bayes_test_auc);
  }

  // A huge vocabulary: (almost) no test id was seen in training, so even k = 1 knows only the
  // dense features and loses most of the Bayes AUC; larger k never know more.
  options.vocab_size = uint64_t{1} << 40;
  options.zipf_exponent = 0;
  report = GenerateDataset(options);
  REQUIRE(report.ok());
  CHECK(report->data_limited_auc[0].second < report->bayes_test_auc - 0.05);
  CHECK(report->data_limited_auc[0].second > 0.55);  // the dense features still rank
  for (size_t t = 1; t < report->data_limited_auc.size(); ++t) {
    CHECK(report->data_limited_auc[t].second <= report->data_limited_auc[t - 1].second);
  }

  // The default shape: the limits fall with k, all under the Bayes AUC.
  options = SmallOptions(dir.path(), DataFormat::kRankDnn);
  report = GenerateDataset(options);
  REQUIRE(report.ok());
  CHECK(report->data_limited_auc[0].second < report->bayes_test_auc);
  for (size_t t = 1; t < report->data_limited_auc.size(); ++t) {
    CHECK(report->data_limited_auc[t].second < report->data_limited_auc[t - 1].second);
  }

  // No test rows: no limits.
  options.test_fraction = 0;
  report = GenerateDataset(options);
  REQUIRE(report.ok());
  CHECK(report->data_limited_auc.empty());
}

// The estimation limit: every id's parameters at their posterior mean given the training
// rows (and the true rest). Ids seen a thousand times are still known only to about
// 1/sqrt(0.16 * 1000) ~ 0.08 in weight (prior std ~0.2), so it stays under the k=1 limit
// and closes on it as the rows grow; with rare ids it lands between the k-limits.
TEST_CASE("the estimation limit", "[datagen]") {
  data::testing::TempDir dir;
  DatagenOptions options = SmallOptions(dir.path(), DataFormat::kRankDnn);
  auto report = GenerateDataset(options);
  REQUIRE(report.ok());
  CHECK(report->estimation_limit_auc == 0);  // not asked for

  options.estimation_limit = true;
  options.vocab_size = 5;  // 16000 training rows: every id seen >= 1000 times
  report = GenerateDataset(options);
  REQUIRE(report.ok());
  const double k1 = report->data_limited_auc[0].second;
  const double few_rows_gap = k1 - report->estimation_limit_auc;
  INFO("k=1 " << k1 << " estimation " << report->estimation_limit_auc);
  CHECK(few_rows_gap > 0.005);  // (observed 0.011) an oracle told the true values would match k=1
  CHECK(few_rows_gap < 0.03);

  options.rows = 100000;  // 80000 training rows: the posteriors narrow, the gap closes
  report = GenerateDataset(options);
  REQUIRE(report.ok());
  const double many_rows_gap = report->data_limited_auc[0].second - report->estimation_limit_auc;
  INFO("k=1 " << report->data_limited_auc[0].second << " estimation " << report->estimation_limit_auc);
  CHECK(many_rows_gap >= 0);
  CHECK(many_rows_gap < few_rows_gap / 3);  // (observed 0.001)

  // Rare ids: the posterior means know less than the true weights of the ids seen >= 3
  // times, more than the true weights of only those seen >= 100 times.
  options = SmallOptions(dir.path(), DataFormat::kRankDnn);
  options.estimation_limit = true;
  report = GenerateDataset(options);
  REQUIRE(report.ok());
  INFO("k=3 " << report->data_limited_auc[1].second << " k=100 " << report->data_limited_auc[3].second << " estimation "
              << report->estimation_limit_auc);
  CHECK(report->estimation_limit_auc < report->data_limited_auc[1].second);
  CHECK(report->estimation_limit_auc > report->data_limited_auc[3].second);
}

// FNV-1a 64 of `bytes`: a fingerprint of a generated file.
uint64_t Fingerprint(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string FirstLine(const std::string& path) {
  const std::string text = Slurp(path);
  return text.substr(0, text.find('\n'));
}

// Without `conversion` the generator writes exactly what it wrote before the conversion
// label existed: these fingerprints and lines were taken from fleetps-datagen before it
// (--rows 40 --seed 5 --test-fraction 0.25 --train-files 2 --slots 3 --vocab 50, dense 2 or
// for slot_dnn 0, the last case --history-len 3).
TEST_CASE("without conversion the files are those of earlier releases, byte for byte", "[datagen]") {
  struct Case {
    DataFormat format;
    uint32_t history_len;
    std::string first_line;
    uint64_t train0, train1, test, yaml;
  };
  const Case cases[] = {
      {DataFormat::kRankDnn, 0, "click:0 dense_feature:0.13987 dense_feature:0.7646 1:13 2:50 3:115",
       0x711a402dcde640ebULL, 0xa660d3acf60507e3ULL, 0x76fec341f098ae33ULL, 0xfbf75be97535e6f5ULL},
      {DataFormat::kMultiSlot, 0, "1 0 1 13 1 50 1 115 2 0.13987 0.7646", 0xab27f645b6231589ULL, 0x420010dccf520e31ULL,
       0x5eec76ee5653b6a3ULL, 0x37433c4c1dc93c2bULL},
      {DataFormat::kSlotDnn, 0, "0:1 13:2 50:3 115:4", 0x66a39c8e05ec084fULL, 0x13b19f758c96288eULL,
       0xac0d8f3063b43d0fULL, 0x7816f54ad2c94bd7ULL},
      {DataFormat::kRankDnn, 3, "click:1 dense_feature:0.48181 dense_feature:0.08555 1:24 2:50 3:7 3:24",
       0x2cb5e0dbf8a1524dULL, 0xaa19a265d74c183cULL, 0x9828565a69f94e24ULL, 0xfbf75be97535e6f5ULL},
  };
  for (const Case& c : cases) {
    INFO(config::DataFormatName(c.format) << " history_len " << c.history_len);
    data::testing::TempDir dir;
    DatagenOptions o;
    o.format = c.format;
    o.rows = 40;
    o.seed = 5;
    o.test_fraction = 0.25;
    o.train_files = 2;
    o.sparse_slots = 3;
    o.dense_dim = c.format == DataFormat::kSlotDnn ? 0 : 2;
    o.vocab_size = 50;
    o.history_len = c.history_len;
    o.out_dir = dir.path();
    const auto report = GenerateDataset(o);
    REQUIRE(report.ok());
    CHECK(FirstLine(report->train_files[0]) == c.first_line);
    CHECK(Fingerprint(Slurp(report->train_files[0])) == c.train0);
    CHECK(Fingerprint(Slurp(report->train_files[1])) == c.train1);
    CHECK(Fingerprint(Slurp(report->test_files[0])) == c.test);
    CHECK(Fingerprint(Slurp(report->config_file)) == c.yaml);
    CHECK(report->conversion_mean == 0);
    CHECK(report->bayes_conversion_auc == 0);
  }
}

// Every row of `batch`'s true P(click) and P(click) * P(conversion | click).
std::pair<std::vector<double>, std::vector<double>> TrueScores(const DatagenOptions& options,
                                                               const data::Batch& batch) {
  std::pair<std::vector<double>, std::vector<double>> scores;
  for (const LabelProbabilities& p : TrueLabelProbabilities(options, batch)) {
    scores.first.push_back(p.click);
    scores.second.push_back(p.click * p.cvr);
  }
  return scores;
}

// Column `l` of a batch's labels.
std::vector<float> LabelColumn(const data::Batch& batch, size_t l) {
  std::vector<float> column;
  for (size_t r = 0; r < batch.size(); ++r) column.push_back(batch.Labels(r)[l]);
  return column;
}

TEST_CASE("conversion: a second label, only after a click, for about a quarter of the clicks", "[datagen]") {
  data::testing::TempDir dir;
  DatagenOptions options = SmallOptions(dir.path(), DataFormat::kRankDnn);
  options.conversion = true;
  const auto report = GenerateDataset(options);
  REQUIRE(report.ok());
  CHECK(FirstLine(report->train_files[0]).starts_with("click:"));
  CHECK(FirstLine(report->train_files[0]).find(" conversion:") == 7);

  // data.yaml names both label slots.
  auto root = config::LoadYamlFile(report->config_file);
  REQUIRE(root.ok());
  config::DataOptions data;
  REQUIRE(config::ParseDataOptions((*root)["data"], config::YamlContext{report->config_file, "data"}, &data).ok());
  CHECK(data.label_slots == std::vector<std::string>{"click", "conversion"});
  auto expected = DatagenDataOptions(options);
  REQUIRE(expected.ok());
  CHECK(expected->label_slots == data.label_slots);

  std::vector<std::string> files = report->train_files;
  files.push_back(report->test_files[0]);
  const data::Batch all = LoadAll(data, files);
  REQUIRE(all.size() == 20000);
  REQUIRE(all.num_labels == 2);
  const std::vector<float> clicks = LabelColumn(all, 0), conversions = LabelColumn(all, 1);
  double num_clicks = 0, num_conversions = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    if (conversions[r] == 1.0f) CHECK(clicks[r] == 1.0f);  // conversion implies click
    num_clicks += clicks[r];
    num_conversions += conversions[r];
  }
  const double rate = num_conversions / num_clicks;
  INFO("conversions " << num_conversions << " of " << num_clicks << " clicks");
  CHECK(rate >= 0.2);
  CHECK(rate <= 0.3);
  CHECK(report->conversion_rate == Approx(rate).epsilon(1e-12));
  CHECK(report->conversion_mean == Approx(num_conversions / 20000).epsilon(1e-12));
  CHECK(report->label_mean == Approx(num_clicks / 20000).epsilon(1e-12));

  // The Bayes AUCs, recomputed from the files read back and the true model.
  const auto [p_click, p_conversion] = TrueScores(options, all);
  CHECK(report->bayes_auc == Approx(*ExactAuc(p_click, clicks)).epsilon(1e-12));
  CHECK(report->bayes_conversion_auc == Approx(*ExactAuc(p_conversion, conversions)).epsilon(1e-12));
  const data::Batch test = LoadAll(data, report->test_files);
  const auto [test_click, test_conversion] = TrueScores(options, test);
  CHECK(report->bayes_conversion_test_auc == Approx(*ExactAuc(test_conversion, LabelColumn(test, 1))).epsilon(1e-12));
  // P(conversion) ranks the conversions well, better than P(click) alone does.
  INFO("bayes conversion auc " << report->bayes_conversion_auc << ", cvr auc " << report->bayes_cvr_auc);
  CHECK(report->bayes_conversion_auc > 0.75);
  CHECK(report->bayes_conversion_auc > *ExactAuc(p_click, conversions));
  CHECK(report->bayes_cvr_auc > 0.6);
  CHECK(report->bayes_cvr_auc < report->bayes_conversion_auc);
}

TEST_CASE("conversion leaves the features and clicks as they are, in every format", "[datagen]") {
  for (DataFormat format : {DataFormat::kRankDnn, DataFormat::kMultiSlot, DataFormat::kSlotDnn}) {
    INFO(config::DataFormatName(format));
    data::testing::TempDir plain_dir, conversion_dir;
    DatagenOptions options = SmallOptions(plain_dir.path(), format);
    options.rows = 3000;
    const auto plain = GenerateDataset(options);
    options.out_dir = conversion_dir.path();
    options.conversion = true;
    const auto with = GenerateDataset(options);
    REQUIRE(plain.ok());
    REQUIRE(with.ok());
    CHECK(plain->bayes_auc == with->bayes_auc);
    CHECK(plain->label_mean == with->label_mean);
    CHECK(plain->data_limited_auc == with->data_limited_auc);

    auto data = DatagenDataOptions(options);
    REQUIRE(data.ok());
    const data::Batch two = LoadAll(*data, with->train_files);
    options.conversion = false;
    auto plain_data = DatagenDataOptions(options);
    REQUIRE(plain_data.ok());
    const data::Batch one = LoadAll(*plain_data, plain->train_files);
    CHECK(two.num_labels == 2);
    CHECK(LabelColumn(two, 0) == one.labels);
    CHECK(two.dense == one.dense);
    CHECK(two.slots == one.slots);

    const std::string line = FirstLine(with->train_files[0]);
    INFO(line);
    const float click = one.labels[0], conversion = two.Labels(0)[1];
    const std::string c = click == 1.0f ? "1" : "0", v = conversion == 1.0f ? "1" : "0";
    if (format == DataFormat::kRankDnn) CHECK(line.starts_with("click:" + c + " conversion:" + v + " "));
    if (format == DataFormat::kMultiSlot) CHECK(line.starts_with("1 " + c + " 1 " + v + " "));
    if (format == DataFormat::kSlotDnn) CHECK(line.starts_with(c + ":1 " + v + ":conversion "));
  }
}

TEST_CASE("bad datagen options are InvalidArgument", "[datagen]") {
  data::testing::TempDir dir;
  DatagenOptions options = SmallOptions(dir.path(), DataFormat::kSlotDnn);
  options.dense_dim = 13;
  CHECK(GenerateDataset(options).status().IsInvalidArgument());
  options = SmallOptions(dir.path(), DataFormat::kRankDnn);
  options.rows = 0;
  CHECK(GenerateDataset(options).status().IsInvalidArgument());
  options = SmallOptions(dir.path(), DataFormat::kRankDnn);
  options.test_fraction = 1.0;
  CHECK(GenerateDataset(options).status().IsInvalidArgument());
}

}  // namespace
}  // namespace fleetps::datagen
