// The process_* series: the /proc stat parser on hand-written lines (a command name with
// spaces and parentheses, short and corrupt lines), and live samples of this process that
// move as it spends CPU and opens files.
#include "common/metrics/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <regex>

#include "common/metrics/registry.h"

namespace fleetps::metrics {
namespace {

// A /proc/<pid>/stat line whose fields 14, 15, 22, 23, 24 are 111, 22, 3333, 4096000, 250.
std::string StatLine(const std::string& comm) {
  std::string line = "4242 (" + comm + ") S";
  for (int field = 4; field <= 52; ++field) {
    std::string value = "0";
    if (field == 14) value = "111";
    if (field == 15) value = "22";
    if (field == 22) value = "3333";
    if (field == 23) value = "4096000";
    if (field == 24) value = "250";
    line += " " + value;
  }
  return line;
}

TEST_CASE("ParseProcStat counts the fields after the command's last ')'") {
  for (const std::string comm : {"pserver", "a (b) c) d", "))"}) {
    auto s = ParseProcStat(StatLine(comm));
    INFO(comm);
    REQUIRE(s.ok());
    CHECK(s->utime_ticks == 111);
    CHECK(s->stime_ticks == 22);
    CHECK(s->start_ticks == 3333);
    CHECK(s->vsize_bytes == 4096000);
    CHECK(s->rss_pages == 250);
  }
  CHECK_THAT(ParseProcStat("4242 (x) S 1 2 3").status().message(), Catch::Contains("field 14 is missing"));
  CHECK_THAT(ParseProcStat("4242 x S 1 2 3").status().message(), Catch::Contains("without the ')'"));
  std::string corrupt = StatLine("x");
  corrupt.replace(corrupt.find(" 111 "), 5, " 1x1 ");
  CHECK_THAT(ParseProcStat(corrupt).status().message(), Catch::Contains("field 14") && Catch::Contains("'1x1'"));
}

TEST_CASE("A sample of this process moves with its CPU time and open files") {
  const ProcessSample before = SampleThisProcess();
  CHECK(before.resident_bytes > 1024 * 1024);
  CHECK(before.virtual_bytes >= before.resident_bytes);
  CHECK(before.max_fds > 0);
  CHECK(before.open_fds >= 3);  // stdin, stdout, stderr at least
  CHECK(before.open_fds <= before.max_fds);
  const double now = static_cast<double>(std::time(nullptr));
  CHECK(before.start_time_seconds > now - 3600);  // started within the hour
  CHECK(before.start_time_seconds <= now + 1);

  // 0.3 s of CPU (counted by the CPU clock, not the wall: a loaded machine may give this
  // thread a fraction of a core), then four more descriptors.
  const auto cpu_now = [] { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; };
  const double cpu_until = cpu_now() + 0.3;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  volatile uint64_t sink = 0;
  while (cpu_now() < cpu_until && std::chrono::steady_clock::now() < give_up) sink = sink + 1;
  int fds[4];
  for (int& fd : fds) fd = ::open("/dev/null", O_RDONLY);
  const ProcessSample after = SampleThisProcess();
  for (int fd : fds) ::close(fd);
  CHECK(after.cpu_seconds >= before.cpu_seconds + 0.2);
  CHECK(after.open_fds == before.open_fds + 4);
  CHECK(after.start_time_seconds == before.start_time_seconds);
}

TEST_CASE("Every registry's exposition starts with the process series") {
  Registry registry;
  registry.GetCounter("fleetps_example_total", "An example").Increment(2);
  const std::string text = registry.Serialize();
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                           "process_open_fds", "process_max_fds", "process_start_time_seconds"}) {
    INFO(name);
    CHECK(std::regex_search(
        text, std::regex(std::string("\n# TYPE ") + name + " (counter|gauge)\n" + name + " [0-9.e+]+\n")));
  }
  CHECK_THAT(text, Catch::Contains("# TYPE process_cpu_seconds_total counter"));
  CHECK_THAT(text, Catch::Contains("\nfleetps_example_total 2\n"));
}

}  // namespace
}  // namespace fleetps::metrics
