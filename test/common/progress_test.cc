// Progress for people at a terminal: the line's control sequences, the work line's text,
// and the reporter's choice between the terminal line and plain log lines.
#include "common/progress.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <mutex>
#include <string>
#include <vector>

namespace fleetps {
namespace {

std::string Drain(int fd) {
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return got;
}

TEST_CASE("ProgressLine rewrites one line in place and erases it; off when not a terminal") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  {
    ProgressLine off(fds[1]);  // a pipe is not a terminal
    CHECK_FALSE(off.enabled());
    off.Update("x");
    ProgressLine line(fds[1], true);
    line.Update("one", std::chrono::milliseconds(0));
    line.Update("two", std::chrono::milliseconds(0));
    line.Update("dropped", std::chrono::hours(1));  // within the interval
    line.Clear();
    line.Clear();  // nothing shown: nothing written
  }
  ::close(fds[1]);
  CHECK(Drain(fds[0]) == "\r\033[Kone\r\033[Ktwo\r\033[K");
}

TEST_CASE("Work progress: bar, pieces, items, rate and ETA; the time spent when the size is unknown") {
  WorkProgress p;
  p.what = "trainer 0: loading data";
  p.done = 5;
  p.total = 20;
  p.unit = "files";
  p.items = 40000;
  p.items_unit = "examples";
  p.seconds = 2;
  CHECK(FormatWorkProgress(p, 8) ==
        "trainer 0: loading data   25% [##      ] 5/20 files  40000 examples  20000/s  ETA 0:06");
  p.done = 20;  // finished: a full bar, no ETA
  CHECK(FormatWorkProgress(p, 8) == "trainer 0: loading data  100% [########] 20/20 files  40000 examples  20000/s");
  p.done = 0;  // nothing finished yet: no ETA to extrapolate
  p.items = 0;
  CHECK(FormatWorkProgress(p, 8) == "trainer 0: loading data    0% [        ] 0/20 files  0 examples  0/s");

  WorkProgress save;
  save.what = "pserver 1: saving ckpt/v3";
  save.done = 1;
  save.total = 3;
  save.unit = "files";
  save.seconds = 10;
  CHECK(FormatWorkProgress(save, 6) == "pserver 1: saving ckpt/v3   33% [##    ] 1/3 files  ETA 0:20");

  WorkProgress wait;
  wait.what = "trainer 0: saving the model to out/model";
  wait.seconds = 75.4;
  CHECK(FormatWorkProgress(wait) == "trainer 0: saving the model to out/model  1:15");
}

TEST_CASE("ProgressReporter: the terminal line on a terminal, else a log line per interval, none before") {
  WorkProgress p;
  p.what = "loading";
  p.done = 1;
  p.total = 2;
  p.unit = "files";
  p.seconds = 1;
  {  // Not a terminal, interval 0: every update is a log line, nothing is written to the fd.
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    std::vector<std::string> logged;
    {
      ProgressReporter r(
          std::chrono::milliseconds(0), [&](const std::string& l) { logged.push_back(l); }, fds[1], false);
      CHECK_FALSE(r.on_terminal());
      r.Update(p);
      p.done = 2;
      r.Update(p);
      r.Done();
    }
    ::close(fds[1]);
    CHECK(Drain(fds[0]).empty());
    CHECK(logged == std::vector<std::string>{"loading   50% [##########          ] 1/2 files  ETA 0:01",
                                             "loading  100% [####################] 2/2 files"});
  }
  {  // Not a terminal, a long interval: short work logs nothing.
    std::vector<std::string> logged;
    ProgressReporter r(
        std::chrono::hours(1), [&](const std::string& l) { logged.push_back(l); }, 2, false);
    r.Update(p);
    CHECK(logged.empty());
  }
  {  // A terminal: the line, rewritten and erased at the end; no log lines.
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    std::vector<std::string> logged;
    {
      ProgressReporter r(
          std::chrono::milliseconds(0), [&](const std::string& l) { logged.push_back(l); }, fds[1], true);
      p.done = 1;
      r.Update(p, std::chrono::milliseconds(0));
    }  // the destructor erases the line
    ::close(fds[1]);
    CHECK(Drain(fds[0]) == "\r\033[Kloading   50% [##########          ] 1/2 files  ETA 0:01\r\033[K");
    CHECK(logged.empty());
  }
}

TEST_CASE("ProgressTicker reports the time spent until it is destroyed, then erases the line") {
  std::vector<std::string> logged;
  std::mutex mu;
  ProgressReporter r(
      std::chrono::milliseconds(0),
      [&](const std::string& l) {
        std::lock_guard<std::mutex> lock(mu);
        logged.push_back(l);
      },
      2, false);
  {
    ProgressTicker ticker(r, "saving", std::chrono::milliseconds(1));
    for (;;) {  // until it has ticked twice
      std::lock_guard<std::mutex> lock(mu);
      if (logged.size() >= 2) break;
    }
  }
  std::lock_guard<std::mutex> lock(mu);  // the thread has been joined: no more ticks
  CHECK_THAT(logged[0], Catch::Matches("saving  0:[0-9]{2}"));
  CHECK_THAT(logged[1], Catch::Matches("saving  0:[0-9]{2}"));
}

}  // namespace
}  // namespace fleetps
