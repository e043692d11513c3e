#include "trainer/runtime/online_resume.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "test/support/process.h"

namespace fleetps::trainer {
namespace {

config::OnlineOptions Days(std::vector<std::string> days, uint32_t passes, uint32_t start_pass = 1) {
  config::OnlineOptions o;
  o.days = std::move(days);
  o.pass_per_day = passes;
  o.start_pass = start_pass;
  return o;
}

void CheckAt(const OnlinePosition& at, size_t day_index, uint32_t pass) {
  CHECK(at.day_index == day_index);
  CHECK(at.pass == pass);
}

TEST_CASE("The donefile: Paddle's line per checkpoint, the newest last, replaced whole") {
  const std::string dir = testing::MakeTempDir("donefile") + "/model";
  auto none = ReadLastOnlineSave(dir);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());  // a first run: no file, not even the directory

  REQUIRE(RecordOnlineSave(dir, {"20190720", 1, "/m/20190720/checkpoint-1"}, 1700000000).ok());
  REQUIRE(RecordOnlineSave(dir, {"20190720", -1, "/m/20190720/checkpoint"}, 1700000100).ok());
  CHECK(testing::ReadFile(dir + "/donefile.txt") ==
        "20190720\t1700000000\t/m/20190720/checkpoint-1\t1\t0\n"
        "20190720\t1700000100\t/m/20190720/checkpoint\t-1\t0\n");
  CHECK_FALSE(std::filesystem::exists(dir + "/donefile.txt.tmp"));
  auto last = ReadLastOnlineSave(dir);
  REQUIRE(last.ok());
  REQUIRE(last->has_value());
  CHECK((*last)->day == "20190720");
  CHECK((*last)->pass == -1);
  CHECK((*last)->path == "/m/20190720/checkpoint");

  // The same day and pass saved again (a job resumed before it) moves to the end.
  REQUIRE(RecordOnlineSave(dir, {"20190720", 1, "/m/20190720/checkpoint-1"}, 1700000200).ok());
  CHECK(testing::ReadFile(dir + "/donefile.txt") ==
        "20190720\t1700000100\t/m/20190720/checkpoint\t-1\t0\n"
        "20190720\t1700000200\t/m/20190720/checkpoint-1\t1\t0\n");

  // Trailing blank lines and CRLF endings are read past; Paddle's four-column lines too.
  testing::WriteFile(dir + "/donefile.txt", "20190721\t5\t/m/a\t3\r\n\n  \n");
  last = ReadLastOnlineSave(dir);
  REQUIRE(last.ok());
  REQUIRE(last->has_value());
  CHECK((*last)->day == "20190721");
  CHECK((*last)->pass == 3);
  CHECK((*last)->path == "/m/a");

  // A line that is not a checkpoint's: file:line, and how to start over.
  for (const char* bad : {"20190721 5 /m/a 3", "20190721\tkey\t/m/a\t3", "20190721\t5\t/m/a\tlast",
                          "20190721\t5\t/m/a\t-2", "\t5\t/m/a\t1", "20190721\t5\t\t1"}) {
    INFO(bad);
    testing::WriteFile(dir + "/donefile.txt", std::string("20190720\t1\t/m/b\t1\t0\n") + bad + "\n");
    auto st = ReadLastOnlineSave(dir);
    REQUIRE_FALSE(st.ok());
    CHECK(st.status().IsInvalidArgument());
    CHECK_THAT(st.status().message(),
               Catch::Contains(dir + "/donefile.txt:2:") &&
                   Catch::Contains("remove the file to train the online job from its first day"));
  }
}

TEST_CASE("An online job starts after the newest checkpoint, or at its configured start when that is later") {
  const auto online = Days({"20190720", "20190721", "20190722"}, 3);
  CheckAt(OnlineStartAfter(online, std::nullopt), 0, 1);
  CheckAt(OnlineStartAfter(online, OnlineSave{"20190721", 1, "p"}), 1, 2);
  CheckAt(OnlineStartAfter(online, OnlineSave{"20190721", 3, "p"}), 2, 1);   // the day's last pass
  CheckAt(OnlineStartAfter(online, OnlineSave{"20190721", -1, "p"}), 2, 1);  // the day's end
  CheckAt(OnlineStartAfter(online, OnlineSave{"20190722", -1, "p"}), 3, 1);  // everything trained
  CheckAt(OnlineStartAfter(online, OnlineSave{"20190801", 2, "p"}), 3, 1);   // after the last day
  // A checkpoint from before the configured days: the job starts at their start.
  CheckAt(OnlineStartAfter(Days({"20190720", "20190721"}, 3, 2), OnlineSave{"20190719", -1, "p"}), 0, 2);
  // A checkpoint between configured days (a day left out): the next configured day.
  CheckAt(OnlineStartAfter(Days({"20190720", "20190725"}, 3), OnlineSave{"20190722", 1, "p"}), 1, 1);
  // The configured start_pass is later than the pass after the checkpoint: it wins.
  CheckAt(OnlineStartAfter(Days({"20190720", "20190721"}, 4, 3), OnlineSave{"20190720", 1, "p"}), 0, 3);
  CheckAt(OnlineStartAfter(Days({"20190720", "20190721"}, 4, 3), OnlineSave{"20190720", 3, "p"}), 0, 4);
  // Days as numbers: "9" comes before "10"; text otherwise.
  CheckAt(OnlineStartAfter(Days({"9", "10", "11"}, 1), OnlineSave{"9", -1, "p"}), 1, 1);
  CheckAt(OnlineStartAfter(Days({"8", "10"}, 1), OnlineSave{"9", -1, "p"}), 1, 1);
  CheckAt(OnlineStartAfter(Days({"mon", "tue"}, 2), OnlineSave{"mon", 1, "p"}), 0, 2);
}

}  // namespace
}  // namespace fleetps::trainer
