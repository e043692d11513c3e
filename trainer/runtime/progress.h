#pragma once
// The training epoch's status line (common/progress.h's ProgressLine shows it on a
// terminal, instead of a log line every print_interval steps).

#include <cstdint>
#include <optional>
#include <string>

#include "common/progress.h"

namespace fleetps::trainer {

struct TrainingProgress {
  uint32_t epoch = 0, epochs = 0;
  uint64_t examples = 0;             // this trainer's, this epoch
  std::optional<uint64_t> expected;  // this epoch's examples when known (the previous epoch's)
  double seconds = 0;                // since the epoch began
  double loss = 0, auc = 0;          // the last interval's
};

// "epoch 2/5  45% [#########           ] 123456 examples  12345/s  loss 0.45120 auc 0.70120  ETA 0:12";
// without `expected`: no bar, percentage or ETA. `width` is the bar's, in characters.
std::string FormatTrainingProgress(const TrainingProgress& p, int width = 20);

}  // namespace fleetps::trainer
