// The three line formats against the PaddleRec samples, hand-built lines and each other.

#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "trainer/data/file_reader.h"
#include "trainer/data/format_util.h"
#include "trainer/data/line_format.h"
#include "test/trainer/data/data_test_util.h"

namespace fleetps::data {
namespace {

using testing::kRankDnnSample;
using testing::kSlotDnnSample;
using testing::ReadLines;

Example ParseOk(const LineFormat& format, const std::string& line) {
  Example example;
  const Status status = format.Parse(line, &example);
  INFO(line << "\n-> " << status.ToString());
  REQUIRE(status.ok());
  return example;
}

std::string ParseError(const LineFormat& format, const std::string& line) {
  Example example;
  const Status status = format.Parse(line, &example);
  INFO(line);
  REQUIRE(status.IsInvalidArgument());
  return status.message();
}

// `line` with the first occurrence of `from` replaced by `to`.
std::string Replace(std::string line, const std::string& from, const std::string& to) {
  const size_t pos = line.find(from);
  REQUIRE(pos != std::string::npos);
  return line.replace(pos, from.size(), to);
}

TEST_CASE("rank_dnn parses the first sample line exactly", "[data][format]") {
  const auto format = MakeLineFormat(testing::RankDnnOptions());
  const Example ex = ParseOk(*format, ReadLines(kRankDnnSample).at(0));
  CHECK(ex.labels[0] == 0.0f);
  const std::vector<float> dense{
      0.0f, 0.00497512437811f, 0.05f, 0.08f, 0.207421875f, 0.028f, 0.35f, 0.08f, 0.082f, 0.0f, 0.4f, 0.0f, 0.08f};
  CHECK(ex.dense == dense);
  REQUIRE(ex.slots.size() == 26);
  CHECK(ex.slots[0] == std::vector<uint64_t>{737395});   // 1:737395
  CHECK(ex.slots[1] == std::vector<uint64_t>{210498});   // 2:210498
  CHECK(ex.slots[7] == std::vector<uint64_t>{67180});    // 8:67180
  CHECK(ex.slots[25] == std::vector<uint64_t>{306163});  // 26:306163
}

TEST_CASE("rank_dnn sample: 80 lines, 57 click:0 and 23 click:1", "[data][format]") {
  const auto format = MakeLineFormat(testing::RankDnnOptions());
  int zeros = 0, ones = 0;
  for (const auto& line : ReadLines(kRankDnnSample)) {
    const Example ex = ParseOk(*format, line);
    (ex.labels[0] == 1.0f ? ones : zeros)++;
    for (const auto& ids : ex.slots) REQUIRE(ids.size() == 1);
  }
  CHECK(zeros == 57);
  CHECK(ones == 23);
}

TEST_CASE("rank_dnn with a subset of slots ignores the others", "[data][format]") {
  const auto format = MakeLineFormat(testing::OptionsFromYaml("sparse_slots: ['26', '3']"));
  const Example ex = ParseOk(*format, ReadLines(kRankDnnSample).at(0));
  REQUIRE(ex.slots.size() == 2);
  CHECK(ex.slots[0] == std::vector<uint64_t>{306163});
  CHECK(ex.slots[1] == std::vector<uint64_t>{903564});
}

TEST_CASE("rank_dnn rejects malformed lines with the reason", "[data][format]") {
  const auto format = MakeLineFormat(testing::RankDnnOptions());
  const std::string good = ReadLines(kRankDnnSample).at(0);
  CHECK(ParseError(*format, Replace(good, "dense_feature:0.05", "dense_feature:abc")) ==
        "token 4 \"dense_feature:abc\": \"abc\" is not a number");
  CHECK(ParseError(*format, Replace(good, "dense_feature:0.05", "dense_feature:inf")) ==
        "token 4 \"dense_feature:inf\": \"inf\" is not a finite number");
  CHECK(ParseError(*format, Replace(good, " 7:906116", "")) == "missing sparse slot \"7\"");
  CHECK(ParseError(*format, Replace(good, "dense_feature:0.05 ", "")) ==
        "dense slot \"dense_feature\" has 12 values, expected 13");
  CHECK(ParseError(*format, Replace(good, "1:737395", "dense_feature:1 1:737395")) ==
        "token 15 \"dense_feature:1\": dense slot \"dense_feature\" has more than 13 values");
  CHECK(ParseError(*format, Replace(good, "1:737395", "1:18446744073709551616")) ==
        "token 15 \"1:18446744073709551616\": \"18446744073709551616\" is out of the uint64 range");
  CHECK(ParseError(*format, Replace(good, "1:737395", "1:-5")) ==
        "token 15 \"1:-5\": \"-5\" is not an unsigned integer");
  CHECK(ParseError(*format, Replace(good, "1:737395", "1:12x")) ==
        "token 15 \"1:12x\": \"12x\" is not an unsigned integer");
  CHECK(ParseError(*format, Replace(good, "click:0", "click0")) == "token 1 \"click0\": expected name:value");
  CHECK(ParseError(*format, Replace(good, "click:0", "click:2")) == "token 1 \"click:2\": label \"2\" is not 0 or 1");
  CHECK(ParseError(*format, Replace(good, "click:0", "click:0 click:1")) ==
        "token 2 \"click:1\": label slot \"click\" appears twice");
  CHECK(ParseError(*format, Replace(good, "click:0 ", "")) == "missing label slot \"click\"");
  // The largest uint64 is a valid id.
  CHECK(ParseOk(*format, Replace(good, "1:737395", "1:18446744073709551615")).slots[0][0] == 18446744073709551615ull);
}

TEST_CASE("slot_dnn parses the first demo line: label and full-range feasigns", "[data][format]") {
  const auto format = MakeLineFormat(testing::SlotDnnOptions());  // slots "2".."301"
  const Example ex = ParseOk(*format, ReadLines(kSlotDnnSample).at(0));
  CHECK(ex.labels[0] == 0.0f);  // first token 0:1
  CHECK(ex.dense.empty());
  REQUIRE(ex.slots.size() == 300);
  CHECK(ex.slots[0] == std::vector<uint64_t>{2749936732168327157ull});                           // slot 2
  CHECK(ex.slots[1] == std::vector<uint64_t>{4351255118977467729ull});                           // slot 3
  CHECK(ex.slots[27] == std::vector<uint64_t>{16543128959394097760ull, 10003478084564939135ull,  // slot 29
                                              1507935251765915611ull, 9206016659941245237ull, 6387680809825609181ull});
  CHECK(ex.slots[62] == std::vector<uint64_t>{4769355938127491502ull, 14050812446649862810ull});  // slot 64
  CHECK(ex.slots[299] == std::vector<uint64_t>{13892452129742630508ull});                         // slot 301
  size_t ids = 0, empty_slots = 0;
  for (const auto& slot : ex.slots) {
    ids += slot.size();
    empty_slots += slot.empty();
  }
  CHECK(ids == 459);         // 460 tokens minus the label
  CHECK(empty_slots == 39);  // 261 of the 300 slots occur in the line
}

TEST_CASE("slot_dnn demo_10: 6 negatives, 4 positives, 4537 feasigns", "[data][format]") {
  const auto format = MakeLineFormat(testing::SlotDnnOptions());
  int ones = 0;
  size_t ids = 0;
  for (const auto& line : ReadLines(kSlotDnnSample)) {
    const Example ex = ParseOk(*format, line);
    ones += ex.labels[0] == 1.0f;
    for (const auto& slot : ex.slots) ids += slot.size();
  }
  CHECK(ones == 4);
  CHECK(ids == 4537);
}

TEST_CASE("slot_dnn ignores slots outside the configured list", "[data][format]") {
  const auto format = MakeLineFormat(testing::OptionsFromYaml("data_format: slot_dnn\nsparse_slots: ['64', '7777']"));
  const Example ex = ParseOk(*format, ReadLines(kSlotDnnSample).at(0));
  REQUIRE(ex.slots.size() == 2);
  CHECK(ex.slots[0] == std::vector<uint64_t>{4769355938127491502ull, 14050812446649862810ull});
  CHECK(ex.slots[1].empty());  // absent slot: empty, not an error
}

TEST_CASE("slot_dnn rejects malformed lines with the reason", "[data][format]") {
  const auto format = MakeLineFormat(testing::SlotDnnOptions());
  CHECK(ParseError(*format, "1:1 12345 7:3") == "token 2 \"12345\": expected value:slot");
  CHECK(ParseError(*format, "5:3 7:4") == "missing label slot \"1\"");
  CHECK(ParseError(*format, "1:1 x7:3") == "token 2 \"x7:3\": \"x7\" is not an unsigned integer");
  CHECK(ParseError(*format, "1:1 99999999999999999999:3") ==
        "token 2 \"99999999999999999999:3\": \"99999999999999999999\" is out of the uint64 range");
}

TEST_CASE("multislot parses count-prefixed lines", "[data][format]") {
  const auto format = MakeLineFormat(testing::OptionsFromYaml(R"(
data_format: multislot
dense_input_dim: 2
sparse_slots: [a, b, c]
multislot_slots: [click, a, dense_feature, b, c]
)"));
  const Example ex = ParseOk(*format, "1 1 2 11 12 2 0.5 -0.25 0 1 18446744073709551615");
  CHECK(ex.labels[0] == 1.0f);
  CHECK(ex.dense == std::vector<float>{0.5f, -0.25f});
  CHECK(ex.slots == std::vector<std::vector<uint64_t>>{{11, 12}, {}, {18446744073709551615ull}});

  CHECK(ParseError(*format, "2 1 1 2 11 12 2 0.5 -0.25 0 1 7") ==
        "token 1 \"2\": slot \"click\" has count 2, expected 1");
  CHECK(ParseError(*format, "1 1 2 11 12 3 0.5 -0.25 1 0 1 7") ==
        "token 6 \"3\": slot \"dense_feature\" has count 3, expected 2");
  CHECK(ParseError(*format, "1 1 2 11 12 2 0.5 -0.25 0 3 7") == "line ends inside slot \"c\": 1 of 3 values");
  CHECK(ParseError(*format, "1 1 2 11 12 2 0.5 -0.25 0") == "line ends before slot \"c\"");
  CHECK(ParseError(*format, "1 1 2 11 12 2 0.5 -0.25 0 1 7 8") ==
        "token 12 \"8\": unexpected token after the last slot");
  CHECK(ParseError(*format, "1 1 x 11 12 2 0.5 -0.25 0 1 7") ==
        "token 3 \"x\": slot \"a\" count: \"x\" is not an unsigned integer");
  CHECK(ParseError(*format, "1 1 2 11 1.5 2 0.5 -0.25 0 1 7") ==
        "token 5 \"1.5\": slot \"a\": \"1.5\" is not an unsigned integer");
  CHECK(ParseError(*format, "1 0.5 2 11 12 2 0.5 -0.25 0 1 7") ==
        "token 2 \"0.5\": slot \"click\": label \"0.5\" is not 0 or 1");
}

TEST_CASE("rank_dnn sample converted to multislot parses to identical examples", "[data][format]") {
  const auto rank_dnn = MakeLineFormat(testing::RankDnnOptions());
  const auto multislot = MakeLineFormat(testing::MultiSlotOptions());
  std::string line;
  for (const auto& rank_line : ReadLines(kRankDnnSample)) {
    const Example ex = ParseOk(*rank_dnn, rank_line);
    line.clear();
    multislot->Write(ex, &line);
    CHECK(ParseOk(*multislot, line) == ex);
  }
  // The first converted line, spelled out: label, 26 one-id slots, 13 dense floats.
  line.clear();
  multislot->Write(ParseOk(*rank_dnn, ReadLines(kRankDnnSample).at(0)), &line);
  INFO(line);
  CHECK(line.starts_with("1 0 1 737395 1 210498 1 903564 "));
  CHECK(line.ends_with(" 1 306163 13 0 0.0049751243 0.05 0.08 0.20742187 0.028 0.35 0.08 0.082 0 0.4 0 0.08"));
}

TEST_CASE("Write is the inverse of Parse for every format", "[data][format]") {
  const auto check_round_trip = [](const config::DataOptions& options, const std::string& sample) {
    const auto format = MakeLineFormat(options);
    std::string line;
    for (const auto& original : ReadLines(sample)) {
      const Example ex = ParseOk(*format, original);
      line.clear();
      format->Write(ex, &line);
      CHECK(ParseOk(*format, line) == ex);
    }
  };
  check_round_trip(testing::RankDnnOptions(), kRankDnnSample);
  check_round_trip(testing::SlotDnnOptions(), kSlotDnnSample);

  // rank_dnn writes the sample's own spelling back where the float text is shortest.
  const auto rank_dnn = MakeLineFormat(testing::RankDnnOptions());
  std::string line;
  rank_dnn->Write(ParseOk(*rank_dnn, ReadLines(kRankDnnSample).at(0)), &line);
  INFO(line);
  CHECK(line.starts_with("click:0 dense_feature:0 dense_feature:0.0049751243 dense_feature:0.05 "));
  CHECK(line.ends_with(" 25:499868 26:306163"));
}

}  // namespace
}  // namespace fleetps::data

namespace fleetps::data {
namespace {

TEST_CASE("SlotIndex finds names that share a length and first and last bytes, and nothing else", "[data][format]") {
  // "a1z", "a2z", ..., "a9z" all start at the same table entry; so do the 4-byte "abyz", "acyz".
  config::DataOptions options = testing::RankDnnOptions();
  options.label_slots = {"a0z", "a0y"};
  options.dense_dim = 0;
  options.sparse_slots = {"a1z", "a2z", "a3z", "a4z", "a5z", "a6z", "a7z", "a8z", "a9z", "abyz", "acyz", "1", "26"};
  const SlotIndex index(options);
  CHECK(index.Find("a0z").kind == SlotRole::kLabel);
  CHECK(index.Find("a0y").kind == SlotRole::kLabel);
  CHECK(index.Find("a0y").index == 1);
  for (uint32_t i = 0; i < options.sparse_slots.size(); ++i) {
    const SlotRole role = index.Find(options.sparse_slots[i]);
    INFO(options.sparse_slots[i]);
    CHECK(role.kind == SlotRole::kSparse);
    CHECK(role.index == i);
  }
  for (const char* absent : {"aaz", "a1y", "b1z", "adyz", "abxz", "a1", "2", "16", "", "dense_feature", "a1za"}) {
    INFO(absent);
    CHECK(index.Find(absent).kind == SlotRole::kIgnored);
  }
}

TEST_CASE("SameShortString agrees with string equality", "[data][format]") {
  const std::vector<std::string> names = {
      "",      "1",    "2", "12", "21", "11", "abc", "abd", "acc", "dense_feature", "dense_featurf", "dense_gfeature",
      "click", "clack"};
  for (const auto& a : names) {
    for (const auto& b : names) {
      INFO(a << " vs " << b);
      CHECK(SameShortString(a, b) == (a == b));
    }
  }
}

// ---- two label slots (click, conversion) ----------------------------------------------

TEST_CASE("rank_dnn with two label slots reads and writes both", "[data][format][labels]") {
  const auto format = MakeLineFormat(testing::OptionsFromYaml("label_slots: [click, conversion]"));
  const std::string sample = ReadLines(kRankDnnSample).at(0);  // click:0 dense_feature:0 ...
  const std::string good = Replace(sample, "click:0 ", "click:0 conversion:1 ");
  Example ex = ParseOk(*format, good);
  CHECK(ex.labels == std::vector<float>{0, 1});
  CHECK(ex.slots[0] == std::vector<uint64_t>{737395});
  // A label slot may stand anywhere in the line.
  CHECK(ParseOk(*format, Replace(sample, "click:0 ", "") + " conversion:0 click:1").labels == std::vector<float>{1, 0});

  std::string line;
  format->Write(ex, &line);
  CHECK(line.starts_with("click:0 conversion:1 dense_feature:0 dense_feature:0.0049751243 "));
  CHECK(ParseOk(*format, line) == ex);
  for (float click : {0.0f, 1.0f}) {
    for (float conversion : {0.0f, 1.0f}) {
      ex.labels = {click, conversion};
      line.clear();
      format->Write(ex, &line);
      CHECK(ParseOk(*format, line) == ex);
    }
  }

  CHECK(ParseError(*format, sample) == "missing label slot \"conversion\"");
  CHECK(ParseError(*format, Replace(good, "click:0 ", "")) == "missing label slot \"click\"");
  CHECK(ParseError(*format, Replace(good, "conversion:1", "conversion:1 conversion:0")) ==
        "token 3 \"conversion:0\": label slot \"conversion\" appears twice");
  CHECK(ParseError(*format, Replace(good, "conversion:1", "conversion:2")) ==
        "token 2 \"conversion:2\": label \"2\" is not 0 or 1");
  CHECK(ParseError(*format, Replace(good, "conversion:1", "conversion:0.5")) ==
        "token 2 \"conversion:0.5\": label \"0.5\" is not 0 or 1");
  // A one-label reader skips the conversion token: a slot it does not know.
  CHECK(ParseOk(*MakeLineFormat(testing::RankDnnOptions()), good).labels == std::vector<float>{0});
}

TEST_CASE("slot_dnn with two label slots reads and writes both", "[data][format][labels]") {
  const auto format = MakeLineFormat(testing::OptionsFromYaml("data_format: slot_dnn\nlabel_slots: ['1', conversion]"));
  Example ex = ParseOk(*format, "1:1 0:conversion 5:3 7:4 8:4");
  CHECK(ex.labels == std::vector<float>{1, 0});
  CHECK(ex.slots[1] == std::vector<uint64_t>{5});     // slot 3
  CHECK(ex.slots[2] == std::vector<uint64_t>{7, 8});  // slot 4
  std::string line;
  format->Write(ex, &line);
  CHECK(line == "1:1 0:conversion 5:3 7:4 8:4");
  CHECK(ParseOk(*format, line) == ex);

  CHECK(ParseError(*format, "1:1 5:3") == "missing label slot \"conversion\"");
  CHECK(ParseError(*format, "1:1 1:conversion 5:3 0:conversion") ==
        "token 4 \"0:conversion\": label slot \"conversion\" appears twice");
  CHECK(ParseError(*format, "1:1 7:conversion") == "token 2 \"7:conversion\": label \"7\" is not 0 or 1");
}

TEST_CASE("multislot with two label slots reads and writes both", "[data][format][labels]") {
  // Default order: click, conversion, a, b, dense_feature.
  const auto format = MakeLineFormat(testing::OptionsFromYaml(
      "data_format: multislot\nlabel_slots: [click, conversion]\ndense_input_dim: 2\nsparse_slots: [a, b]"));
  Example ex = ParseOk(*format, "1 1 1 0 2 11 12 0 2 0.5 -0.25");
  CHECK(ex.labels == std::vector<float>{1, 0});
  CHECK(ex.dense == std::vector<float>{0.5f, -0.25f});
  CHECK(ex.slots == std::vector<std::vector<uint64_t>>{{11, 12}, {}});
  std::string line;
  format->Write(ex, &line);
  CHECK(line == "1 1 1 0 2 11 12 0 2 0.5 -0.25");
  CHECK(ParseOk(*format, line) == ex);

  CHECK(ParseError(*format, "1 1 2 0 1 2 11 12 0 2 0.5 -0.25") ==
        "token 3 \"2\": slot \"conversion\" has count 2, expected 1");
  CHECK(ParseError(*format, "1 1 1 3 2 11 12 0 2 0.5 -0.25") ==
        "token 4 \"3\": slot \"conversion\": label \"3\" is not 0 or 1");
  // A line without the conversion slot: its first sparse count is read as the label's.
  CHECK(ParseError(*format, "1 1 2 11 12 0 2 0.5 -0.25") ==
        "token 3 \"2\": slot \"conversion\" has count 2, expected 1");

  // In an explicit order the labels go where it puts them.
  const auto ordered = MakeLineFormat(testing::OptionsFromYaml(
      "data_format: multislot\nlabel_slots: [click, conversion]\ndense_input_dim: 0\nsparse_slots: [a]\n"
      "multislot_slots: [conversion, a, click]"));
  ex = ParseOk(*ordered, "1 1 1 7 1 0");
  CHECK(ex.labels == std::vector<float>{0, 1});  // label_slots order: click, conversion
  line.clear();
  ordered->Write(ex, &line);
  CHECK(line == "1 1 1 7 1 0");
}

TEST_CASE("two-label lines convert between the formats to identical examples", "[data][format][labels]") {
  const auto rank_dnn = MakeLineFormat(testing::OptionsFromYaml("label_slots: [click, conversion]"));
  const auto multislot =
      MakeLineFormat(testing::OptionsFromYaml("data_format: multislot\nlabel_slots: [click, conversion]"));
  std::string line;
  int index = 0;
  for (const auto& sample : ReadLines(kRankDnnSample)) {
    // conversion = click on every third line
    const std::string conversion = index++ % 3 == 0 && sample.starts_with("click:1") ? "1" : "0";
    const Example ex = ParseOk(*rank_dnn, sample + " conversion:" + conversion);
    line.clear();
    multislot->Write(ex, &line);
    CHECK(ParseOk(*multislot, line) == ex);
    line.clear();
    rank_dnn->Write(ex, &line);
    CHECK(ParseOk(*rank_dnn, line) == ex);
  }
}

TEST_CASE("a bad second label fails the read with file:line", "[data][format][labels]") {
  const config::DataOptions options = testing::OptionsFromYaml("label_slots: [click, conversion]");
  const auto format = MakeLineFormat(options);
  const std::string good = Replace(ReadLines(kRankDnnSample).at(0), "click:0 ", "click:0 conversion:0 ");
  testing::TempDir dir;
  for (const auto& [bad, message] : std::vector<std::pair<std::string, std::string>>{
           {Replace(good, "conversion:0 ", ""), ":2: missing label slot \"conversion\""},
           {Replace(good, "conversion:0", "conversion:0 conversion:1"),
            ":2: token 3 \"conversion:1\": label slot \"conversion\" appears twice"},
           {Replace(good, "conversion:0", "conversion:-1"),
            ":2: token 2 \"conversion:-1\": label \"-1\" is not 0 or 1"},
       }) {
    const std::string path = dir.Write("part-0", {good, bad, good});
    ReadProgress progress;
    FileReader reader(*format, /*skip_bad_lines=*/false, &progress);
    int read = 0;
    const Status st = reader.ReadFile(path, [&](const Example& ex) {
      CHECK(ex.labels.size() == 2);
      ++read;
      return Status::OK();
    });
    REQUIRE(st.IsInvalidArgument());
    CHECK(st.message() == path + message);
    CHECK(read == 1);
  }
}

}  // namespace
}  // namespace fleetps::data
