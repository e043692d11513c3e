#pragma once
// The ops a `network:` layer may use: for each, its arity, its keys, and the rule that gives
// its output shapes and parameter shapes from its inputs' shapes (graph_ops.cc). The
// kernels that compute them are in trainer/graph; docs/MODELS.md is the user's reference.

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/config/graph_spec.h"
#include "common/status.h"

namespace fleetps::graph {

struct OpSignature {
  std::vector<Shape> outputs;
  std::vector<Shape> params;  // in the order the op lays them out in the flat vector
};

struct OpSchema {
  std::string name;
  size_t min_inputs = 1;
  size_t max_inputs = 1;          // SIZE_MAX: any number
  std::vector<std::string> keys;  // the attributes it reads
  // Output and parameter shapes; errors say what was expected (BuildGraph adds where).
  std::function<StatusOr<OpSignature>(const Attrs&, std::span<const Shape> inputs)> infer;
  size_t outputs = 1;  // tensors it makes; 0: as many as the layer's `outputs` (split)
};

// Every op, in the order docs/MODELS.md lists them.
const std::vector<OpSchema>& OpSchemas();
// Null when `name` is not an op.
const OpSchema* FindOpSchema(const std::string& name);
std::vector<std::string> OpNames();

}  // namespace fleetps::graph
