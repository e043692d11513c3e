#pragma once
// The cpu-trainer jobs: train (epochs, evaluation on the test split, model save, cluster
// shutdown) and infer (score a data set with a saved model). Both run over a PsClient
// that main() connects either to the pservers or to an in-process server (local mode).

#include <string>

#include "common/config/trainer_config.h"
#include "common/status.h"
#include "trainer/client/ps_client.h"

namespace fleetps::trainer {

struct JobFlags {
  std::string report_path;       // JSON summary written at the end ("" = none)
  std::string predictions_path;  // infer/eval: "label prediction" lines ("" = none)
};

Status RunTrainJob(const config::TrainerOptions& options, PsClient& client, const JobFlags& flags);
Status RunInferJob(const config::TrainerOptions& options, PsClient& client, const JobFlags& flags);

}  // namespace fleetps::trainer
