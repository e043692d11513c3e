// FileReader: plain and gzip-compressed data files (PaddleRec's rank_dnn sample), the lines
// and the errors they give.

#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "test/trainer/data/data_test_util.h"
#include "trainer/data/file_reader.h"

namespace fleetps::data {
namespace {

// Writes `text` to path as one gzip member (appended as another member with `append`).
void WriteGzip(const std::string& path, const std::string& text, bool append = false) {
  gzFile gz = gzopen(path.c_str(), append ? "ab" : "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(gz) == Z_OK);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string Joined(const std::vector<std::string>& lines, size_t from, size_t to) {
  std::string text;
  for (size_t i = from; i < to; ++i) text += lines[i] + "\n";
  return text;
}

// Every example of `path`, or the read's error.
StatusOr<std::vector<Example>> ReadAll(const std::string& path, const config::DataOptions& options) {
  const auto format = MakeLineFormat(options);
  ReadProgress progress;
  FileReader reader(*format, false, &progress);
  std::vector<Example> examples;
  Status st = reader.ReadFile(path, [&](const Example& e) {
    examples.push_back(e);
    return Status::OK();
  });
  if (!st.ok()) return st;
  return examples;
}

TEST_CASE("a gzip data file reads as its plain text, whatever its name; concatenated members read on",
          "[data][files]") {
  testing::TempDir dir;
  const auto lines = testing::ReadLines(testing::kRankDnnSample);
  REQUIRE(lines.size() == 80);
  const auto options = testing::RankDnnOptions();
  auto plain = ReadAll(testing::kRankDnnSample, options);
  REQUIRE(plain.ok());
  REQUIRE(plain->size() == 80);

  const std::string gz = dir.path() + "/part-00000.gz";
  WriteGzip(gz, Joined(lines, 0, 80));
  auto got = ReadAll(gz, options);
  REQUIRE(got.ok());
  CHECK(*got == *plain);

  // No .gz suffix (the magic bytes tell), and two members, as `cat a.gz b.gz` makes.
  const std::string two = dir.path() + "/part-00001";
  WriteGzip(two, Joined(lines, 0, 30));
  WriteGzip(two, Joined(lines, 30, 80), /*append=*/true);
  got = ReadAll(two, options);
  REQUIRE(got.ok());
  CHECK(*got == *plain);

  // The last line without its newline is read too; blank lines are skipped.
  const std::string last = dir.path() + "/last.gz";
  WriteGzip(last, "\n" + Joined(lines, 0, 79) + "\n" + lines[79]);
  got = ReadAll(last, options);
  REQUIRE(got.ok());
  CHECK(*got == *plain);
}

TEST_CASE("a named pipe reads whole, plain or gzip (nothing peeked away)", "[data][files]") {
  testing::TempDir dir;
  const auto lines = testing::ReadLines(testing::kRankDnnSample);
  const auto options = testing::RankDnnOptions();
  auto plain = ReadAll(testing::kRankDnnSample, options);
  REQUIRE(plain.ok());
  const std::string gz = dir.path() + "/sample.gz";
  WriteGzip(gz, Joined(lines, 0, 80));
  for (const std::string& source : {testing::kRankDnnSample, gz}) {
    INFO(source);
    const std::string fifo = dir.path() + "/fifo";
    std::filesystem::remove(fifo);
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::thread writer([&] {  // as `cat source > fifo`
      std::ofstream(fifo, std::ios::binary) << ReadBytes(source);
    });
    auto got = ReadAll(fifo, options);
    writer.join();
    REQUIRE(got.ok());
    CHECK(*got == *plain);
  }
}

TEST_CASE("a gzip file's lines longer than the read buffer arrive whole", "[data][files]") {
  testing::TempDir dir;
  // One example whose first slot holds 40000 ids: a line of about 400 KB.
  std::string line = "click:1";
  for (int j = 0; j < 13; ++j) line += " dense_feature:0.5";
  for (int i = 0; i < 40000; ++i) line += " 1:" + std::to_string(1000000 + i);
  for (int s = 2; s <= 26; ++s) line += " " + std::to_string(s) + ":" + std::to_string(s);
  const std::string gz = dir.path() + "/long.gz";
  WriteGzip(gz, line + "\n" + line + "\n");
  auto got = ReadAll(gz, testing::RankDnnOptions());
  REQUIRE(got.ok());
  REQUIRE(got->size() == 2);
  CHECK((*got)[0].slots[0].size() == 40000);
  CHECK((*got)[0].slots[0].back() == 1039999);
  CHECK((*got)[1] == (*got)[0]);
}

TEST_CASE("a line above 64 MiB ends the read naming file:line (a gzip file may expand a thousandfold)",
          "[data][files]") {
  testing::TempDir dir;
  const auto lines = testing::ReadLines(testing::kRankDnnSample);
  const std::string gz = dir.path() + "/bomb.gz";
  WriteGzip(gz, Joined(lines, 0, 2));
  gzFile out = gzopen(gz.c_str(), "ab");
  REQUIRE(out != nullptr);
  const std::string chunk(size_t{1} << 20, 'a');
  for (int i = 0; i < 65; ++i) REQUIRE(gzwrite(out, chunk.data(), static_cast<unsigned>(chunk.size())) > 0);
  REQUIRE(gzclose(out) == Z_OK);
  auto got = ReadAll(gz, testing::RankDnnOptions());
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(got.status().message(), Catch::StartsWith(gz + ":3: a line longer than 64 MiB"));
}

TEST_CASE("a bad line in a gzip file names file:line; a truncated, corrupt or trailed one is an error naming it",
          "[data][files]") {
  testing::TempDir dir;
  auto lines = testing::ReadLines(testing::kRankDnnSample);
  const auto options = testing::RankDnnOptions();

  auto bad = lines;
  bad[41] = "click:1 dense_feature:0.1 1:not_a_number";
  const std::string with_bad = dir.path() + "/bad.gz";
  WriteGzip(with_bad, Joined(bad, 0, 80));
  auto got = ReadAll(with_bad, options);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(got.status().message(), Catch::StartsWith(with_bad + ":42: "));

  // The first 60% of a compressed file: lines up to the cut arrive, then the error, never a
  // short read passed off as the whole file.
  const std::string whole = dir.path() + "/whole.gz";
  WriteGzip(whole, Joined(lines, 0, 80));
  const std::string bytes = ReadBytes(whole);
  const std::string cut = dir.path() + "/cut.gz";
  { std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() * 6 / 10); }
  got = ReadAll(cut, options);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == StatusCode::kIOError);
  CHECK_THAT(got.status().message(), Catch::StartsWith(cut + ":") && Catch::Contains("truncated"));

  // Text after the last member (cat a.gz b.txt): an error, not the lines dropped as zlib's
  // gzread and zcat drop them.
  const std::string trailing = dir.path() + "/trailing.gz";
  WriteGzip(trailing, Joined(lines, 0, 40));
  { std::ofstream(trailing, std::ios::app | std::ios::binary) << Joined(lines, 40, 80); }
  got = ReadAll(trailing, options);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(got.status().message(), Catch::StartsWith(trailing + ":41: gzip: the bytes after the last compressed "
                                                                  "member are not gzip"));

  // Damaged bytes inside the compressed data.
  std::string damaged = bytes;
  for (size_t i = 40; i < 60 && i < damaged.size(); ++i) damaged[i] = static_cast<char>(~damaged[i]);
  const std::string corrupt = dir.path() + "/corrupt.gz";
  { std::ofstream(corrupt, std::ios::binary) << damaged; }
  got = ReadAll(corrupt, options);
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Catch::StartsWith(corrupt + ":") && Catch::Contains("gzip"));
}

}  // namespace
}  // namespace fleetps::data
