#pragma once
// The section parsers of the trainer YAML (ParseTrainerYaml, trainer_config.cc), one file per
// section: trainer_config_runner.cc reads `runner:`, trainer_config_fleetps.cc reads `fleetps:`.
// `hyper_parameters:` is read by ParseModelOptions (model_config.cc) and the data reader's
// shapes by ParsePaddleRecDataOptions (data_config.cc). Internal to common/config: include it
// from nowhere else.

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/config/trainer_config.h"
#include "common/config/yaml_util.h"
#include "common/status.h"

namespace fleetps::config {

// Every `runner:` key fleetps reads: the trainer's own and the data reader's.
std::vector<std::string> RunnerKeys();

// Keys of PaddleRec's `runner:` map that fleetps accepts and ignores.
std::vector<std::string> PaddleRecIgnoredRunnerKeys();

// `runner:` (a node that is present), read into `o`: the sync mode, epochs, threads, model
// paths (relative ones resolved against the directory of `file_name`) and the online job.
Status ParseRunnerSection(const YAML::Node& runner, const YamlContext& rctx, const std::string& file_name,
                          TrainerOptions* o);

// `fleetps:` (a node that is present), read into `o`: overrides of the tables derived from the
// model, the trainer's fleetps-only knobs and the heter, collective, gpups and dense subsections.
// `server:` is checked as ParseServerYaml would, and dropped.
Status ParseFleetpsSection(const YAML::Node& ext, const YamlContext& ectx, TrainerOptions* o);

}  // namespace fleetps::config
