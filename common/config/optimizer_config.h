#pragma once
// The one reader of an `optimizer:` map, shared by the pserver YAML (tables[i].optimizer)
// and the job YAML (hyper_parameters.optimizer, fleetps.sparse_table/dense_table.optimizer),
// so both files accept the same spellings and reject the same values:
//
//   optimizer: {name: adam, learning_rate: 0.001, beta1: 0.9, beta2: 0.999, epsilon: 1.0e-8,
//               weight_bounds: [-10, 10]}
//   optimizer: {class: Adam, learning_rate: 0.001, strategy: async}     # PaddleRec's spelling

#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "common/config/table_options.h"
#include "common/config/yaml_util.h"
#include "common/status.h"

namespace fleetps::config {

// "sgd" | "adagrad" | "adam".
std::string_view OptimizerKindName(OptimizerKind kind);

// Reads an `optimizer:` map over the values already in *out (absent keys keep them):
//   name | class         sgd | adagrad | adam, case-insensitive (PaddleRec writes class: Adam);
//                        one of the two spellings, not both
//   learning_rate        finite, > 0
//   initial_accumulator  finite, >= 0 (Adagrad's starting g2sum)
//   beta1, beta2         in [0, 1) (Adam)
//   epsilon              finite, > 0 (Adagrad, Adam)
//   weight_bounds        [min, max], both finite, min <= max
// PaddleRec's `strategy` and `adam_lazy_mode` are accepted and ignored (the sync mode is the
// runner's; lazy updates are what a sparse table does anyway). Every value given is checked,
// whatever the rule uses, with the checks of ValidateOptimizer. Errors name file:line and the
// key; on error *out is unchanged.
Status ParseOptimizer(const YAML::Node& node, const YamlContext& ctx, OptimizerOptions* out);

// The checks ParseOptimizer applies, for options built in code: OK, or InvalidArgument
// naming the field ("optimizer.beta1: expected a number in [0, 1), got 1").
Status ValidateOptimizer(const OptimizerOptions& options);

}  // namespace fleetps::config
