// The training epoch's progress line (ProgressLine itself: test/common/progress_test.cc).
#include "trainer/runtime/progress.h"

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

}  // namespace
}  // namespace fleetps::trainer
