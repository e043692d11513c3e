#pragma once
// Helpers of the graph tests: layers built in code, a one-op graph around a kernel under test,
// and BuildGraph's verdict on it.

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config/graph_spec.h"

namespace fleetps::trainer::graph::testing {

inline fleetps::graph::GraphLayer Layer(const std::string& name, const std::string& op, std::vector<std::string> inputs,
                                        fleetps::graph::Attrs attrs = {}) {
  return fleetps::graph::GraphLayer{.name = name,
                                    .op = op,
                                    .inputs = std::move(inputs),
                                    .outputs = {name},
                                    .attrs = std::move(attrs),
                                    .where = "test"};
}

// `spec` (its inputs) with layer "op" (`op` over `inputs`) and its sum as the logit.
inline StatusOr<std::shared_ptr<const fleetps::graph::Graph>> OneOpGraph(fleetps::graph::GraphSpec spec,
                                                                         const std::string& op,
                                                                         fleetps::graph::Attrs attrs,
                                                                         std::vector<std::string> inputs,
                                                                         const fleetps::graph::RowShape& row) {
  spec.where = "test";
  spec.layers.push_back(Layer("op", op, std::move(inputs), std::move(attrs)));
  spec.layers.push_back(Layer("sum", "reduce_sum", {"op"}));
  spec.outputs.push_back(fleetps::graph::GraphOutput{.name = "click", .input = "sum", .where = "test"});
  return fleetps::graph::BuildGraph(std::move(spec), row);
}

// The graph, failing the test with BuildGraph's message when it is refused.
inline std::shared_ptr<const fleetps::graph::Graph> Built(
    const StatusOr<std::shared_ptr<const fleetps::graph::Graph>>& graph) {
  INFO(graph.status().message());
  REQUIRE(graph.ok());
  return *graph;
}

// BuildGraph's message for `graph` ("" when it was built).
inline std::string BuildMessage(const StatusOr<std::shared_ptr<const fleetps::graph::Graph>>& graph) {
  return graph.ok() ? "" : graph.status().message();
}

}  // namespace fleetps::trainer::graph::testing
