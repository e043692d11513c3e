// Expanding data paths and splitting file lists across trainers.

#include <catch2/catch.hpp>

#include "trainer/data/file_list.h"
#include "test/trainer/data/data_test_util.h"

namespace fleetps::data {
namespace {

using Files = std::vector<std::string>;

TEST_CASE("a directory expands to its data files sorted by name", "[data][files]") {
  testing::TempDir dir;
  const std::string b = dir.Write("train/part-b", {"x"});
  const std::string a = dir.Write("train/part-a", {"x"});
  dir.Write("train/.done", {""});           // hidden: skipped
  dir.Write("train/_SUCCESS", {""});        // Hadoop's marker: skipped
  dir.Write("train/_committed_1", {"{}"});  // a committer's: skipped
  dir.Write("train/sub/part-c", {"x"});     // not recursive
  const std::string single = dir.Write("extra.txt", {"x"});

  auto files = ExpandFileList({dir.path() + "/train", single});
  REQUIRE(files.ok());
  CHECK(*files == Files{a, b, single});

  // An online job's donefile is not data, in a directory; a file named on its own stays.
  dir.Write("train/data.done", {""});
  auto with_done = ExpandFileList({dir.path() + "/train"});
  REQUIRE(with_done.ok());
  CHECK(with_done->size() == 3);
  auto skipped = ExpandFileList({dir.path() + "/train", single}, "data.done");
  REQUIRE(skipped.ok());
  CHECK(*skipped == Files{a, b, single});
}

TEST_CASE("the real sample directory expands to the sample file", "[data][files]") {
  auto files = ExpandFileList({testing::kPaddleRecDir + "/rank_dnn/data/sample_data/train"});
  REQUIRE(files.ok());
  CHECK(*files == Files{testing::kPaddleRecDir + "/rank_dnn/data/sample_data/train/sample_train.txt"});
}

TEST_CASE("missing paths and empty directories are errors naming the path", "[data][files]") {
  testing::TempDir dir;
  auto missing = ExpandFileList({dir.path() + "/nope"});
  CHECK(missing.status().IsNotFound());
  CHECK_THAT(missing.status().message(), Catch::Contains(dir.path() + "/nope"));
  std::filesystem::create_directories(dir.path() + "/empty");
  auto empty = ExpandFileList({dir.path() + "/empty"});
  CHECK(empty.status().IsInvalidArgument());
  CHECK_THAT(empty.status().message(), Catch::Contains("no data files"));
}

TEST_CASE("file i goes to trainer i % trainers_num", "[data][files]") {
  const Files files{"f0", "f1", "f2", "f3", "f4", "f5", "f6"};
  CHECK(FilesOfTrainer(files, 0, 3) == Files{"f0", "f3", "f6"});
  CHECK(FilesOfTrainer(files, 1, 3) == Files{"f1", "f4"});
  CHECK(FilesOfTrainer(files, 2, 3) == Files{"f2", "f5"});
  CHECK(FilesOfTrainer(files, 0, 1) == files);
  CHECK(FilesOfTrainer({"f0"}, 1, 2).empty());
}

TEST_CASE("ListTrainerFiles splits only when split_file_list", "[data][files]") {
  testing::TempDir dir;
  const Files paths = testing::WriteNumberedRankDnnFiles(dir, "part", 4, 1);
  auto split = ListTrainerFiles({dir.path()}, true, 1, 2);
  REQUIRE(split.ok());
  CHECK(*split == Files{paths[1], paths[3]});
  auto whole = ListTrainerFiles({dir.path()}, false, 1, 2);
  REQUIRE(whole.ok());
  CHECK(*whole == paths);
}

}  // namespace
}  // namespace fleetps::data
