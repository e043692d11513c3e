#pragma once
// The graph of a job's model: the `network:` section when the job has one, else the graph
// its built-in model_type (mlp, ctr_dnn, wide_deep, deepfm, dcn, dlrm) expands to.

#include <memory>

#include "common/config/graph_spec.h"
#include "common/config/model_config.h"

namespace fleetps::graph {

// The layers a built-in model_type's keys describe (for kNetwork: the job's own).
GraphSpec ModelGraphSpec(const ModelOptions& options);
// The activation row's shape: the slots' embedding widths and the dense features.
RowShape ModelRowShape(const ModelOptions& options);
// options.graph, or the built-in model's graph (CHECKs that it builds: ParseModelOptions
// has checked the keys it comes from).
std::shared_ptr<const Graph> ModelGraph(const ModelOptions& options);

}  // namespace fleetps::graph
