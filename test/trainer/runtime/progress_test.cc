// The terminal progress line: its text, and the control sequences it writes.
#include "trainer/runtime/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

namespace fleetps::trainer {
namespace {

TEST_CASE("Training progress: bar, rate and ETA once the epoch's size is known") {
  TrainingProgress p;
  p.epoch = 2;
  p.epochs = 5;
  p.examples = 45000;
  p.seconds = 3;
  p.loss = 0.4512;
  p.auc = 0.7012;
  CHECK(FormatTrainingProgress(p, 10) == "epoch 2/5 45000 examples  15000/s  loss 0.45120 auc 0.70120");
  p.expected = 100000;
  CHECK(FormatTrainingProgress(p, 10) ==
        "epoch 2/5  45% [#####     ] 45000 examples  15000/s  loss 0.45120 auc 0.70120  ETA 0:04");
  p.examples = 120000;  // more than the previous epoch: a full bar, no negative ETA
  p.seconds = 8;
  CHECK_THAT(FormatTrainingProgress(p, 10), Catch::Contains("100% [##########]") && Catch::EndsWith("ETA 0:00"));
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
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  CHECK(got == "\r\033[Kone\r\033[Ktwo\r\033[K");
}

}  // namespace
}  // namespace fleetps::trainer
